"""The model-management seams nodes/model_residency.py wraps: listed by nodes/seams.py (checked at
start and against every snapshot by test_comfyui_symbols.py), and the parameters its `*args,
**kwargs` wrappers read by position are where each snapshot's source has them."""

from __future__ import annotations

import ast
import importlib

import pytest

from tests.unit.test_comfyui_symbols import ROOTS
from tests.unit.test_routes import PACK, import_pack

import_pack()
seams = importlib.import_module(f"{PACK}.nodes.seams")

WRAPPED = (
    "comfy.model_management.load_models_gpu",
    "comfy.model_management.free_memory",
    "comfy.model_management.unload_all_models",
    "comfy.model_patcher.ModelPatcher.__init__",
    "comfy.model_management.LoadedModel.model_load",
    "comfy.model_management.LoadedModel.model_unload",
    "comfy.model_management.current_loaded_models",
    "comfy.model_patcher.ModelPatcher.unpatch_model",
    "comfy.model_patcher.ModelPatcher.partially_load",
    "comfy.model_patcher.ModelPatcher.partially_unload",
)
# (file, class or None, function) -> the leading parameters the wrappers read by position
POSITIONS = {
    ("comfy/model_management.py", None, "load_models_gpu"): ["models"],
    ("comfy/model_patcher.py", "ModelPatcher", "unpatch_model"): ["self", "device_to", "unpatch_weights"],
    ("comfy/model_management.py", "LoadedModel", "model_unload"): ["self", "memory_to_free"],
}


def test_every_model_management_seam_is_listed():
    used = seams.used_symbols()
    for symbol in WRAPPED:
        assert "nodes/model_residency.py" in used.get(symbol, ()), symbol


def _function(tree: ast.Module, cls: str | None, name: str) -> ast.FunctionDef:
    scope = tree.body
    if cls is not None:
        scope = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls).body
    return next(n for n in scope if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.skipif(not ROOTS, reason="no ComfyUI snapshot beside the checkout")
@pytest.mark.parametrize("version", sorted(ROOTS) or ["none"])
def test_the_parameters_read_by_position_are_there(version):
    for (path, cls, name), expected in POSITIONS.items():
        tree = ast.parse((ROOTS[version] / path).read_text(encoding="utf-8"))
        params = [a.arg for a in _function(tree, cls, name).args.args]
        assert params[: len(expected)] == expected, (version, name, params)

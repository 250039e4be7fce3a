"""Every ComfyUI symbol the pack uses (nodes/seams.py reads them from the adapter code) exists in
each ComfyUI snapshot the pack is tested with, checked by parsing the snapshot's sources (no import,
no ComfyUI requirements): a symbol that disappears or moves fails here, before any server test.

Snapshots: `../shared/comfyui` (0.8.0) and `../shared/comfyui-0.33` beside the checkout, as CI has
them, COMFYUI_PATH, and the folders in COMFYUI_SNAPSHOTS (os.pathsep-separated). Skipped without any.
"""

from __future__ import annotations

import ast
import importlib
import os
from pathlib import Path

import pytest

from tests.unit.comfyui_snapshot import Snapshot
from tests.unit.test_routes import PACK, import_pack

import_pack()
seams = importlib.import_module(f"{PACK}.nodes.seams")  # never as `nodes`: that name is ComfyUI's

REPO_ROOT = Path(__file__).resolve().parents[2]


def snapshot_roots() -> dict[str, Path]:
    candidates = [REPO_ROOT.parent / "shared" / "comfyui", REPO_ROOT.parent / "shared" / "comfyui-0.33"]
    candidates += [Path(p) for p in os.environ.get("COMFYUI_SNAPSHOTS", "").split(os.pathsep) if p]
    if os.environ.get("COMFYUI_PATH"):
        candidates.append(Path(os.environ["COMFYUI_PATH"]))
    roots = {}
    for path in candidates:
        version_file = path / "comfyui_version.py"
        if version_file.is_file():
            version = version_file.read_text(encoding="utf-8").split('"')[1]
            roots.setdefault(version, path.resolve())
    return roots


ROOTS = snapshot_roots()
USED = seams.used_symbols()


def test_ci_checks_both_snapshots():
    """CI has both snapshots beside the checkout: there the checks below never skip."""
    if not os.environ.get("CI"):
        pytest.skip("outside CI the snapshots are optional")
    assert {"0.8.0", "0.33.0"} <= set(ROOTS), f"snapshots found: {sorted(ROOTS)}"


def test_the_inventory_finds_imports_attribute_reads_and_getattr():
    source = (
        "import comfy.model_management as mm\n"
        "import torch\n"
        "from server import PromptServer\n"
        "from .runtime import get_runtime\n"
        "def f(execution):\n"
        "    import execution\n"
        "    mm.get_free_memory(torch.device('cpu'))\n"
        "    getattr(getattr(execution, 'PromptExecutor', None), 'execute_async', None)\n"
        "    PromptServer.instance.send_sync('x', {})\n"
    )
    assert seams.symbols_in_source(source) == {
        "comfy.model_management",
        "comfy.model_management.get_free_memory",
        "server.PromptServer",
        "server.PromptServer.instance",
        "server.PromptServer.instance.send_sync",
        "execution",
        "execution.PromptExecutor",
        "execution.PromptExecutor.execute_async",
    }


def test_the_pack_uses_the_seams_it_is_known_to_use():
    for symbol in (
        "execution.reset_progress_state",
        "execution.PromptExecutor.execute_async",
        "comfy_execution.progress.add_progress_handler",
        "comfy.lora.calculate_weight",
        "comfy.model_management.get_free_memory",
        "comfy.model_patcher.ModelPatcher",
        "comfy_api.latest.io.ComfyNode",
        "folder_paths.get_full_path",
    ):
        assert symbol in USED, symbol


@pytest.mark.skipif(not ROOTS, reason="no ComfyUI snapshot beside the checkout (see the module docstring)")
@pytest.mark.parametrize("version", sorted(ROOTS) or ["none"])
def test_every_symbol_the_pack_uses_is_in_the_snapshot(version):
    snapshot = Snapshot(ROOTS[version])
    missing = {symbol: files for symbol, files in USED.items() if not snapshot.resolves(symbol)}
    assert not missing, f"ComfyUI {version} lacks: {missing}"


@pytest.mark.skipif(not ROOTS, reason="no ComfyUI snapshot beside the checkout")
def test_the_static_lookup_fails_for_what_is_not_there():
    snapshot = Snapshot(next(iter(ROOTS.values())))
    assert snapshot.resolves("comfy.model_management.get_free_memory")
    assert snapshot.resolves(
        "comfy_api.latest.io.Model.Input"
    )  # a base class's nested class, via a star import
    assert snapshot.resolves("server.PromptServer.instance")  # set as PromptServer.instance = self
    for absent in (
        "comfy.model_management.get_free_memory_v2",
        "comfy.no_such_module.thing",
        "comfy_api.latest.io.Model.NoSuchPart",
        "execution.PromptExecutor.no_such_method",
        "no_such_top_level",
    ):
        assert not snapshot.resolves(absent), absent


def test_self_check_names_what_is_missing_once(caplog):
    found = seams.self_check(["os.path.join", "os.no_such_function", "no_such_module_anywhere.x"])
    assert found == ("os.no_such_function", "no_such_module_anywhere.x") == seams.missing_seams()
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "os.no_such_function, no_such_module_anywhere.x" in warnings[0].getMessage()
    assert seams.self_check(["os.path.join"]) == () == seams.missing_seams()


KNOWN_PROGRESS_HOOKS = {
    "__init__",
    "set_registry",
    "start_handler",
    "update_handler",
    "finish_handler",
    "reset",
    "enable",
    "disable",
}


@pytest.mark.skipif(not ROOTS, reason="no ComfyUI snapshot beside the checkout")
@pytest.mark.parametrize("version", sorted(ROOTS) or ["none"])
def test_the_progress_handler_offers_no_hook_the_profile_does_not_know(version):
    """A newer ComfyUI's progress "activity" signal (a node's model loading) would be a new method
    here: this fails then, so the profile hook can use it (see nodes/profile_hook.py's docstring)."""
    snapshot = Snapshot(ROOTS[version])
    found = snapshot.member(("module", "comfy_execution.progress"), "ProgressHandler")
    assert found is not None and found[0] == "class"
    methods = {n.name for n in found[1].body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert methods - KNOWN_PROGRESS_HOOKS == set(), f"ComfyUI {version}: new ProgressHandler hooks"

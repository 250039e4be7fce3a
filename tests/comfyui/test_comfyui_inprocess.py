"""In-process tests: the pack loaded by ComfyUI's own loader, run on tiny real objects."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import pytest

pytestmark = pytest.mark.comfyui

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_models_node(comfy, runtime, **inputs):
    node = comfy.nodes.NODE_CLASS_MAPPINGS["PipelineMonitorModels"]
    runtime.recorder.begin_run("pm-inprocess-1", None)
    try:
        output = node.PREPARE_CLASS_CLONE({"hidden_inputs": {"UNIQUE_ID": "7"}}).execute(**inputs)
    finally:
        report = runtime.recorder.end_run("success")
    return output, report.to_dict()


def test_pack_registers_its_node_and_routes(comfy):
    assert "PipelineMonitorModels" in comfy.nodes.NODE_CLASS_MAPPINGS
    paths = {getattr(route, "path", None) for route in comfy.server.routes}
    assert {"/pipeline_monitor/runs", "/pipeline_monitor/runs/{prompt_id}"} <= paths


def test_models_node_passes_the_same_objects_through(comfy, tiny, pack_runtime):
    output, _ = run_models_node(comfy, pack_runtime, model=tiny.model, clip=tiny.clip, vae=tiny.vae)
    model, clip, vae = output.result
    assert model is tiny.model
    assert clip is tiny.clip
    assert vae is tiny.vae
    assert output.ui is not None and isinstance(output.ui["text"], list)


def test_models_step_describes_each_object(comfy, tiny, pack_runtime):
    _, report = run_models_node(comfy, pack_runtime, model=tiny.model, clip=tiny.clip, vae=tiny.vae)
    steps = [s for s in report["steps"] if s["kind"] == "models"]
    assert len(steps) == 1, report["steps"]
    step = steps[0]
    assert step["node_id"] == "7"
    assert step["monitor_errors"] == []
    objects = step["details"]["objects"]
    assert set(objects) == {"model", "clip", "vae"}
    expected = {
        "model": (tiny.model, "ModelPatcher", "BaseModel"),
        "clip": (tiny.clip, "CLIP", "SD1ClipModel"),
        "vae": (tiny.vae, "VAE", "AutoencoderKL"),
    }
    for kind, (obj, class_name, module_class) in expected.items():
        info = objects[kind]
        assert info["object_id"] == id(obj)
        assert info["class"] == class_name
        assert info["module_class"] == module_class
        assert info["size_bytes"] > 0 and info["n_elements"] > 0
        assert info["device"] == "cpu"
        assert info["load_device"] == "cpu" and info["offload_device"] == "cpu"
        assert info["bytes_by_device"] == {"cpu": info["size_bytes"]}
        assert info["n_patches"] == 0
    assert objects["model"]["size_bytes"] == tiny.model.model_size()
    assert objects["vae"]["latent_channels"] == 4
    summary = step["summary"]
    assert summary["n_objects"] == 3
    assert summary["total_size_bytes"] == sum(o["size_bytes"] for o in objects.values())
    assert summary["model_class"] == "BaseModel"


def test_models_step_counts_patches(comfy, tiny, pack_runtime):
    import torch

    patched = tiny.model.clone()
    key = next(k for k in patched.model.state_dict() if k.endswith(".weight"))
    weight = patched.model.state_dict()[key]
    added = patched.add_patches({key: ("diff", (torch.zeros_like(weight),))}, 0.5)
    assert added == [key]
    output, report = run_models_node(comfy, pack_runtime, model=patched)
    assert output.result[0] is patched
    info = report["steps"][0]["details"]["objects"]["model"]
    assert info["n_patches"] == 1
    assert info["parent_object_id"] == id(tiny.model)
    assert info["weights_patched"] is False


def test_models_node_with_nothing_connected_reports_an_info_finding(comfy, pack_runtime):
    output, report = run_models_node(comfy, pack_runtime)
    assert tuple(output.result) == (None, None, None)
    step = report["steps"][0]
    assert step["summary"]["n_objects"] == 0
    assert [f["code"] for f in step["findings"]] == ["nothing_connected"]


def test_import_writes_nothing(comfy, capfd, caplog):
    """Importing the pack (a second copy, under another module name) prints and logs nothing."""
    import importlib.util
    import sys

    capfd.readouterr()
    caplog.set_level(logging.INFO)
    caplog.clear()
    name = "pm_import_probe"
    spec = importlib.util.spec_from_file_location(
        name, REPO_ROOT / "__init__.py", submodule_search_locations=[str(REPO_ROOT)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert [r.getMessage() for r in caplog.records] == []
    assert inspect.iscoroutinefunction(module.comfy_entrypoint)
    assert module.WEB_DIRECTORY == "./web"

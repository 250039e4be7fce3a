"""Issue 35 against real ComfyUI objects, in process: a LoRA at a new strength is rescaled from its
row templates (figures equal to a fresh computation), and a models step run again walks no
parameter (ComfyUI's own model_size() and loaded_size() sign the kept memory table)."""

from __future__ import annotations

import pytest
from lora_support import kohya_lora, lora_graph, run_monitor, write_lora

pytestmark = pytest.mark.comfyui


@pytest.fixture(scope="session")
def loras_dir(comfy, tmp_path_factory):
    import folder_paths

    folder = tmp_path_factory.mktemp("loras35")
    folder_paths.add_model_folder_path("loras", str(folder))
    return folder


def figures(step: dict, side: str) -> dict:
    details = step["details"][side]
    return {"overall": details["overall"], "keys": [hop["keys"] for hop in details["hops"]]}


def assert_close(got, want, path=""):
    if isinstance(want, float) and isinstance(got, float):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-300), path
    elif isinstance(want, dict):
        assert set(got) == set(want), path
        for key in want:
            assert_close(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_close(g, w, f"{path}[{i}]")
    else:
        assert got == want, (path, got, want)


def test_a_new_strength_is_rescaled_from_templates_and_equals_a_fresh_step(
    comfy, tiny, pack_runtime, loras_dir
):
    write_lora(loras_dir, "pm_templates.safetensors", kohya_lora(rank=4, plant=False))
    loader = comfy.nodes.NODE_CLASS_MAPPINGS["LoraLoader"]()  # one object: it keeps the file's tensors
    caches = comfy.pack_module("monitors.lora.caches")
    caches.clear_caches()
    graph = lora_graph("pm_templates.safetensors")
    model, clip = loader.load_lora(tiny.model, tiny.clip, "pm_templates.safetensors", 1.0, 1.0)
    run_monitor(comfy, pack_runtime, graph, model=model, clip=clip)
    graph = lora_graph("pm_templates.safetensors", 0.35, -0.8)  # the loader's strengths, as in the prompt
    model, clip = loader.load_lora(tiny.model, tiny.clip, "pm_templates.safetensors", 0.35, -0.8)
    _, again, _ = run_monitor(comfy, pack_runtime, graph, model=model, clip=clip)
    reuse = again["details"]["model"]["reuse"]
    assert reuse["n_delta_norms_computed"] == 0 and reuse["n_delta_norms_reused"] > 0
    assert reuse["n_base_norms_computed"] == 0
    caches.clear_caches()
    _, fresh, _ = run_monitor(comfy, pack_runtime, graph, model=model, clip=clip)
    assert fresh["details"]["model"]["reuse"]["n_delta_norms_reused"] == 0
    for side in ("model", "clip"):
        assert_close(figures(again, side), figures(fresh, side))


def test_a_models_step_run_again_walks_no_parameter(comfy, tiny, pack_runtime):
    from test_comfyui_inprocess import run_models_node

    tables = comfy.pack_module("monitors.models.memory_tables").MEMORY_TABLES
    state = comfy.pack_module("monitors.models.state")
    _, first = run_models_node(comfy, pack_runtime, model=tiny.model, clip=tiny.clip, vae=tiny.vae)
    walks = tables.n_walks
    _, again = run_models_node(comfy, pack_runtime, model=tiny.model, clip=tiny.clip, vae=tiny.vae)
    assert tables.n_walks == walks
    objects = next(s for s in again["steps"] if s["kind"] == "models")["details"]["objects"]
    modules = {
        "model": tiny.model.model,
        "clip": tiny.clip.cond_stage_model,
        "vae": tiny.vae.first_stage_model,
    }
    for kind, module in modules.items():
        walked = state._module_memory(module)
        fields = ("size_bytes", "bytes_by_device", "n_elements")
        assert {k: objects[kind][k] for k in fields} == {k: walked[k] for k in fields}, kind

"""Model loads, unloads and LoRA patches recorded through ComfyUI's real model manager, in-process
on the CPU (ComfyUI loads and unloads through the same seams there): the bytes of each event are
ComfyUI's own loaded_size()/model_size(), the reload after an eviction and a LoRA strength change
are named by findings, and a prompt that asks for models already loaded shows no load."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.comfyui
CPU = torch.device("cpu")


class UNetStandIn(torch.nn.Sequential):
    pass


class VAEStandIn(torch.nn.Sequential):
    pass


def patcher_of(cls, width):
    import comfy.model_patcher
    import comfy.ops

    ops = comfy.ops.disable_weight_init
    module = cls(ops.Linear(width, width), ops.Linear(width, 8))
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.fill_(0.5)
    return comfy.model_patcher.ModelPatcher(module, load_device=CPU, offload_device=CPU)


@pytest.fixture
def mm(comfy, pack_runtime):
    import comfy.model_management as mm

    comfy.pack_module("nodes.model_residency").install()  # once: ComfyUI's extension start did it
    mm.unload_all_models()
    yield mm
    mm.unload_all_models()


def prompt(runtime, prompt_id, work):
    """One prompt's run: `work` is [(node id, class, callable)], each run as that node."""
    recorder = runtime.recorder
    recorder.begin_run(prompt_id, {n: {"class_type": c, "inputs": {}} for n, c, _ in work})
    for node_id, _, call in work:
        recorder.node_started(node_id)
        call()
        recorder.node_finished(node_id)
    runtime.recorder.set_resident_at_end(runtime_module_resident())
    report = recorder.end_run("success")
    return report.to_dict()


def runtime_module_resident():
    import sys

    module = next(m for name, m in sys.modules.items() if name.endswith("nodes.model_residency"))
    return module.resident_models()


def events(report, kind=None):
    listed = report["model_residency"]["events"]
    return [e for e in listed if kind is None or e["kind"] == kind]


def test_eviction_and_reload_are_named_with_comfyuis_own_bytes(mm, pack_runtime):
    unet, vae = patcher_of(UNetStandIn, 96), patcher_of(VAEStandIn, 32)
    first = prompt(
        pack_runtime,
        "p1",
        [
            ("3", "KSampler", lambda: mm.load_models_gpu([unet])),
            ("12", "VAEDecode", lambda: mm.load_models_gpu([vae])),
        ],
    )
    loads = events(first, "load_full")
    assert [(e["model_class"], e["node_id"], e["first_load"]) for e in loads] == [
        ("UNetStandIn", "3", True),
        ("VAEStandIn", "12", True),
    ]
    assert loads[0]["bytes_moved"] == unet.model_size() == unet.loaded_size() == loads[0]["model_size_bytes"]
    assert loads[1]["bytes_moved"] == vae.model_size()
    assert first["model_residency"]["n_models_first_loaded"] == 2
    rows = {n["node_id"]: n for n in first["nodes"]}
    assert rows["3"]["weights_loaded_bytes"] == unet.model_size() and rows["3"]["weights_moved_s"] >= 0

    # The second prompt: the VAE node frees memory (the stand-in for a tight budget, which ComfyUI
    # never enforces on the CPU), evicting the UNet; the sampler loads it again.
    unet_size = unet.loaded_size()

    def evict():
        keep = [m for m in mm.current_loaded_models if m.model is vae]
        mm.free_memory(1e30, CPU, keep_loaded=keep)
        mm.load_models_gpu([vae])

    second = prompt(
        pack_runtime,
        "p2",
        [("12", "VAEDecode", evict), ("3", "KSampler", lambda: mm.load_models_gpu([unet]))],
    )
    (unload,) = events(second, "unload_full")
    assert unload["model_class"] == "UNetStandIn" and unload["node_id"] == "12"
    assert unload["bytes_moved"] == unet_size and unload["loaded_after_bytes"] == 0
    assert unload["reason"].startswith("free_memory")
    (reload,) = events(second, "load_full")
    assert reload["node_id"] == "3" and reload["bytes_moved"] == unet.loaded_size() == unet.model_size()
    assert reload["first_load"] is False and reload["reloaded_after"]["node_id"] == "12"
    summary = second["model_residency"]
    assert summary["n_models_reloaded"] == 1 and summary["n_models_already_resident"] == 1  # the VAE
    codes = [f["code"] for f in summary["findings"]]
    assert "model_reloaded" in codes
    message = next(f["message"] for f in summary["findings"] if f["code"] == "model_reloaded")
    assert "unloaded by node 12 (VAEDecode) in prompt p2" in message and "by node 3 (KSampler)" in message
    resident = {m["model_class"]: m for m in summary["resident_at_end"]}
    assert resident["UNetStandIn"]["loaded_bytes"] == unet.loaded_size()

    # The same models asked for again: nothing moves.
    third = prompt(pack_runtime, "p3", [("3", "KSampler", lambda: mm.load_models_gpu([unet]))])
    assert events(third) == [] and third["model_residency"]["n_loads"] == 0
    assert third["model_residency"]["n_models_already_resident"] == 1


def test_lora_strength_change_names_the_unpatch_and_the_patch(mm, pack_runtime):
    base = patcher_of(UNetStandIn, 64)

    def with_lora(strength):
        clone = base.clone()
        clone.add_patches(
            {"0.weight": ("diff", (torch.ones(64, 64),)), "1.weight": ("diff", (torch.ones(8, 64),))},
            strength,
        )
        return clone

    first = prompt(pack_runtime, "l1", [("3", "KSampler", lambda: mm.load_models_gpu([with_lora(0.5)]))])
    (patch,) = events(first, "patch")
    assert patch["n_weights"] == 2 and patch["node_id"] == "3"
    second = prompt(pack_runtime, "l2", [("3", "KSampler", lambda: mm.load_models_gpu([with_lora(0.8)]))])
    (unpatch,) = events(second, "unpatch")
    (patch,) = events(second, "patch")
    assert unpatch["n_weights"] == 2 and patch["n_weights"] == 2
    # ComfyUI's estimate-based patcher restores the weights by unloading them, then loads them again
    size = base.model_size()
    assert unpatch["loaded_before_bytes"] == size and unpatch["loaded_after_bytes"] == 0
    (reload,) = events(second, "load_full")
    assert reload["bytes_moved"] == size and reload["loaded_before_bytes"] == 0
    (finding,) = [f for f in second["model_residency"]["findings"] if f["code"] == "lora_repatched"]
    assert "2 weights unpatched and 2 patched again" in finding["message"]


def test_a_failing_recorder_never_reaches_comfyui_and_results_pass_through(
    comfy, mm, pack_runtime, monkeypatch
):
    def broken(*args, **kwargs):
        raise RuntimeError("recorder broken")

    monkeypatch.setattr(pack_runtime.recorder, "model_event", broken)
    monkeypatch.setattr(pack_runtime.recorder, "model_resident", broken)
    comfy.pack_module("nodes.model_residency").install()  # twice: still one wrapper each
    assert not hasattr(mm.LoadedModel.model_load.__wrapped__, "__wrapped__")
    unet = patcher_of(UNetStandIn, 48)
    pack_runtime.recorder.begin_run("broken", {})
    assert mm.load_models_gpu([unet]) is None
    assert mm.load_models_gpu([unet]) is None  # already loaded: model_resident raises, swallowed
    assert unet.loaded_size() == unet.model_size()
    (index,) = [i for i, m in enumerate(mm.current_loaded_models) if m.model is unet]
    loaded = mm.current_loaded_models.pop(index)  # as free_memory does with what it unloads
    assert loaded.model_unload() is True and unet.loaded_size() == 0
    report = pack_runtime.recorder.end_run("success")
    assert report.status == "success" and report.model_residency["events"] == []

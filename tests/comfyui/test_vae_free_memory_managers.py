"""The VAE chain's free memory under both of ComfyUI's memory managers, checked against what
ComfyUI's own `free_memory` unloads (ComfyUI 0.33+, where dynamic VRAM exists).

Loading a dynamic patcher, ComfyUI never unloads another dynamic model (`for_dynamic=True`), and
what dynamic VRAM can evict is already in the patcher's `get_free_memory` (`vbars_analyze`):
counting the other dynamic models again made `auto` pick `direct` too often. Loading an
estimate-based patcher, ComfyUI unloads every other model. No CUDA here: the patchers are the real
ModelPatcher (one says it is dynamic), the loaded list holds ComfyUI's real LoadedModel, the
driver's free memory and aimdo's headroom are stand-ins.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import weakref

import pytest
import torch
from vae_encode_support import load_tiny_wan_vae, noise_image, run_node

from monitors.probes.fake import fake_probes

pytestmark = pytest.mark.comfyui

MiB = 1024**2
GPU, OTHER_GPU = torch.device("cuda:0"), torch.device("cuda:1")
DRIVER_FREE, AIMDO_HEADROOM = 40 * MiB, 64 * MiB


@pytest.fixture
def mm(comfy, monkeypatch):
    import comfy.model_management as mm

    if "for_dynamic" not in inspect.signature(mm.free_memory).parameters:
        pytest.skip("this ComfyUI has no dynamic VRAM (free_memory(for_dynamic=...)): 0.33 or later")
    import comfy.memory_management
    import comfy.model_patcher

    monkeypatch.setattr(mm, "current_loaded_models", [])
    monkeypatch.setattr(mm, "get_free_memory", lambda device=None, torch_free_too=False: DRIVER_FREE)
    monkeypatch.setattr(mm, "extra_reserved_memory", lambda: 0)
    monkeypatch.setattr(comfy.memory_management, "aimdo_enabled", True)
    monkeypatch.setattr(comfy.model_patcher.comfy_aimdo.model_vbar, "vbars_analyze", lambda device: AIMDO_HEADROOM)
    return mm


def patcher(dynamic: bool, device=GPU, loaded_bytes=0):
    """A real ModelPatcher over a small module, `loaded_bytes` of it on `device` as ComfyUI counts
    it (loaded_size()); one that says it is dynamic stands for ModelPatcherDynamic."""
    import comfy.model_patcher

    class DynamicLikePatcher(comfy.model_patcher.ModelPatcher):
        def is_dynamic(self):
            return True

    cls = DynamicLikePatcher if dynamic else comfy.model_patcher.ModelPatcher
    made = cls(torch.nn.Linear(8, 8), load_device=device, offload_device=torch.device("cpu"))
    made.model.model_loaded_weight_memory = loaded_bytes
    return made


def loaded(mm, made):
    """ComfyUI's LoadedModel for a patcher, as load_models_gpu leaves it."""
    entry = mm.LoadedModel(made)
    entry.real_model = weakref.ref(made.model)
    entry.model_finalizer = weakref.finalize(made.model, lambda: None)
    mm.current_loaded_models.append(entry)
    return entry


def scene(mm, vae_dynamic: bool, other_dynamic_bytes: int, other_estimate_bytes: int):
    """The VAE's patcher and, on its GPU, another dynamic model and another estimate-based one (and
    one on another GPU, which never counts)."""
    vae_patcher = patcher(vae_dynamic, loaded_bytes=10 * MiB)
    kept = [vae_patcher, patcher(True, loaded_bytes=other_dynamic_bytes), patcher(False, loaded_bytes=other_estimate_bytes)]
    kept.append(patcher(False, OTHER_GPU, loaded_bytes=500 * MiB))
    for made in kept:
        loaded(mm, made)
    return vae_patcher, kept


def reader(comfy, vae_patcher):
    node_module = comfy.pack_module("nodes.vae_encode_node")
    return node_module.free_memory_reader(types.SimpleNamespace(patcher=vae_patcher), fake_probes("no GPU"))


@pytest.mark.parametrize("vae_dynamic", [True, False], ids=["dynamic", "estimate-based"])
def test_free_memory_counts_what_comfyuis_free_memory_really_unloads(comfy, mm, vae_dynamic):
    vae_patcher, kept = scene(mm, vae_dynamic, other_dynamic_bytes=100 * MiB, other_estimate_bytes=30 * MiB)
    reading = reader(comfy, vae_patcher)("cuda:0")
    sizes = {id(entry): entry.model_loaded_memory() for entry in mm.current_loaded_models}
    # What ComfyUI frees when the VAE asks for more than there is: the models it unloads.
    keep_vae = [entry for entry in mm.current_loaded_models if entry.model is vae_patcher]
    unloaded = mm.free_memory(10**15, GPU, keep_loaded=keep_vae, for_dynamic=vae_dynamic)
    freed = sum(sizes[id(entry)] for entry in unloaded)
    headroom = AIMDO_HEADROOM if vae_dynamic else 0  # only a dynamic patcher's free memory has it
    assert reading.free_bytes == DRIVER_FREE + headroom + freed
    assert freed == (30 if vae_dynamic else 130) * MiB
    assert reading.manager == ("dynamic" if vae_dynamic else "estimate-based")
    assert ("ModelPatcher.get_free_memory" in reading.source) is vae_dynamic
    del kept


@pytest.fixture(scope="module")
def wan_vae(comfy, tmp_path_factory):
    return load_tiny_wan_vae(str(tmp_path_factory.mktemp("tiny_wan_vae_managers")))


@pytest.mark.parametrize("vae_dynamic", [True, False], ids=["dynamic", "estimate-based"])
def test_auto_counts_another_dynamic_model_only_where_comfyui_would_unload_it(
    comfy, mm, wan_vae, pack_runtime, monkeypatch, vae_dynamic
):
    """A quarter of what direct needs free, and another dynamic model holding as much as direct
    needs: under dynamic VRAM ComfyUI keeps that model (and aimdo gives nothing back here), so
    direct surely does not fit (uncalibrated, auto skips it below half) and auto goes to tiled;
    loading an estimate-based VAE ComfyUI would unload it, so direct fits."""
    import comfy.model_patcher as model_patcher

    node_module = comfy.pack_module("nodes.vae_encode_node")
    original_options = node_module.chain_options
    monkeypatch.setattr(  # the raw estimate: no calibration learnt from other tests' encodes
        node_module, "chain_options", lambda *a, **k: dataclasses.replace(original_options(*a, **k), calibration=None)
    )
    pixels = noise_image(9, 64, 64, seed=6)
    with monkeypatch.context() as plenty:
        plenty.setattr(node_module, "free_memory_reader", lambda vae: lambda device: 64 * 1024**3)
        _, probe_step = run_node(comfy, pack_runtime, pixels=pixels, vae=wan_vae, strategy="auto")
    needed = probe_step["details"]["predictions"]["direct"]["needed_bytes"]
    monkeypatch.setattr(mm, "get_free_memory", lambda device=None, torch_free_too=False: needed // 4)
    monkeypatch.setattr(model_patcher.comfy_aimdo.model_vbar, "vbars_analyze", lambda device: 0)
    vae_patcher, kept = scene(mm, vae_dynamic, other_dynamic_bytes=needed, other_estimate_bytes=0)
    read = reader(comfy, vae_patcher)
    monkeypatch.setattr(node_module, "free_memory_reader", lambda vae: lambda device: read("cuda:0"))
    _, step = run_node(comfy, pack_runtime, pixels=pixels, vae=wan_vae, strategy="auto", tile_size=32, overlap=8)
    chosen = [(a["strategy"], a["outcome"]) for a in step["details"]["attempts"]]
    if vae_dynamic:
        assert chosen == [("direct", "skipped"), ("tiled", "ok")]
        assert step["summary"]["direct_predicted_to_fit"] is False
    else:
        assert chosen == [("direct", "ok")] and step["summary"]["direct_predicted_to_fit"] is True
    del kept

"""Contract tests: what the pack assumes of ComfyUI's patchers, against the real classes.

Every version: a patcher loaded in low-VRAM mode on the CPU applies its patches on the fly
(LowVramPatch), and the pack reports that, not weights patched; a full load writes them in place.
ComfyUI 0.33+ (dynamic VRAM): the parts of ModelPatcherDynamic that run without CUDA, and the
source-level facts the fakes of tests/unit/dynamic_vram_fakes.py mirror where they cannot run.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from monitors.lora.analysis import base_weight_lookup
from monitors.models.patching import loaded_bytes, memory_manager, patch_placement

pytestmark = pytest.mark.comfyui
CPU = torch.device("cpu")


def small_patcher():
    import comfy.model_patcher
    import comfy.ops

    ops = comfy.ops.disable_weight_init
    module = torch.nn.Sequential(ops.Linear(64, 64), ops.Linear(64, 8))
    with torch.no_grad():
        for index, parameter in enumerate(module.parameters()):
            parameter.copy_(torch.linspace(-1, 1, parameter.numel()).reshape(parameter.shape) * (index + 1))
    patcher = comfy.model_patcher.ModelPatcher(module, load_device=CPU, offload_device=CPU)
    clone = patcher.clone()
    clone.add_patches({"0.weight": ("diff", (torch.ones(64, 64),))}, 0.5)
    return clone


@pytest.fixture
def dynamic_class(comfy):
    import comfy.model_patcher

    found = getattr(comfy.model_patcher, "ModelPatcherDynamic", None)
    if found is None:
        pytest.skip("this ComfyUI has no dynamic VRAM (ModelPatcherDynamic): 0.33 or later")
    return found


def test_low_vram_load_patches_on_the_fly_and_the_module_keeps_the_base_weight(comfy):
    clone = small_patcher()
    original = clone.model[0].weight.detach().clone()
    clone.load(CPU, lowvram_model_memory=1)
    try:
        assert clone.model.current_weight_patches_uuid == clone.patches_uuid  # ComfyUI sets it all the same
        placement = patch_placement(clone)
        assert placement["patch_application"] == "on_the_fly" and placement["weights_patched"] is False
        assert placement["n_patched_on_the_fly"] == 1
        assert torch.equal(base_weight_lookup(clone)("0.weight"), original)
    finally:
        clone.unpatch_model(CPU)


def test_full_load_writes_in_place_and_the_backup_holds_the_base_weight(comfy):
    clone = small_patcher()
    original = clone.model[0].weight.detach().clone()
    clone.load(CPU, full_load=True)
    try:
        placement = patch_placement(clone)
        assert placement["patch_application"] == "in_place" and placement["weights_patched"] is True
        assert not torch.equal(clone.model[0].weight, original)
        assert torch.equal(base_weight_lookup(clone)("0.weight"), original)
        assert memory_manager(clone) == "estimate" and loaded_bytes(clone) == clone.loaded_size() > 0
    finally:
        clone.unpatch_model(CPU)


def test_loaded_models_count_the_patchers_loaded_size(comfy):
    import comfy.model_management as mm

    assert "loaded_size" in inspect.getsource(mm.LoadedModel.model_loaded_memory)


def test_dynamic_patcher_reroutes_a_cpu_load_device_to_a_plain_patcher(dynamic_class):
    import comfy.model_patcher

    module = small_patcher().model
    patcher = dynamic_class(module, load_device=CPU, offload_device=CPU)
    assert type(patcher) is comfy.model_patcher.ModelPatcher and memory_manager(patcher) == "estimate"
    assert "disable_dynamic" in inspect.signature(comfy.model_patcher.ModelPatcher.clone).parameters
    assert type(patcher.clone(disable_dynamic=True)) is comfy.model_patcher.ModelPatcher


def test_what_the_fakes_mirror_of_the_dynamic_patcher(dynamic_class):
    """Source-level facts (the class needs CUDA to run): per-device pins read by load device,
    registered for the load device only; loaded_size adds the vbar; patches attached on the fly in
    <param>_lowvram_function while current_weight_patches_uuid is set; a non-dynamic clone
    comes from the loader (cached_patcher_init) or raises."""
    import comfy.model_patcher

    assert comfy.model_patcher.LowVramPatch.is_lowvram_patch is True
    assert dynamic_class.is_dynamic(object.__new__(dynamic_class)) is True
    assert "self.model.dynamic_pins[self.load_device]" in inspect.getsource(dynamic_class.load)
    assert "if device not in self.model.dynamic_pins" in inspect.getsource(dynamic_class.register_load_device)
    loaded_size = inspect.getsource(dynamic_class.loaded_size)
    assert "vbar.loaded_size()" in loaded_size and "model_loaded_weight_memory" in loaded_size
    load = inspect.getsource(dynamic_class.load)
    assert '"_lowvram_function", lowvram_patch' in load
    assert "current_weight_patches_uuid = self.patches_uuid" in load
    clone = inspect.getsource(comfy.model_patcher.ModelPatcher.clone)
    assert "class_ = ModelPatcher" in clone and "cached_patcher_init is None" in clone


def test_the_cpu_rung_patcher_of_a_real_patcher(comfy, tiny):
    node_module = comfy.pack_module("nodes.vae_encode_node")
    patcher, reloaded = node_module.cpu_patcher(tiny.vae.patcher)
    assert type(patcher) is type(tiny.vae.patcher) and patcher.model is tiny.vae.patcher.model
    assert patcher.parent is tiny.vae.patcher and not reloaded


def test_comfyui_hands_a_vae_that_tiles_by_itself_the_whole_input(comfy):
    """What monitors/vae/geometry.py's tiles_itself assumes (ComfyUI 0.33+)."""
    import comfy.sd

    tiled = inspect.getsource(comfy.sd.VAE.encode_tiled)
    if "handles_tiling" not in tiled:
        pytest.skip("this ComfyUI has no VAEs that tile by themselves (handles_tiling): 0.33 or later")
    assert "self._encode_tiled_owned(pixel_samples" in tiled
    assert "self._encode_tiled_owned(pixel_samples" in inspect.getsource(comfy.sd.VAE.encode)
    assert "self.first_stage_model.encode_tiled(" in inspect.getsource(comfy.sd.VAE._encode_tiled_owned)


def test_the_packs_calculate_weight_gives_comfyuis_model_as_lora_its_original_weight(comfy):
    """calculate_weight(..., intermediate_dtype, original_weights): a model_as_lora patch is the
    difference to the original weight, which only the keyword carries."""
    lora_keys = comfy.pack_module("nodes.lora_keys")
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    target = torch.full((2, 3), 10.0)
    entries = [
        (0.5, ("model_as_lora", (target,)), 1.0, None, None),
        (1.0, ("diff", (torch.ones(2, 3),)), 1.0, None, None),
    ]
    patched = lora_keys.calculate_weight(entries, base.clone(), "w")
    assert torch.allclose(patched, base + 0.5 * (target - base) + 1.0)



def test_the_cpu_rung_clones_a_dynamic_patcher_over_its_own_weights_without_building_one(comfy, dynamic_class):
    """Without a loader to reload from, the CPU rung's patcher is made by ComfyUI's clone()
    (`disable_dynamic=True, model_override=get_clone_model_override()`), never by the ModelPatcher
    constructor, whose keywords change (0.38 adds `fast_disk`, which every core loader passes)."""
    import comfy.model_patcher as model_patcher

    parameters = inspect.signature(model_patcher.ModelPatcher.clone).parameters
    assert {"disable_dynamic", "model_override"} <= set(parameters)

    class DynamicLikePatcher(model_patcher.ModelPatcher):
        def is_dynamic(self):
            return True

    module = small_patcher().model
    patcher = DynamicLikePatcher(module, load_device=torch.device("cuda", 0), offload_device=CPU)
    assert patcher.cached_patcher_init is None
    made, reloaded = comfy.pack_module("nodes.vae_encode_node").cpu_patcher(patcher)
    assert type(made) is model_patcher.ModelPatcher and made.model is module and not reloaded
    assert made.parent is patcher  # clone() made it: no constructor default assumed

"""Dynamic VRAM (ComfyUI 0.33+, ModelPatcherDynamic through comfy-aimdo) with fakes of its patcher
(tests/unit/dynamic_vram_fakes.py), as it needs CUDA:
1. the VAE's CPU rung encodes through a non-dynamic patcher (a dynamic clone moved to the CPU has no
   pins there and raises KeyError);
2. patches applied on the fly are reported as such, never as weights patched, and the LoRA analysis
   reads the base weight from the module, where it lives;
3. loaded bytes are the patcher's loaded_size(), virtual allocation included, and every such figure
   names the memory manager that counted it.
"""

from __future__ import annotations

import importlib
import sys
import types

import pytest
import torch

from monitors.lora.analysis import base_weight_lookup
from monitors.models.loaded import loaded_model_row
from monitors.models.patching import loaded_bytes, memory_manager, patch_placement
from monitors.models.state import describe_model, describe_vae
from tests.unit.dynamic_vram_fakes import (
    FakeModelPatcher,
    FakeModelPatcherDynamic,
    FakeVAE,
    loader_of,
    tiny_module,
)
from tests.unit.test_routes import PACK, import_pack

CUDA = torch.device("cuda", 0)  # a device object only: nothing here initialises CUDA
CPU = torch.device("cpu")
DELTAS = {"0.weight": torch.ones(4, 4), "1.bias": torch.ones(2)}


def patched(patcher_class, device):
    patcher = patcher_class(tiny_module(), device, CPU)
    clone = patcher.clone()
    clone.add_patches(DELTAS)
    return patcher, clone


# -- 2. weights patched, and where the base weight lives -------------------------------------------


def test_dynamic_load_reports_patches_on_the_fly_not_weights_patched():
    _, clone = patched(FakeModelPatcherDynamic, CUDA)
    clone.load(CUDA)
    assert clone.model.current_weight_patches_uuid == clone.patches_uuid  # the uuid alone would claim it
    info = describe_model(clone)
    assert info["weights_patched"] is False
    assert info["patch_application"] == "on_the_fly"
    assert (info["n_patched_on_the_fly"], info["n_patched_in_place"]) == (2, 0)


def test_estimate_based_load_writes_the_patches_in_place():
    _, clone = patched(FakeModelPatcher, CPU)
    assert describe_model(clone)["patch_application"] == "not_applied"
    clone.load(CPU)
    info = describe_model(clone)
    assert info["weights_patched"] is True and info["patch_application"] == "in_place"
    assert (info["n_patched_on_the_fly"], info["n_patched_in_place"]) == (0, 2)


class _LegacyLowVramPatch:
    """ComfyUI 0.8's LowVramPatch: no is_lowvram_patch attribute, known by its class name."""


_LegacyLowVramPatch.__name__ = "LowVramPatch"


def test_mixed_and_another_clones_patches():
    _, clone = patched(FakeModelPatcher, CPU)
    clone.load(CPU)
    clone.model[1].bias_function = [_LegacyLowVramPatch()]  # low-VRAM mode
    placement = patch_placement(clone)
    assert placement["patch_application"] == "mixed" and placement["weights_patched"] is False
    other = clone.clone()
    other.add_patches({"1.weight": torch.ones(2, 4)})
    assert patch_placement(other) == {
        "patch_application": "not_applied",
        "weights_patched": False,
        "n_patched_in_place": 0,
        "n_patched_on_the_fly": 0,
    }


def test_base_weight_is_the_module_weight_when_patched_on_the_fly():
    _, clone = patched(FakeModelPatcherDynamic, CUDA)
    clone.load(CUDA)
    module_weight = clone.model[0].weight
    # a backup entry left by an earlier in-place load must not win over the module's own weight
    clone.backup["0.weight"] = (module_weight + 5, False)
    assert torch.equal(base_weight_lookup(clone)("0.weight"), module_weight)


def test_base_weight_is_the_backup_when_written_in_place():
    _, clone = patched(FakeModelPatcher, CPU)
    original = clone.model[0].weight.detach().clone()
    clone.load(CPU)
    assert not torch.equal(clone.model[0].weight, original)
    assert torch.equal(base_weight_lookup(clone)("0.weight"), original)


# -- 3. loaded bytes and the memory manager --------------------------------------------------------


def test_loaded_bytes_include_the_virtual_allocation():
    _, clone = patched(FakeModelPatcherDynamic, CUDA)
    clone.load(CUDA)
    assert clone.vbar_loaded_bytes > 0 and clone.model.model_loaded_weight_memory > 0
    info = describe_model(clone)
    assert info["loaded_weight_bytes"] == clone.loaded_size() == clone.model_size()
    assert info["loaded_weight_bytes"] > clone.model.model_loaded_weight_memory
    assert info["resident_bytes"] == clone.loaded_size()
    assert info["memory_manager"] == "dynamic"


def test_estimate_based_figures_name_their_manager():
    _, clone = patched(FakeModelPatcher, CPU)
    clone.load(CPU)
    assert describe_model(clone)["memory_manager"] == "estimate"
    assert describe_vae(FakeVAE(clone))["memory_manager"] == "estimate"
    legacy = types.SimpleNamespace(model=types.SimpleNamespace(model_loaded_weight_memory=7))
    assert memory_manager(legacy) == "estimate" and loaded_bytes(legacy) == 7  # no is_dynamic, no loaded_size


def test_loaded_model_rows_name_the_manager():
    _, clone = patched(FakeModelPatcherDynamic, CUDA)
    clone.load(CUDA)
    loaded = types.SimpleNamespace(
        model=clone, device=CUDA, model_loaded_memory=clone.loaded_size, model_memory=clone.model_size
    )
    row = loaded_model_row(loaded)
    assert row["memory_manager"] == "dynamic" and row["loaded_bytes"] == clone.loaded_size()
    assert (
        loaded_model_row(types.SimpleNamespace(**{**vars(loaded), "model": None}))["memory_manager"] is None
    )


def test_unreadable_loaded_size_is_a_reason():
    _, clone = patched(FakeModelPatcherDynamic, CUDA)
    clone.loaded_size = lambda: "lots"
    info = describe_model(clone)
    assert info["loaded_weight_bytes"] is None
    assert info["unknown_reasons"]["loaded_weight_bytes"] == "TypeError: loaded size is a str, not a number"


# -- 1. the VAE's CPU rung ------------------------------------------------------------------------


@pytest.fixture
def vae_node(monkeypatch):
    """nodes/vae_encode_node.py over fake ComfyUI modules: comfy_api's io (class bodies only),
    comfy.model_management's loaded list, comfy.model_patcher's plain ModelPatcher."""
    io = types.SimpleNamespace(ComfyNode=object)
    latest = types.ModuleType("comfy_api.latest")
    latest.io = io
    mm = types.ModuleType("comfy.model_management")
    mm.current_loaded_models = []
    mm.vae_dtype = lambda device, allowed_dtypes: torch.float32
    model_patcher = types.ModuleType("comfy.model_patcher")
    model_patcher.ModelPatcher = FakeModelPatcher
    comfy = types.ModuleType("comfy")
    comfy.model_management, comfy.model_patcher = mm, model_patcher
    for name, module in (
        ("comfy_api", types.ModuleType("comfy_api")),
        ("comfy_api.latest", latest),
        ("comfy", comfy),
        ("comfy.model_management", mm),
        ("comfy.model_patcher", model_patcher),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    import_pack()
    monkeypatch.delitem(sys.modules, f"{PACK}.nodes.vae_encode_node", raising=False)
    return importlib.import_module(f"{PACK}.nodes.vae_encode_node")


def test_a_dynamic_clone_moved_to_the_cpu_has_no_pins_there():
    """What the CPU rung did before: clone() and load_device = cpu. The fakes must reproduce it."""
    patcher = FakeModelPatcherDynamic(tiny_module(), CUDA, CPU)
    clone = patcher.clone()
    clone.load_device = CPU
    with pytest.raises(KeyError):
        clone.load(CPU)


def test_cpu_rung_uses_a_non_dynamic_clone_from_the_loader(vae_node):
    patcher = FakeModelPatcherDynamic(tiny_module(), CUDA, CPU)
    patcher.cached_patcher_init = loader_of(patcher.model)
    vae = FakeVAE(patcher)
    encoded = vae_node.encode_on_cpu(vae, torch.ones(1, 4))
    [module] = vae.encoded_with
    assert encoded.samples.shape == (1, 4) and module is not patcher.model  # the fresh copy the clone loaded
    assert encoded.weights_reload_s is not None and encoded.weights_reload_s >= 0
    assert encoded.weights_detached is False  # the VAE was not loaded: nothing taken off its GPU
    assert vae.first_stage_model is patcher.model
    assert vae.patcher is patcher and vae.device == CUDA and patcher.n_loads == 0  # the VAE is untouched
    view_patcher, reloaded = vae_node.cpu_patcher(patcher)
    assert type(view_patcher) is FakeModelPatcher and view_patcher.model is not patcher.model and reloaded
    assert view_patcher.parent is patcher


def test_cpu_rung_converts_a_fresh_copy_to_the_cpu_dtype_and_leaves_the_vae_as_it_was(vae_node):
    """Dynamic VRAM's reload keeps the file's dtype (bf16 here) while the GPU works in another: the
    fresh copy is converted to ComfyUI's CPU VAE dtype, the VAE's own module is not."""
    patcher = FakeModelPatcherDynamic(tiny_module().to(torch.bfloat16), CUDA, CPU)
    patcher.cached_patcher_init = loader_of(patcher.model)
    vae = FakeVAE(patcher)
    encoded = vae_node.encode_on_cpu(vae, torch.ones(1, 4))
    [module] = vae.encoded_with
    assert {p.dtype for p in module.parameters()} == {torch.float32} and encoded.compute_dtype == "float32"
    assert {p.dtype for p in patcher.model.parameters()} == {torch.bfloat16}


def test_cpu_rung_without_a_loader_clones_over_the_same_weights(vae_node):
    patcher = FakeModelPatcherDynamic(tiny_module(), CUDA, CPU)
    vae = FakeVAE(patcher)
    encoded = vae_node.encode_on_cpu(vae, torch.ones(1, 4))
    assert encoded.samples.shape == (1, 4) and encoded.weights_reload_s is None
    assert vae.encoded_with == [patcher.model]
    plain, reloaded = vae_node.cpu_patcher(patcher)
    assert type(plain) is FakeModelPatcher and plain.model is patcher.model and not reloaded
    assert plain.parent is patcher  # made by clone(): no constructor defaults assumed
    assert plain.offload_device == CPU and plain.model_size() == patcher.model_size()


def test_cpu_rung_without_clone_over_its_own_weights_builds_a_plain_patcher(vae_node, monkeypatch):
    """A ComfyUI whose clone() takes no model_override: a plain patcher on the CPU, built directly."""
    patcher = FakeModelPatcherDynamic(tiny_module(), CUDA, CPU)
    monkeypatch.delattr(FakeModelPatcherDynamic, "get_clone_model_override")
    plain, reloaded = vae_node.cpu_patcher(patcher)
    assert type(plain) is FakeModelPatcher and plain.model is patcher.model and not reloaded
    assert plain.load_device == CPU and plain.offload_device == CPU and plain.parent is None


@pytest.mark.parametrize("patcher_class, detached", [(FakeModelPatcherDynamic, True), (FakeModelPatcher, False)])
def test_cpu_rung_says_when_it_took_a_dynamic_vae_off_its_gpu(vae_node, patcher_class, detached):
    patcher = patcher_class(tiny_module(), CUDA, CPU)
    unloaded = []
    loaded = types.SimpleNamespace(model=patcher, model_unload=lambda: unloaded.append(patcher))
    sys.modules["comfy.model_management"].current_loaded_models[:] = [loaded]
    encoded = vae_node.encode_on_cpu(FakeVAE(patcher), torch.ones(1, 4))
    assert unloaded == [patcher] and encoded.weights_detached is detached
    assert sys.modules["comfy.model_management"].current_loaded_models == []


def test_cpu_rung_clones_an_estimate_based_patcher_as_before(vae_node):
    patcher = FakeModelPatcher(tiny_module(), CPU, CPU)
    clone, reloaded = vae_node.cpu_patcher(patcher)
    assert type(clone) is FakeModelPatcher and clone.model is patcher.model and clone.parent is patcher
    assert not reloaded


def test_object_patches_are_named_config_keys_included():
    _, clone = patched(FakeModelPatcher, CPU)
    clone.object_patches = {"model_sampling": object(), ("config", "sampling_settings"): {}, ("a", 1): 2}
    info = describe_model(clone)
    assert info["n_object_patches"] == 3
    assert info["object_patch_names"] == ["a/1", "config/sampling_settings", "model_sampling"]
    del clone.object_patches
    assert describe_model(clone)["n_object_patches"] is None and describe_model(clone)["object_patch_names"] is None


def test_cpu_rung_never_builds_a_patcher_whose_constructor_wants_more(vae_node, monkeypatch):
    """ComfyUI 0.38: every core loader passes ModelPatcher(..., fast_disk=...). A clone over the
    VAE's own weights needs no constructor call, whatever keywords it grows."""

    class NewerModelPatcher(FakeModelPatcher):
        def __init__(self, model, load_device, offload_device, size=0, *, fast_disk):
            super().__init__(model, load_device, offload_device, size)

    monkeypatch.setattr(sys.modules["comfy.model_patcher"], "ModelPatcher", NewerModelPatcher)
    patcher = FakeModelPatcherDynamic(tiny_module(), CUDA, CPU)
    made, reloaded = vae_node.cpu_patcher(patcher)
    assert made.model is patcher.model and made.parent is patcher and not reloaded


@pytest.mark.parametrize("device", ["cuda:0", "xpu:0"])  # ROCm's torch calls its GPUs cuda too
def test_the_memory_manager_is_the_patchers_word_whatever_the_device(vae_node, device):
    patcher = FakeModelPatcherDynamic(tiny_module(), torch.device(device), CPU)
    patcher.get_free_memory = lambda dev: 7 * 1024**2
    assert memory_manager(patcher) == "dynamic" and describe_model(patcher)["memory_manager"] == "dynamic"
    mm = sys.modules["comfy.model_management"]
    free, manager, source = vae_node.comfy_free_memory(mm, patcher, torch.device(device))
    assert (free, manager) == (7 * 1024**2, "dynamic") and "ModelPatcher.get_free_memory" in source

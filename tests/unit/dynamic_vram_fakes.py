"""Fakes of ComfyUI's two patcher kinds, shaped like comfy/model_patcher.py of ComfyUI 0.33 where
dynamic VRAM needs CUDA (comfy-aimdo) and cannot run on a CPU machine:

- FakeModelPatcher: estimate-based (ModelPatcher). load() writes the patches into the weights and
  keeps the originals in `backup`; loaded_size() is model_loaded_weight_memory.
- FakeModelPatcherDynamic: ModelPatcherDynamic. Per-device pins `model.dynamic_pins[device]`, made by
  register_load_device for the load device only (a missing entry raises KeyError where ComfyUI reads
  it: load, loaded_ram_size); load() attaches a FakeLowVramPatch per patched weight in
  `<param>_lowvram_function` and writes nothing, yet sets current_weight_patches_uuid; weights live
  in a virtual allocation (the vbar) that loaded_size() adds to model_loaded_weight_memory.
  clone(disable_dynamic=True) gives an estimate-based patcher over a fresh copy of the weights from
  the loader (`cached_patcher_init`), and raises RuntimeError without one; with
  `model_override=get_clone_model_override()` an estimate-based patcher over the same module. A CPU
  load device gives a plain patcher (ModelPatcherDynamic.__new__ reroutes it).
The real classes are checked against these where they run on a CPU: tests/comfyui/test_dynamic_vram_contract.py.
"""

from __future__ import annotations

import copy
import uuid

import torch


class FakeLowVramPatch:
    is_lowvram_patch = True

    def __init__(self, key, patches):
        self.key = key
        self.patches = patches

    def __call__(self, weight):
        return weight + sum(delta for delta in self.patches[self.key])


def tiny_module() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))


def _attr(root, key: str):
    module_path, _, param = key.rpartition(".")
    module = root.get_submodule(module_path) if module_path else root
    return module, param


class FakeModelPatcher:
    def __init__(self, model, load_device, offload_device, size=0):
        self.model = model
        self.load_device = load_device
        self.offload_device = offload_device
        self.size = size
        self.patches: dict[str, list] = {}
        self.backup: dict = {}
        self.patches_uuid = uuid.uuid4()
        self.parent = None
        self.cached_patcher_init = None
        for name, default in (("model_loaded_weight_memory", 0), ("current_weight_patches_uuid", None)):
            if not hasattr(model, name):
                setattr(model, name, default)
        self.n_loads = 0

    def is_dynamic(self):
        return False

    def model_size(self):
        return self.size or sum(t.nbytes for t in self.model.parameters())

    def loaded_size(self):
        return self.model.model_loaded_weight_memory

    def add_patches(self, deltas: dict) -> None:
        for key, delta in deltas.items():
            self.patches.setdefault(key, []).append(delta)
        self.patches_uuid = uuid.uuid4()

    def clone(self, disable_dynamic=False):
        other = type(self)(self.model, self.load_device, self.offload_device, self.size)
        other.patches = {k: list(v) for k, v in self.patches.items()}
        other.patches_uuid, other.backup, other.parent = self.patches_uuid, self.backup, self
        other.cached_patcher_init = self.cached_patcher_init
        return other

    def load(self, device_to):
        """Every patched weight written in place, the original kept in backup."""
        self.n_loads += 1
        for key, deltas in self.patches.items():
            module, param = _attr(self.model, key)
            weight = getattr(module, param)
            self.backup.setdefault(key, (weight.detach().clone(), False))
            patched = self.backup[key][0] + sum(deltas)
            setattr(module, param, torch.nn.Parameter(patched.to(device_to), requires_grad=False))
        self.model.model_loaded_weight_memory = self.model_size()
        self.model.current_weight_patches_uuid = self.patches_uuid


class FakeModelPatcherDynamic(FakeModelPatcher):
    def __new__(cls, model=None, load_device=None, offload_device=None, size=0):
        if load_device is not None and torch.device(load_device).type == "cpu":
            return FakeModelPatcher(model, load_device, offload_device, size)
        return super().__new__(cls)

    def __init__(self, model, load_device, offload_device, size=0):
        super().__init__(model, load_device, offload_device, size)
        if not hasattr(model, "dynamic_pins"):
            model.dynamic_pins = {}
        self.vbar_loaded_bytes = 0
        self.register_load_device(load_device)

    def register_load_device(self, device):
        self.model.dynamic_pins.setdefault(device, {"weights": [], "active": False})

    def is_dynamic(self):
        return True

    def loaded_size(self):
        return self.vbar_loaded_bytes + self.model.model_loaded_weight_memory

    def loaded_ram_size(self):
        return len(self.model.dynamic_pins[self.load_device]["weights"])

    def get_clone_model_override(self):
        return self.model, self.backup

    def clone(self, disable_dynamic=False, model_override=None):
        if not disable_dynamic:
            other = super().clone()
            other.vbar_loaded_bytes = self.vbar_loaded_bytes
            return other
        if model_override is None:
            if self.cached_patcher_init is None:
                raise RuntimeError("Cannot create non-dynamic delegate: cached_patcher_init is not initialized.")
            model_override = (self.cached_patcher_init(), {})
        other = FakeModelPatcher(model_override[0], self.load_device, self.offload_device, self.size)
        other.patches = {k: list(v) for k, v in self.patches.items()}
        other.patches_uuid, other.parent = self.patches_uuid, self
        return other

    def load(self, device_to):
        """Patches attached on the fly; only the small weights (biases) force-loaded, the rest in the vbar."""
        self.n_loads += 1
        pins = self.model.dynamic_pins[self.load_device]  # KeyError for a device never registered
        pins["active"] = True
        self.vbar_loaded_bytes, self.model.model_loaded_weight_memory = 0, 0
        for name, module in self.model.named_modules():
            for param, weight in list(module.named_parameters(recurse=False)):
                key = f"{name}.{param}" if name else param
                patch = FakeLowVramPatch(key, self.patches) if key in self.patches else None
                setattr(module, f"{param}_lowvram_function", patch)
                if param == "bias":
                    self.model.model_loaded_weight_memory += weight.nbytes
                else:
                    self.vbar_loaded_bytes += weight.nbytes
        self.model.current_weight_patches_uuid = self.patches_uuid


def loader_of(module):
    """A cached_patcher_init stand-in: a fresh copy of the weights, as a reload from disk gives."""
    return lambda: copy.deepcopy(module)


class FakeVAE:
    """ComfyUI's VAE as encode_on_cpu uses it: `.patcher`, `.device`, encode() loading the patcher
    on its load device first."""

    def __init__(self, patcher):
        self.patcher = patcher
        self.first_stage_model = patcher.model
        self.device = patcher.load_device
        self.encoded_with: list = []  # shared with shallow copies: the modules each encode ran

    def encode(self, pixels):
        self.patcher.load(self.patcher.load_device)
        self.encoded_with.append(self.first_stage_model)
        return self.first_stage_model[0](pixels)

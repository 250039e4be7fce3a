"""Where a ModelPatcher's weight patches live and which memory manager its figures come from.

ComfyUI applies a patcher's patches in one of two ways when it loads the model (duck-typed, no
import of ComfyUI):
- in place: the patched weight is written into the module, the original kept in `patcher.backup`
  (ModelPatcher.load for the modules it loads fully);
- on the fly: the module keeps its unpatched weight and carries a `LowVramPatch` that computes the
  patched weight at each use: in `<param>_function` (low-VRAM mode, every version) or in
  `<param>_lowvram_function` (dynamic VRAM, ModelPatcherDynamic, every patched weight it does not
  force-load).
Either way the model's `current_weight_patches_uuid` is the patcher's `patches_uuid` after the load,
so that equality alone cannot say "weights patched".

Memory manager: a dynamic patcher (`is_dynamic()` true: ModelPatcherDynamic, comfy-aimdo) loads
weights into a virtual VRAM allocation on demand and counts them in `loaded_size()` (vbar part
plus force-loaded weights); the estimate-based one (ModelPatcher) loads what ComfyUI's estimates
say fits and counts `model_loaded_weight_memory`, which is also its `loaded_size()`.
"""

from __future__ import annotations

from typing import Any

MEMORY_MANAGER_DYNAMIC = "dynamic"
MEMORY_MANAGER_ESTIMATE = "estimate"


def memory_manager(patcher) -> str:
    """ "dynamic" for a patcher whose is_dynamic() is true, else "estimate" (ComfyUI before dynamic
    VRAM has no is_dynamic: every patcher there is estimate-based)."""
    is_dynamic = getattr(patcher, "is_dynamic", None)
    return (
        MEMORY_MANAGER_DYNAMIC if callable(is_dynamic) and is_dynamic() is True else MEMORY_MANAGER_ESTIMATE
    )


def loaded_bytes(patcher) -> int:
    """Bytes of the model resident on its load device as ComfyUI's memory manager counts them:
    `loaded_size()` (on a dynamic patcher it adds the virtual allocation, which
    `model_loaded_weight_memory` misses), else the module's `model_loaded_weight_memory`."""
    loaded_size = getattr(patcher, "loaded_size", None)
    value = loaded_size() if callable(loaded_size) else patcher.model.model_loaded_weight_memory
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"loaded size is a {type(value).__name__}, not a number")
    return int(value)


def is_lowvram_patch(function) -> bool:
    """ComfyUI's LowVramPatch: `is_lowvram_patch` since dynamic VRAM, the class name before."""
    return getattr(function, "is_lowvram_patch", False) is True or type(function).__name__ == "LowVramPatch"


def _owner(root, key: str):
    """(module holding the parameter, its name) for a state-dict key, or (None, key) if absent."""
    path, _, param = key.rpartition(".")
    module = root
    for part in path.split(".") if path else ():
        module = getattr(module, part, None)
        if module is None:
            return None, param
    return module, param


def patched_on_the_fly(root, key: str) -> bool:
    """Whether the weight at `key` carries a LowVramPatch (patched at each use, never written)."""
    module, param = _owner(root, key)
    if module is None:
        return False
    if is_lowvram_patch(getattr(module, f"{param}_lowvram_function", None)):
        return True
    functions = getattr(module, f"{param}_function", None)
    return isinstance(functions, (list, tuple)) and any(is_lowvram_patch(f) for f in functions)


def _applied(patcher) -> bool:
    model = getattr(patcher, "model", None)
    current = getattr(model, "current_weight_patches_uuid", None)
    return current is not None and current == patcher.patches_uuid


def _application(n_in_place: int, n_on_the_fly: int) -> str:
    if n_in_place and n_on_the_fly:
        return "mixed"
    if n_on_the_fly:
        return "on_the_fly"
    return "in_place" if n_in_place else "none"


def patch_placement(patcher) -> dict[str, Any]:
    """How the patcher's patches reach its weights now.

    `patch_application`: "not_applied" (the model carries no patches of this patcher: not loaded
    with them, or another clone's), "in_place", "on_the_fly", "mixed", or "none" (applied, but no
    patched key is written or carries a patch). `weights_patched`: the patches are written into the
    weights, none applied on the fly. Counts are of this patcher's patched keys."""
    patches = getattr(patcher, "patches", None) or {}
    if not _applied(patcher):
        return {
            "patch_application": "not_applied",
            "weights_patched": False,
            "n_patched_in_place": 0,
            "n_patched_on_the_fly": 0,
        }
    root = patcher.model
    backup = getattr(patcher, "backup", None) or {}
    on_the_fly = {key for key in patches if patched_on_the_fly(root, str(key))}
    in_place = sum(1 for key in patches if key in backup and key not in on_the_fly)
    n_on_the_fly = len(on_the_fly)
    return {
        "patch_application": _application(in_place, n_on_the_fly),
        "weights_patched": n_on_the_fly == 0,
        "n_patched_in_place": in_place,
        "n_patched_on_the_fly": n_on_the_fly,
    }

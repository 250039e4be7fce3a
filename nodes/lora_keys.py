"""Which keys of a LoRA file ComfyUI applies to a MODEL/CLIP, recomputed with ComfyUI's own code.

ComfyUI only logs the keys it ignores ("lora key not loaded"). This reruns what
comfy.sd.load_lora_for_models does up to the patch dict (notes section 3, way 2): the key map of
the received objects, convert_lora, then load_lora(..., log_missing=False), on placeholders of the
file's tensors (monitors/lora/file.py). The set arithmetic is monitors/lora/coverage.py's.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from ..monitors.lora.caches import COVERAGE, file_identity
from ..monitors.lora.coverage import coverage_from_patches
from ..monitors.lora.file import placeholder_state_dict


def lora_path(name: str | None) -> str | None:
    """The file a loader's lora_name resolves to, or None when no loras folder holds it."""
    if not name:
        return None
    import folder_paths

    return folder_paths.get_full_path("loras", name)


def recompute_coverage(model, clip, path: str, index: dict[str, dict] | None) -> dict[str, Any]:
    """Key coverage of the file at `path` against the MODEL and/or CLIP given (None = not checked);
    computed once per file and model (monitors/lora/caches.py), then reused."""
    if index is None:
        # .ckpt / .pt files are pickles: the pack never unpickles a user's file, even restricted.
        return {"computed": False, "reason": "not a safetensors file: keys not checked (never unpickled)"}
    model_module = getattr(model, "model", None) if model is not None else None
    clip_module = getattr(clip, "cond_stage_model", None) if clip is not None else None
    file = file_identity(path)
    cached = COVERAGE.get(file, (model_module, clip_module))
    if cached is not None:
        return cached
    coverage = _coverage(path, index, model_module, clip_module)
    COVERAGE.put(file, (model_module, clip_module), coverage)
    return coverage


def _coverage(path: str, index: dict[str, dict], model_module, clip_module) -> dict[str, Any]:
    import comfy.lora
    import comfy.lora_convert

    lora = placeholder_state_dict(path, index)
    key_map: dict = {}
    if model_module is not None:
        key_map = comfy.lora.model_lora_keys_unet(model_module, key_map)
    if clip_module is not None:
        key_map = comfy.lora.model_lora_keys_clip(clip_module, key_map)
    origin = {id(tensor): name for name, tensor in lora.items()}
    file_keys = list(lora.keys())  # before convert_lora, which may rename keys in place
    # convert_lora may rename keys in place (Wan-Fun): it works on a copy, the file's dict stays whole
    converted = comfy.lora_convert.convert_lora(dict(lora))
    patch_dict = comfy.lora.load_lora(converted, key_map, log_missing=False)
    return coverage_from_patches(file_keys, origin, converted, key_map, patch_dict, model_module, clip_module)


def calculate_weight(entries, weight, key):
    """ComfyUI's own patch arithmetic on a weight copy (for changes that depend on the base weight),
    in the copy's dtype (the analysis hands float32). `original_weights` is the unpatched weight, as
    ComfyUI's loader passes it: a model_as_lora patch is the difference to it (a copy, since the
    other entries patch `weight` in place); ComfyUI before these keywords is called without them."""
    import comfy.lora

    if not _takes_original_weights(comfy.lora.calculate_weight):
        return comfy.lora.calculate_weight(entries, weight, key)
    original = {key: [(weight.clone(),)]} if any(_is_model_as_lora(e) for e in entries) else None
    return comfy.lora.calculate_weight(
        entries, weight, key, intermediate_dtype=weight.dtype, original_weights=original
    )


def _is_model_as_lora(entry) -> bool:
    value = entry[1] if isinstance(entry, (list, tuple)) and len(entry) > 1 else None
    return (
        isinstance(value, tuple)
        and len(value) > 0
        and isinstance(value[0], str)
        and value[0] == "model_as_lora"
    )


@functools.cache
def _takes_original_weights(function) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return "original_weights" in parameters and "intermediate_dtype" in parameters

"""Which keys of a LoRA file ComfyUI applies to a MODEL/CLIP, recomputed with ComfyUI's own code.

ComfyUI only logs the keys it ignores ("lora key not loaded"). This reruns what
comfy.sd.load_lora_for_models does up to the patch dict (notes section 3, way 2): the key map of
the received objects, convert_lora, then load_lora(..., log_missing=False). The file's tensors are
never read: every entry is a meta tensor with the header's shape and dtype, except the few tiny
ones load_lora reads values from (alpha, reshape_weight). Conversions keep tensor identities, so
the consumed keys map back to the names in the file.
"""

from __future__ import annotations

from typing import Any

from ..monitors.lora.coverage import consumed_keys, key_coverage

VALUE_READ_MAX_ELEMENTS = 16  # alpha scalars, reshape_weight shapes: read for real
SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}


def lora_path(name: str | None) -> str | None:
    """The file a loader's lora_name resolves to, or None when no loras folder holds it."""
    if not name:
        return None
    import folder_paths

    return folder_paths.get_full_path("loras", name)


def placeholder_state_dict(path: str, index: dict[str, dict]) -> dict:
    """File key -> meta tensor of the right shape and dtype (tiny tensors read for real)."""
    import torch
    from safetensors import safe_open

    placeholders = {}
    small = []
    for name, info in index.items():
        shape = info["shape"]
        dtype = getattr(torch, SAFETENSORS_DTYPES.get(info["dtype"], "float32"), torch.float32)
        n = 1
        for dim in shape:
            n *= dim
        if n <= VALUE_READ_MAX_ELEMENTS:
            small.append(name)
        else:
            placeholders[name] = torch.empty(shape, dtype=dtype, device="meta")
    if small:
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in small:
                placeholders[name] = f.get_tensor(name)
    return placeholders


def _state_keys(module) -> set[str]:
    return set(module.state_dict().keys()) if module is not None and hasattr(module, "state_dict") else set()


def recompute_coverage(model, clip, path: str, index: dict[str, dict] | None) -> dict[str, Any]:
    """Key coverage of the file at `path` against the MODEL and/or CLIP given (None = not checked)."""
    import comfy.lora
    import comfy.lora_convert

    if index is None:
        # .ckpt / .pt files are pickles: the pack never unpickles a user's file, even restricted.
        return {"computed": False, "reason": "not a safetensors file: keys not checked (never unpickled)"}
    lora = placeholder_state_dict(path, index)
    key_map: dict = {}
    model_module = getattr(model, "model", None) if model is not None else None
    clip_module = getattr(clip, "cond_stage_model", None) if clip is not None else None
    if model_module is not None:
        key_map = comfy.lora.model_lora_keys_unet(model_module, key_map)
    if clip_module is not None:
        key_map = comfy.lora.model_lora_keys_clip(clip_module, key_map)
    origin = {id(tensor): name for name, tensor in lora.items()}
    converted = comfy.lora_convert.convert_lora(lora)
    patch_dict = comfy.lora.load_lora(converted, key_map, log_missing=False)
    adapter_keys = set()
    for value in patch_dict.values():
        adapter_keys.update(getattr(value, "loaded_keys", ()) or ())
    consumed = consumed_keys(converted.keys(), key_map.keys(), adapter_keys)
    consumed_in_file = {origin.get(id(converted[k])) for k in consumed} - {None}
    coverage = key_coverage(lora.keys(), consumed_in_file)
    targets = {k if isinstance(k, str) else k[0] for k in patch_dict}
    model_keys, clip_keys = _state_keys(model_module), _state_keys(clip_module)
    not_loaded = sorted(t for t in targets if t not in model_keys and t not in clip_keys)
    coverage.update(
        computed=True,
        model_checked=model_module is not None,
        clip_checked=clip_module is not None,
        n_target_weights=len(targets),
        n_model_targets=len(targets & model_keys),
        n_clip_targets=len(targets & clip_keys),
        n_targets_not_loaded=len(not_loaded),
        targets_not_loaded=not_loaded[:50],
    )
    return coverage

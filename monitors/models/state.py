"""State of model objects (ComfyUI's MODEL, CLIP and VAE, or plain torch modules) by duck typing.

Reads metadata only: parameter sizes, devices and dtypes, patch bookkeeping. Never copies a
tensor, never moves or loads a model, and keeps no reference to what it looked at.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
from collections import Counter
from typing import Any

from .memory_tables import MEMORY_TABLES
from .patching import loaded_bytes, memory_manager, patch_placement

UNKNOWN = None


def _safe(fn, default=UNKNOWN, reasons: dict[str, str] | None = None, field: str | None = None):
    """fn(), or `default` with why in reasons[field] (the described object's "unknown_reasons")."""
    try:
        return fn()
    except Exception as exc:
        if reasons is not None and field is not None:
            reasons[field] = f"{type(exc).__name__}: {exc}"
        return default


def _str_or_none(value) -> str | None:
    return None if value is None else str(value)


# Within shared_module_memory(): module -> its module_memory, read once (a LoRA step describes the
# patcher before and after its LoRAs, one module, and each walk visits every parameter).
_SHARED_MEMORY: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "pipeline_monitor_module_memory", default=None
)


@contextlib.contextmanager
def shared_module_memory():
    """Within this block module_memory walks each module once; nothing is kept after it."""
    token = _SHARED_MEMORY.set({})
    try:
        yield
    finally:
        _SHARED_MEMORY.reset(token)


def module_memory(module, patcher=None) -> dict[str, Any]:
    """Bytes of parameters and buffers, in total and per device, plus the dominant dtype; with the
    module's ComfyUI patcher, kept with the model for its placement (memory_tables.py)."""
    kept = None if patcher is None else MEMORY_TABLES.memory(module, patcher, _module_memory)
    if kept is not None:
        return kept
    shared = _SHARED_MEMORY.get()
    if shared is None:
        return _module_memory(module)
    entry = shared.get(id(module))
    if entry is None or entry[0] is not module:  # the module is kept with it: its id stays its own
        entry = shared[id(module)] = (module, _module_memory(module))
    return copy.deepcopy(entry[1])


def _module_memory(module) -> dict[str, Any]:
    by_kind: dict[tuple, int] = {}  # (device, dtype) -> bytes: strings made once per kind
    n_params = 0
    for tensor in _parameters_and_buffers(module):
        kind = (tensor.device, tensor.dtype)
        by_kind[kind] = by_kind.get(kind, 0) + tensor.nbytes
        n_params += tensor.numel()
    by_device: Counter[str] = Counter()
    by_dtype: Counter[str] = Counter()
    for (device, dtype), n_bytes in by_kind.items():
        by_device[str(device)] += n_bytes
        by_dtype[str(dtype).replace("torch.", "")] += n_bytes
    return {
        "size_bytes": sum(by_device.values()),
        "bytes_by_device": dict(by_device),
        "dtype": by_dtype.most_common(1)[0][0] if by_dtype else None,
        "n_elements": n_params,
    }


def _walks_like_torch(module) -> bool:
    """A torch module whose parameters(), buffers() and the walk under them are torch's own: the
    direct walk gives what they give. Anything else is asked through its methods."""
    import torch

    kind = type(module)
    return isinstance(module, torch.nn.Module) and all(
        getattr(kind, name) is getattr(torch.nn.Module, name)
        for name in (
            "parameters",
            "buffers",
            "named_parameters",
            "named_buffers",
            "named_modules",
            "_named_members",
        )
    )


def _parameters_and_buffers(module) -> list:
    """module.parameters() then module.buffers(), each tensor once per list as torch gives them, by a
    direct walk of the submodules: torch's generators build every qualified name on the way, about
    3x the cost, and a model monitor walks a whole checkpoint's modules each run."""
    if not _walks_like_torch(module):
        tensors = []
        if hasattr(module, "parameters"):
            tensors.extend(module.parameters())
        if hasattr(module, "buffers"):
            tensors.extend(module.buffers())
        return tensors
    parameters: dict[int, Any] = {}  # id -> tensor, in the order torch lists them
    buffers: dict[int, Any] = {}
    seen_modules: set[int] = set()
    stack = [module]
    while stack:  # depth first, in registration order, as named_modules()
        current = stack.pop()
        if current is None or id(current) in seen_modules:
            continue
        seen_modules.add(id(current))
        for tensor in current._parameters.values():
            if tensor is not None:
                parameters.setdefault(id(tensor), tensor)
        for tensor in current._buffers.values():
            if tensor is not None:
                buffers.setdefault(id(tensor), tensor)
        if current._modules:
            stack.extend(reversed(current._modules.values()))
    return [*parameters.values(), *buffers.values()]


def describe_patcher(patcher, reasons: dict[str, str] | None = None) -> dict[str, Any]:
    """Fields of a ComfyUI ModelPatcher-like object (load/offload device, patches, loaded memory).
    Why a figure is unknown goes to `reasons` (field -> "ExceptionType: message").

    `loaded_weight_bytes` is what ComfyUI's memory manager counts as resident (`loaded_size()`),
    `memory_manager` says which manager that is ("dynamic" or "estimate"); `weights_patched` is true
    only when the patches are written into the weights, not applied on the fly (monitors/models/
    patching.py)."""
    patches = getattr(patcher, "patches", None)
    loaded = _safe(lambda: loaded_bytes(patcher), reasons=reasons, field="loaded_weight_bytes")
    parent = getattr(patcher, "parent", None)
    placement = _safe(lambda: patch_placement(patcher), {}, reasons=reasons, field="weights_patched")
    manager = _safe(lambda: memory_manager(patcher), reasons=reasons, field="memory_manager")
    return {
        "patcher_class": type(patcher).__name__,
        "load_device": _str_or_none(getattr(patcher, "load_device", None)),
        "offload_device": _str_or_none(getattr(patcher, "offload_device", None)),
        "n_patches": len(patches) if isinstance(patches, dict) else None,
        "patches_uuid": _str_or_none(getattr(patcher, "patches_uuid", None)),
        "parent_object_id": None if parent is None else id(parent),
        "memory_manager": manager,
        "loaded_weight_bytes": loaded if isinstance(loaded, int) else None,
        "weights_patched": placement.get("weights_patched"),
        "patch_application": placement.get("patch_application"),
        "n_patched_in_place": placement.get("n_patched_in_place"),
        "n_patched_on_the_fly": placement.get("n_patched_on_the_fly"),
        **object_patch_names(getattr(patcher, "object_patches", None)),
    }


MAX_OBJECT_PATCHES_LISTED = 50


def object_patch_names(object_patches) -> dict[str, Any]:
    """The patcher's object patches (attributes replaced when the model loads: model_sampling,
    latent_format... and, in newer ComfyUI, ("config", ...) keys): names only, a tuple key joined
    with "/"."""
    if not isinstance(object_patches, dict):
        return {"n_object_patches": None, "object_patch_names": None}
    names = sorted("/".join(map(str, k)) if isinstance(k, tuple) else str(k) for k in object_patches)
    return {"n_object_patches": len(names), "object_patch_names": names[:MAX_OBJECT_PATCHES_LISTED]}


def _base(kind: str, obj, module, patcher=None) -> dict[str, Any]:
    reasons: dict[str, str] = {}
    memory = (
        _safe(lambda: module_memory(module, patcher), {}, reasons, "size_bytes") if module is not None else {}
    )
    device = _safe(lambda: getattr(module, "device", None), reasons=reasons, field="device")
    if device is None and memory.get("bytes_by_device"):
        device = max(memory["bytes_by_device"].items(), key=lambda kv: kv[1])[0]
    return {
        "kind": kind,
        "object_id": id(obj),
        "class": type(obj).__name__,
        "module_class": None if module is None else type(module).__name__,
        "device": _str_or_none(device),
        "dtype": memory.get("dtype"),
        "size_bytes": memory.get("size_bytes"),
        "bytes_by_device": memory.get("bytes_by_device", {}),
        "n_elements": memory.get("n_elements"),
        "unknown_reasons": reasons,  # field -> why it is None; empty when every read worked
    }


def describe_model(model) -> dict[str, Any]:
    """MODEL: a ModelPatcher over a diffusion model (or any torch module)."""
    module = getattr(model, "model", model)
    info = _base("model", model, module, model if hasattr(model, "patches") and module is not model else None)
    if hasattr(model, "patches"):
        info.update(describe_patcher(model, info["unknown_reasons"]))
        dtype = (
            _safe(model.model_dtype, reasons=info["unknown_reasons"], field="dtype")
            if hasattr(model, "model_dtype")
            else None
        )
        if dtype is not None:
            info["dtype"] = str(dtype).replace("torch.", "")
        info["model_type"] = _str_or_none(
            _safe(lambda: module.model_type.name, reasons=info["unknown_reasons"], field="model_type")
        )
        info["config_class"] = _config_class(module, info["unknown_reasons"])
    info["resident_bytes"] = _resident(info)
    return info


def _config_class(module, reasons: dict[str, str]) -> str | None:
    """The model configuration class ComfyUI detected (comfy.supported_models: SD15, SD20, WAN21_T2V...):
    model_base's class alone cannot tell SD1.5 from SD2.x (both BaseModel)."""
    config = getattr(module, "model_config", None)
    if config is None:
        reasons["config_class"] = (
            f"{type(module).__name__} has no model_config (not a model ComfyUI detected from a checkpoint)"
        )
        return None
    return type(config).__name__


def describe_clip(clip) -> dict[str, Any]:
    """CLIP: text encoder(s) behind `cond_stage_model`, with its own patcher."""
    module = getattr(clip, "cond_stage_model", None)
    patcher = getattr(clip, "patcher", None)
    info = _base("clip", clip, module, patcher)
    if patcher is not None:
        info.update(describe_patcher(patcher, info["unknown_reasons"]))
    info["tokenizer_class"] = _safe(
        lambda: type(clip.tokenizer).__name__, reasons=info["unknown_reasons"], field="tokenizer_class"
    )
    info["resident_bytes"] = _resident(info)
    return info


def describe_vae(vae) -> dict[str, Any]:
    """VAE: `first_stage_model` plus the encoder's compression settings."""
    module = getattr(vae, "first_stage_model", None)
    patcher = getattr(vae, "patcher", None)
    info = _base("vae", vae, module, patcher)
    if patcher is not None:
        info.update(describe_patcher(patcher, info["unknown_reasons"]))
    info["device"] = _str_or_none(getattr(vae, "device", None)) or info["device"]
    vae_dtype = getattr(vae, "vae_dtype", None)
    if vae_dtype is not None:
        info["dtype"] = str(vae_dtype).replace("torch.", "")
    info["latent_channels"] = getattr(vae, "latent_channels", None)
    info["latent_dim"] = getattr(vae, "latent_dim", None)
    ratio, why = _compression_ratio(getattr(vae, "downscale_ratio", None))
    info["downscale_ratio"] = ratio
    if why is not None:
        info["unknown_reasons"]["downscale_ratio"] = why
    info["resident_bytes"] = _resident(info)
    return info


def _compression_ratio(ratio) -> tuple[Any, str | None]:
    """A VAE's downscale_ratio as JSON numbers: a number, or a list with None for the parts that are
    functions (video VAEs compress time by a function of the frame count); (value, why unknown)."""
    if ratio is None or (isinstance(ratio, (int, float)) and not isinstance(ratio, bool)):
        return ratio, None
    if isinstance(ratio, (list, tuple)):
        parts = [p if isinstance(p, (int, float)) and not isinstance(p, bool) else None for p in ratio]
        if None not in parts:
            return parts, None
        missing = ", ".join(str(i) for i, p in enumerate(parts) if p is None)
        return parts, (
            f"part(s) {missing} are functions of the input size, not numbers "
            "(see the step's spatial/temporal_compression_ratio)"
        )
    return None, f"a {type(ratio).__name__}, not a number (see the step's compression ratios)"


def _resident(info: dict[str, Any]) -> int | None:
    """Bytes held on the load device: the patcher's own count, else what sits there now."""
    if info.get("loaded_weight_bytes"):
        return info["loaded_weight_bytes"]
    load_device = info.get("load_device") or info.get("device")
    by_device = info.get("bytes_by_device") or {}
    if load_device is None:
        return None
    return sum(v for k, v in by_device.items() if k == load_device or k.startswith(f"{load_device}:"))


DESCRIBERS = {"model": describe_model, "clip": describe_clip, "vae": describe_vae}


def describe(kind: str, obj) -> dict[str, Any]:
    return DESCRIBERS[kind](obj)

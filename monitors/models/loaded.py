"""What was loaded when a step ran out of memory: the framework's resident models with their sizes,
and the torch allocator's state. Plain data only (no reference to a model is kept), read on demand.

Loaded-model entries are duck-typed like ComfyUI's LoadedModel: `.model` (the patcher, None once
freed), `.device`, `.model_loaded_memory()`, `.model_memory()`. ComfyUI's model_loaded_memory() is
the patcher's loaded_size(), virtual allocation included on a dynamic patcher; each row says which
memory manager counted it (monitors/models/patching.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from .patching import memory_manager

log = logging.getLogger(__name__)

MAX_MODELS_LISTED = 20
ALLOCATOR_KEYS = (
    "allocated_bytes.all.current",
    "allocated_bytes.all.peak",
    "reserved_bytes.all.current",
    "reserved_bytes.all.peak",
    "inactive_split_bytes.all.current",
    "num_alloc_retries",
    "num_ooms",
)


def value_or_reason(read) -> tuple[int | None, str | None]:
    """(bytes, None), or (None, why they are unknown) for a `*_unknown_reason` key beside the figure."""
    try:
        value = read()
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if isinstance(value, (int, float)):
        return int(value), None
    return None, f"not a number: {type(value).__name__}"


def loaded_model_row(loaded) -> dict:
    patcher = loaded.model  # a weak reference's target: None once the model was freed
    module = getattr(patcher, "model", None)
    loaded_bytes, loaded_reason = value_or_reason(loaded.model_loaded_memory)
    total_bytes, total_reason = value_or_reason(loaded.model_memory)
    return {
        "patcher_class": None if patcher is None else type(patcher).__name__,
        "model_class": None if module is None else type(module).__name__,
        "device": str(getattr(loaded, "device", None)),
        "memory_manager": None if patcher is None else memory_manager(patcher),
        "loaded_bytes": loaded_bytes,
        "loaded_bytes_unknown_reason": loaded_reason,
        "total_bytes": total_bytes,
        "total_bytes_unknown_reason": total_reason,
    }


def allocator_state(device) -> dict | None:
    """The CUDA caching allocator's counters on `device`; None on a CPU or without CUDA."""
    import torch

    if getattr(device, "type", None) != "cuda" or not torch.cuda.is_available():
        return None
    stats = torch.cuda.memory_stats(device)
    return {key.replace(".all", "").replace(".", "_"): stats.get(key) for key in ALLOCATOR_KEYS}


def loaded_models_snapshot(loaded_models: Iterable, device, free_memory: Callable[[], int]) -> dict:
    """{models resident (newest first), their total, free memory on `device`, allocator state}."""
    rows = []
    for loaded in loaded_models:
        try:
            rows.append(loaded_model_row(loaded))
        except Exception as exc:  # one odd entry must not hide the others
            rows.append({"error": f"{type(exc).__name__}: {exc}"})
    allocator, allocator_reason = None, None
    try:
        allocator = allocator_state(device)
        if allocator is None:
            allocator_reason = f"no CUDA caching allocator on {device}"
    except Exception as exc:
        log.debug("pipeline monitor: allocator state unreadable: %s", exc)
        allocator_reason = f"{type(exc).__name__}: {exc}"
    free_bytes, free_reason = value_or_reason(free_memory)
    return {
        "n_models_loaded": len(rows),
        "models": rows[:MAX_MODELS_LISTED],
        "loaded_bytes": sum(r.get("loaded_bytes") or 0 for r in rows),
        "device": str(device),
        "free_bytes": free_bytes,
        "free_bytes_unknown_reason": free_reason,
        "allocator": allocator,
        "allocator_unknown_reason": allocator_reason,
    }

"""ComfyUI's own figures of a model patcher, read cheaply for the model-residency events
(nodes/model_residency.py): `loaded_size()`, `model_size()`, the count of patched weights, the
class of the weights' module, small serials naming the patcher and its weights, the node that
loaded them; and the events one `LoadedModel.model_load` makes of the figures before and after.
No walk over parameters: a few attribute reads and two of ComfyUI's own counters."""

from __future__ import annotations

import weakref

from ..monitors.engine.model_residency import ModelEvent

_serials: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# the weights' module -> the node running when its first patcher was made (its loader)
loaders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_next_serial = [0]


def serial(obj) -> int | None:
    """A small number naming `obj` in this process while it lives (weak: keeps nothing alive)."""
    if obj is None:
        return None
    try:
        found = _serials.get(obj)
        if found is None:
            _next_serial[0] += 1
            found = _serials[obj] = _next_serial[0]
        return found
    except TypeError:  # not weak-referenceable
        return None


def call_or(method, *args, default=None):
    """`method(*args)`, or `default` when it is missing (None: older ComfyUI) or raises."""
    if method is None:
        return default
    try:
        return method(*args)
    except Exception:
        return default


def _int(value) -> int | None:
    return None if value is None else int(value)


def patcher_state(patcher) -> dict:
    """ComfyUI's own figures of a patcher: loaded_size(), model_size(), patched weight count."""
    inner = getattr(patcher, "model", None)
    return {
        "loaded": _int(call_or(getattr(patcher, "loaded_size", None))),
        "size": _int(call_or(getattr(patcher, "model_size", None))),
        "patched": len(getattr(patcher, "backup", None) or ())
        + int(getattr(inner, "lowvram_patch_counter", 0) or 0),
        "model_class": type(inner).__name__ if inner is not None else None,
        "patcher_id": serial(patcher),
        "model_id": serial(inner),
        "loader": loader_of(inner),
    }


def loader_of(inner) -> str | None:
    try:
        return loaders.get(inner)
    except TypeError:
        return None


def make_event(kind, state, after, device, duration_s, **extra) -> ModelEvent:
    before_loaded, after_loaded = state["loaded"], after["loaded"]
    moved = None if before_loaded is None or after_loaded is None else abs(after_loaded - before_loaded)
    return ModelEvent(
        kind=kind,
        model_class=state["model_class"],
        patcher_id=state["patcher_id"],
        model_id=state["model_id"],
        device=None if device is None else str(device),
        duration_s=duration_s,
        bytes_moved=moved,
        loaded_before_bytes=before_loaded,
        loaded_after_bytes=after_loaded,
        model_size_bytes=after["size"],
        loader_node_id=after.get("loader"),
        **extra,
    )


def load_events(patcher, state, device, duration_s, reason=None) -> list[ModelEvent]:
    """The events of one LoadedModel.model_load: the load (when bytes moved) and LoRA patching."""
    after = patcher_state(patcher)
    events = []
    moved = (after["loaded"] or 0) - (state["loaded"] or 0)
    if call_or(getattr(patcher, "is_dynamic", None), default=False):
        kind = "load_dynamic"
    elif after["size"] and after["loaded"] is not None and after["loaded"] < after["size"]:
        kind = "load_partial"
    else:
        kind = "load_full"
    if moved < 0 and kind != "load_dynamic":  # asked for less than it held: ComfyUI offloaded part
        kind = "unload_partial"
    if moved != 0 or kind == "load_dynamic" and state["loaded"] != after["loaded"]:
        events.append(make_event(kind, state, after, device, duration_s, reason=reason))
    if after["patched"] and (after["patched"] != state["patched"] or state.get("unpatched")):
        events.append(make_event("patch", state, after, device, None, n_weights=after["patched"]))
    return events

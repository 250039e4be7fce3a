"""Model loads, unloads and LoRA patches, through ComfyUI's model-management seams.

Wrapped once at start, each with a `*args, **kwargs` wrapper that calls ComfyUI's own function
first and never raises into it:
- `comfy.model_management.load_models_gpu`: the models a node asks for (one already loaded is
  noted as resident), and the reason of the unloads it causes (room for those models);
- `comfy.model_management.free_memory`: an unload outside a load is an explicit free;
- `LoadedModel.model_load` / `model_unload`: a load or an unload (full or partial), its bytes from
  ComfyUI's own `loaded_size()` before and after and `model_size()`, its device and duration;
- `ModelPatcher.unpatch_model`: LoRA weights restored (the patcher's backup, counted by `len`);
- `ModelPatcher.partially_load` / `partially_unload` called on their own (not inside the above);
- `ModelPatcher.__init__`: the node running when the weights' first patcher is made, their loader;
- `unload_all_models`: the reason of its unloads.
Each reads a few cheap numbers (nodes/patcher_figures.py: no walk over parameters) and hands one
ModelEvent to the recorder (monitors/engine/model_residency.py). A missing seam is named by
nodes/seams.py at start.
"""

from __future__ import annotations

import functools
import logging
import threading
import time

from ..monitors.engine.model_residency import ModelEvent
from .patcher_figures import load_events, loader_of, loaders, make_event, patcher_state
from .runtime import get_runtime

log = logging.getLogger(__name__)

_WRAPPED = "__pipeline_monitor_wrapped__"
_local = threading.local()  # depth of wrapped calls and the reason of the free in progress


def _note_loader(patcher) -> None:
    """The node running when the first patcher of these weights was made: their loader (a LoRA
    clone shares its base's weights, so it keeps the base's loader)."""
    inner = getattr(patcher, "model", None)
    if inner is None or loader_of(inner) is not None:
        return
    running = get_runtime().recorder.executing_node()
    if running is not None:
        loaders[inner] = running[0]


def _record(event: ModelEvent) -> None:
    try:
        get_runtime().recorder.model_event(event)
    except Exception:
        log.exception("pipeline monitor: model event not recorded")


def _wrap_model_load(original):
    @functools.wraps(original)
    def model_load(self, *args, **kwargs):
        patcher = getattr(self, "model", None)
        state = _safe(patcher_state, patcher)
        started = time.perf_counter()
        _enter()
        try:
            return original(self, *args, **kwargs)
        finally:
            unpatched = _leave()
            if state is not None:
                state["unpatched"] = unpatched
                if unpatched:  # the load counts from what the unpatch left loaded
                    state["loaded"] = getattr(_local, "loaded_after_unpatch", state["loaded"])
                duration = time.perf_counter() - started
                for event in (
                    _safe(
                        load_events,
                        patcher,
                        state,
                        getattr(self, "device", None),
                        duration,
                        getattr(_local, "load_reason", None),
                    )
                    or ()
                ):
                    _record(event)

    return model_load


def _wrap_model_unload(original):
    @functools.wraps(original)
    def model_unload(self, *args, **kwargs):
        patcher = getattr(self, "model", None)
        state = _safe(patcher_state, patcher)
        started = time.perf_counter()
        _enter()
        unloading, _local.unloading = getattr(_local, "unloading", False), True
        result = None
        try:
            result = original(self, *args, **kwargs)
            return result
        finally:
            _leave()
            _local.unloading = unloading
            if state is not None:
                _safe(_unload_event, patcher, state, result, time.perf_counter() - started)

    return model_unload


def _unload_event(patcher, state, result, duration_s) -> None:
    after = patcher_state(patcher)
    if state["loaded"] == after["loaded"] and not result:
        return
    kind = "unload_full" if result else "unload_partial"
    device = getattr(patcher, "load_device", None)
    _record(make_event(kind, state, after, device, duration_s, reason=getattr(_local, "free_reason", None)))


def _wrap_unpatch(original):
    @functools.wraps(original)
    def unpatch_model(self, *args, **kwargs):
        unpatch_weights = kwargs.get("unpatch_weights", args[1] if len(args) > 1 else True)
        # restored as part of an unload: the unload event says it
        restore = unpatch_weights and not getattr(_local, "unloading", False)
        n = len(getattr(self, "backup", None) or ()) if restore else 0
        before = _safe(patcher_state, self) if n else None
        started = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            if before is not None:
                _safe(_unpatch_event, self, before, n, time.perf_counter() - started)

    return unpatch_model


def _unpatch_event(patcher, before, n, duration_s) -> None:
    """LoRA weights restored; ComfyUI's estimate-based patcher also puts every weight back on the
    offload device (loaded_size() drops to 0), so the load that follows counts from there."""
    after = patcher_state(patcher)
    _local.unpatched, _local.loaded_after_unpatch = True, after["loaded"]
    device = getattr(patcher, "load_device", None)
    _record(make_event("unpatch", before, after, device, duration_s, n_weights=n))


def _wrap_partial(original, kind):
    """partially_load / partially_unload called on their own (inside a model_load/model_unload
    the outer call records the event)."""

    @functools.wraps(original)
    def partial(self, *args, **kwargs):
        if getattr(_local, "depth", 0):
            return original(self, *args, **kwargs)
        state = _safe(patcher_state, self)
        started = time.perf_counter()
        _enter()
        try:
            return original(self, *args, **kwargs)
        finally:
            _leave()
            if state is not None:
                _safe(_partial_event, self, state, kind, time.perf_counter() - started)

    return partial


def _wrap_partial_load(original):
    return _wrap_partial(original, "load_partial")


def _wrap_partial_unload(original):
    return _wrap_partial(original, "unload_partial")


def _partial_event(patcher, state, kind, duration_s) -> None:
    after = patcher_state(patcher)
    if after["loaded"] != state["loaded"]:
        _record(make_event(kind, state, after, getattr(patcher, "load_device", None), duration_s))


def _wrap_load_models_gpu(original):
    @functools.wraps(original)
    def load_models_gpu(*args, **kwargs):
        models = kwargs.get("models", args[0] if args else ())
        previous = getattr(_local, "load_reason", None)
        names = _safe(_note_requested, models)
        _local.load_reason = f"memory for {names}" if names else None
        try:
            return original(*args, **kwargs)
        finally:
            _local.load_reason = previous

    return load_models_gpu


def _note_requested(models) -> str:
    """Note the requested models already fully loaded; the classes asked for, for the reason."""
    names = []
    for patcher in list(models or ())[:16]:
        state = patcher_state(patcher)
        names.append(state["model_class"] or "a model")
        if state["loaded"] and state["size"] and state["loaded"] >= state["size"]:
            get_runtime().recorder.model_resident(state["model_id"], state["model_class"])
    return ", ".join(dict.fromkeys(names))


def _wrap_patcher_init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _safe(_note_loader, self)

    return __init__


def _wrap_unload_all(original):
    @functools.wraps(original)
    def unload_all_models(*args, **kwargs):
        previous = getattr(_local, "free_reason", None)
        _local.free_reason = "unload_all_models: an explicit free (the /free route, or a node)"
        try:
            return original(*args, **kwargs)
        finally:
            _local.free_reason = previous

    return unload_all_models


def _wrap_free_memory(original):
    @functools.wraps(original)
    def free_memory(*args, **kwargs):
        previous = getattr(_local, "free_reason", None)
        load = getattr(_local, "load_reason", None)
        _local.free_reason = previous or (f"free_memory: {load}" if load else "free_memory: an explicit free")
        try:
            return original(*args, **kwargs)
        finally:
            _local.free_reason = previous

    return free_memory


def _enter() -> None:
    _local.depth = getattr(_local, "depth", 0) + 1
    if _local.depth == 1:
        _local.unpatched = False


def _leave() -> bool:
    _local.depth = max(0, getattr(_local, "depth", 1) - 1)
    return bool(getattr(_local, "unpatched", False))


def _safe(function, *args):
    try:
        return function(*args)
    except Exception:
        log.debug("pipeline monitor: model residency read failed", exc_info=True)
        return None


def resident_models() -> list[dict]:
    """The models ComfyUI's model manager holds now (its `current_loaded_models`, a short list)."""
    import comfy.model_management as mm

    out = []
    for loaded in list(mm.current_loaded_models)[:32]:
        patcher = loaded.model
        if patcher is None:
            continue
        state = patcher_state(patcher)
        out.append(
            {
                "model_class": state["model_class"],
                "patcher_id": state["patcher_id"],
                "model_id": state["model_id"],
                "device": str(getattr(loaded, "device", None)),
                "loaded_bytes": state["loaded"],
                "model_size_bytes": state["size"],
            }
        )
    return out


def _seams():
    """(owner, name, original, wrapper) of every seam wrapped here; raises where one is missing."""
    import comfy.model_management as mm
    import comfy.model_patcher as mp

    return (
        (mm, "load_models_gpu", mm.load_models_gpu, _wrap_load_models_gpu),
        (mm, "free_memory", mm.free_memory, _wrap_free_memory),
        (mm, "unload_all_models", mm.unload_all_models, _wrap_unload_all),
        (mp.ModelPatcher, "__init__", mp.ModelPatcher.__init__, _wrap_patcher_init),
        (mm.LoadedModel, "model_load", mm.LoadedModel.model_load, _wrap_model_load),
        (mm.LoadedModel, "model_unload", mm.LoadedModel.model_unload, _wrap_model_unload),
        (mp.ModelPatcher, "unpatch_model", mp.ModelPatcher.unpatch_model, _wrap_unpatch),
        (mp.ModelPatcher, "partially_load", mp.ModelPatcher.partially_load, _wrap_partial_load),
        (mp.ModelPatcher, "partially_unload", mp.ModelPatcher.partially_unload, _wrap_partial_unload),
        (mm, "current_loaded_models", mm.current_loaded_models, None),
    )


def install() -> bool:
    """Wrap the model-management seams once; False (one warning) when this ComfyUI lacks one."""
    try:
        seams = _seams()
    except Exception as exc:
        log.info("pipeline monitor: model loads and unloads not recorded, a seam is missing (%s)", exc)
        return False
    for owner, name, original, wrap in seams:
        if wrap is None or getattr(original, _WRAPPED, False):
            continue
        wrapped = wrap(original)
        setattr(wrapped, _WRAPPED, True)
        setattr(owner, name, wrapped)
    return True


def on_prompt_end(recorder) -> None:
    """Hand the recorder the models resident as the prompt ends."""
    try:
        recorder.set_resident_at_end(resident_models())
    except Exception as exc:  # the report says null: not read
        log.debug("pipeline monitor: resident models not read: %s", exc)

"""Profiling API for any Python pipeline (diffusers scripts, video frameworks, torchrun jobs).

    from monitors import pipeline_profiler as pm

    pm.configure(preset="development")                 # or a YAML path, or keyword arguments

    @pm.profile_model_parameters()                     # init time + parameter counts
    def load_model(): ...

    @pm.profile_method("text_encoding")
    def encode(prompt): ...

    @pm.profile_diffusion_step(lambda args, kwargs, result: {"step_index": kwargs["i"], "timestep": kwargs["t"]})
    def denoise(latents, i, t): ...

    with pm.profile_session("t2v", tags={"model": "wan"}) as session:
        ...                                            # one generation
    session.paths                                      # {"json": ..., "html": ..., "trace": ...}

Stages, steps, blocks and events are recorded inside a session and are no-ops outside one; a
model's parameters are recorded whenever profiling is enabled (models are usually loaded before
the first generation). Disabled, a decorated call costs one global read and a branch on top of
the call (bench/profiling_overhead.py measures it); profiling never raises into the caller's code.
One session at a time per process: a session opened inside another becomes one of its stages.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable, Mapping

from ..probes import Probes
from ..report import to_jsonable
from . import usage
from .config import STAGE_INFERENCE_STEPS, ProfilingConfig
from .config_files import load_config
from .extract import describe_parameters, either_form, safe_extract
from .session import ProfileSession

log = logging.getLogger(__name__)

__all__ = [
    "configure",
    "get_config",
    "is_enabled",
    "current_session",
    "profile_session",
    "profile_method",
    "record_event",
    "profile_diffusion_step",
    "profile_block_computation",
    "profile_model_parameters",
    "get_usage_statistics",
    "log_usage_summary",
]

get_usage_statistics = usage.get_usage_statistics
log_usage_summary = usage.log_usage_summary

# The two globals every decorated call reads first. None / False mean "do nothing".
_session: ProfileSession | None = None
_enabled: bool = True
_config: ProfilingConfig = ProfilingConfig()
_probes: Probes | None = None
_session_lock = threading.Lock()


def configure(
    path: str | None = None, *, preset: str | None = None, probes: Probes | None = None, **keys
) -> ProfilingConfig:
    """Set the process-wide configuration (YAML file, preset, keyword arguments; see config.py).

    `probes` replaces the readings backend (tests use monitors.probes.fake)."""
    global _config, _enabled, _probes
    config = keys.pop("config", None)
    if config is not None and not isinstance(config, ProfilingConfig):
        raise TypeError(f"config must be a ProfilingConfig, got {type(config).__name__}")
    _config = config if config is not None else load_config(path, preset=preset, **keys)
    _enabled = _config.enabled
    _probes = probes
    return _config


def get_config() -> ProfilingConfig:
    return _config


def is_enabled() -> bool:
    return _enabled


def current_session() -> ProfileSession | None:
    return _session


# -- sessions --------------------------------------------------------------------------------------


class _SessionContext:
    """`with profile_session(...) as s:` or `@profile_session(...)`; `s` is the ProfileSession
    (None when profiling is disabled)."""

    def __init__(self, name: str, tags: Mapping | None, config: ProfilingConfig | None, deep: bool = False):
        self.name, self.tags, self.config, self.deep = name, dict(tags or {}), config, deep
        self.session: ProfileSession | None = None
        self._nested_stage = None

    def __enter__(self) -> ProfileSession | None:
        global _session
        config = self.config or _config
        if not (config.enabled and _enabled):
            return None
        with _session_lock:
            outer = _session
            if outer is None:
                self.session = ProfileSession(self.name, self.tags, config, probes=_probes, deep=self.deep).start()
                _session = self.session
                return self.session
        self._nested_stage = outer.open_stage(self.name)  # a session inside a session: a stage of it
        return outer

    def __exit__(self, exc_type, exc, tb) -> bool:
        global _session
        if self._nested_stage is not None:
            if _session is not None:
                _session.close_stage(self._nested_stage, "executed" if exc_type is None else "error")
            self._nested_stage = None
            return False
        session, self.session = self.session, None
        if session is None:
            return False
        with _session_lock:
            if _session is session:
                _session = None
        status, error = "success", None
        if exc_type is not None:
            status = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else "error"
            node_id, stage = session.failed_stage or (None, session.current_stage)
            error = {
                "node_id": node_id,
                "node_type": stage,
                "exception_type": exc_type.__name__,
                "exception_message": str(exc)[:2000],
            }
        try:
            session.finish(status, error)
        except Exception as exc2:  # never turn the user's success into a failure
            log.warning(
                "pipeline monitor: session %s report failed: %s: %s", session.name, type(exc2).__name__, exc2
            )
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _SessionContext(self.name, self.tags, self.config, self.deep):
                return fn(*args, **kwargs)

        return wrapper


def profile_session(
    name: str = "session", tags: Mapping | None = None, config: ProfilingConfig | None = None, deep: bool = False
):
    """Profile one whole generation: a context manager or a decorator. `deep=True` adds
    torch.profiler's per-stage breakdown (top ops, host and device time: the `deep_profile` step)."""
    return _SessionContext(name, tags, config, deep)


# -- stages ----------------------------------------------------------------------------------------


class _Stage:
    """Shared by the stage decorators: wraps a function (sync or async) or is a `with` block."""

    kind = "stage"

    def __init__(self, stage: str | None, extract: Callable | None = None):
        self.stage, self.extract = stage, extract
        self._open = threading.local()

    def _record(self, session: ProfileSession, duration_s, info: dict) -> None:
        pass

    def _title(self, info: dict) -> str | None:
        return None

    def _normalise(self, info: dict) -> dict:
        return info

    def _run(self, session: ProfileSession, stage: str, fn, args, kwargs, extract=None):
        if not session.config.stage_enabled(stage):
            return fn(*args, **kwargs)
        record = session.open_stage(stage)
        try:
            result = fn(*args, **kwargs)
        except BaseException:
            session.close_stage(record, "error")
            raise
        info = self._normalise(safe_extract(session, stage, extract, args, kwargs, result))
        self._record(session, session.close_stage(record, "executed", self._title(info)), info)
        return result

    async def _run_async(self, session: ProfileSession, stage: str, fn, args, kwargs, extract=None):
        if not session.config.stage_enabled(stage):
            return await fn(*args, **kwargs)
        record = session.open_stage(stage)
        try:
            result = await fn(*args, **kwargs)
        except BaseException:
            session.close_stage(record, "error")
            raise
        info = self._normalise(safe_extract(session, stage, extract, args, kwargs, result))
        self._record(session, session.close_stage(record, "executed", self._title(info)), info)
        return result

    def __call__(self, fn):
        stage = self.stage or getattr(fn, "__qualname__", None) or repr(fn)
        extract = either_form(self.extract, fn)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                session = _session
                if session is None:
                    return await fn(*args, **kwargs)
                return await self._run_async(session, stage, fn, args, kwargs, extract)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            session = _session
            if session is None:
                return fn(*args, **kwargs)
            return self._run(session, stage, fn, args, kwargs, extract)

        return wrapper

    # `with profile_method("vae_decode"):` -- per thread, so one object may serve several threads
    def __enter__(self):
        session = _session
        if session is not None and self.stage and session.config.stage_enabled(self.stage):
            stack = getattr(self._open, "stack", None) or []
            stack.append((session, session.open_stage(self.stage)))
            self._open.stack = stack
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        stack = getattr(self._open, "stack", None)
        if stack:
            session, record = stack.pop()
            duration = session.close_stage(record, "executed" if exc_type is None else "error")
            if exc_type is None:
                self._record(session, duration, {})
        return False


def profile_method(stage: str | Callable | None = None) -> _Stage:
    """Time and peak a stage: `@profile_method("vae_decode")`, `@profile_method` or a `with` block."""
    if callable(stage):
        return _Stage(None)(stage)
    return _Stage(stage)


class _DiffusionStep(_Stage):
    def _normalise(self, info: dict) -> dict:
        # Inferix's extractors name the step `step`; rows and titles here use `step_index`
        if "step" in info and "step_index" not in info:
            return {**info, "step_index": info["step"]}
        return info

    def _title(self, info: dict) -> str | None:
        index = info.get("step_index")
        return None if index is None else f"step {index}"

    def _record(self, session, duration_s, info) -> None:
        session.add_diffusion_step(duration_s, info)


class _Block(_Stage):
    def _title(self, info: dict) -> str | None:
        index = info.get("block_index")
        return None if index is None else f"block {index}"

    def _record(self, session, duration_s, info) -> None:
        session.add_block(duration_s, info)


def profile_diffusion_step(extract: Callable | None = None, stage: str = STAGE_INFERENCE_STEPS) -> _Stage:
    """A denoising step. `extract(args, kwargs, result)` -> {"step_index", "timestep", "block_size", ...}
    (or Inferix's `extract(args, kwargs)`, self left out, with `step` for the index)."""
    return _DiffusionStep(stage, extract)


def profile_block_computation(extract: Callable | None = None, stage: str = "block_computation") -> _Stage:
    """A block of streaming/block-wise generation. `extract(args, kwargs, result)` ->
    {"block_index", "n_frames", ...} (or Inferix's `extract(args, kwargs)`); frames and blocks per
    second come from these."""
    return _Block(stage, extract)


def record_event(name: str, data: Callable[[], object] | object = None):
    """Record an instant event at this moment with `data`, or with `data()`'s result when it is
    callable (called only while a session is open, so building the data costs nothing otherwise).
    Returns the data, or None. (Inferix's `add_profiling_event`, exported beside it, is a
    decorator that records an event after each call of the decorated function.)"""
    session = _session
    if session is None:
        return None
    try:
        value = data() if callable(data) else data
        session.add_event(str(name), value)
        return value
    except Exception as exc:
        session.note(f"event {name}: {type(exc).__name__}: {exc}")
        return None


# -- models ----------------------------------------------------------------------------------------


def profile_model_parameters(extract: Callable | None = None, name: str | None = None):
    """Time a model-building function and record its parameters. `extract(args, kwargs, result)`
    returns the module to describe, or a mapping of figures (Inferix's `extract(args, kwargs)` ->
    {model_name, parameters_count, model_type} too); by default the result is described."""

    def decorate(fn):
        label = name or getattr(fn, "__qualname__", "model")
        read = either_form(extract, fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if not _enabled:
                return fn(*args, **kwargs)
            session = _session
            record = session.open_stage("model_init") if session is not None else None
            started = time.perf_counter()
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                if session is not None:
                    session.close_stage(record, "error", label)
                raise
            duration = time.perf_counter() - started
            if session is not None:
                session.close_stage(record, "executed", label)
            try:
                target = read(args, kwargs, result) if read is not None else result
                figures = dict(target) if isinstance(target, Mapping) else describe_parameters(target)
                count = figures.get("parameters_count")  # Inferix's name for the count
                if isinstance(count, int) and not isinstance(count, bool):
                    figures.setdefault("n_parameters", count)
                usage.tracker.record_model_init(label, duration, to_jsonable(figures))
            except Exception as exc:
                log.warning(
                    "pipeline monitor: model parameters of %s: %s: %s", label, type(exc).__name__, exc
                )
                usage.tracker.record_model_init(label, duration, {})
            return result

        return wrapper

    return decorate

"""Code written for Inferix's profiling module runs on this pack unchanged but for its import line:

    from inferix.profiling.decorators import profile_method, ...      # before
    from monitors.pipeline_profiler.inferix import profile_method, ...        # here
    from monitors.pipeline_profiler.decorators import profile_method, ...     # the same names, Inferix's path
    from monitors.pipeline_profiler import profile_method, ...                # the pack's own entry, too

Thin adapters over this pack's own API (api.py stays the primary one), in Inferix's documented
forms: extractors take `(args, kwargs)` with `self` left out of `args`; `add_profiling_event` is a
decorator adding an event after the call, its extractor called as `fn(result, *args, **kwargs)` with
only the arguments it accepts, so `lambda result, **kwargs` and `lambda _, path, **kwargs` both
work. An extractor may also take this pack's `(args, kwargs, result)`. Inferix's YAML file is read
by `configure`/`load_config` as is (inferix_config.py); `--enable_profiling` and
`--profiling_config PATH` come from `add_profiling_arguments` + `configure_from_args`;
`python -m monitors aggregate --reports_dir DIR --output FILE` merges a folder of rank reports.

What differs: Inferix reads `self._profiler`; here one process-wide session is open while a
`profile_session` runs, so stages, steps, blocks and events outside a session are not recorded
(model parameters are, as in this pack's API). Figures go to the report's usual places, see
docs/profiling.md ("Coming from Inferix").
"""

from __future__ import annotations

import argparse
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

from . import api
from .api import profile_session
from .config import ProfilingConfig
from .extract import is_method, n_positional

log = logging.getLogger(__name__)

__all__ = [
    "profile_method",
    "profile_session",
    "add_profiling_event",
    "profile_diffusion_step",
    "profile_model_parameters",
    "profile_block_computation",
    "add_profiling_arguments",
    "configure_from_args",
]


def _args_kwargs_extract(extract: Callable | None, method: bool) -> Callable | None:
    """Inferix's `extract(args, kwargs)` (self left out) as this pack's `extract(args, kwargs, result)`."""
    if extract is None:
        return None
    n = n_positional(extract)
    three = n is not None and n >= 3  # this pack's form; two (or *args) is Inferix's

    def adapted(args, kwargs, result):
        args = args[1:] if method else args
        return extract(args, kwargs, result) if three else extract(args, kwargs)

    return adapted


def _caller(data_func: Callable) -> Callable:
    """`data_func(result, *args, **kwargs)` with only the arguments it accepts."""
    try:
        params = list(inspect.signature(data_func).parameters.values())
    except (TypeError, ValueError):
        return data_func
    n = n_positional(data_func)
    positional = [p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    any_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}

    def call(result, *args, **kwargs):
        values = (result, *args) if n is None else (result, *args)[:n]
        bound = set(positional[: len(values)])
        kwargs = {k: v for k, v in kwargs.items() if k not in bound and (any_keyword or k in named)}
        return data_func(*values, **kwargs)

    return call


# -- the decorators --------------------------------------------------------------------------------


def profile_method(stage_name: str | Callable | None = None, metadata: Mapping[str, Any] | None = None):
    """A stage named `stage_name` (default: the function's name); `metadata` becomes an event
    `<stage>.metadata` at each call inside a session."""
    if callable(stage_name):
        return profile_method()(stage_name)

    def decorate(fn):
        stage = stage_name or fn.__name__
        timed = api.profile_method(stage)(fn)
        if not metadata:
            return timed
        data = dict(metadata)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if api.current_session() is not None:
                api.record_event(f"{stage}.metadata", data)
            return timed(*args, **kwargs)

        return wrapper

    return decorate


def add_profiling_event(event_name: str, data_func: Callable | None = None):
    """A decorator: after each call inside a session, an event `event_name` whose data is
    `data_func(result, *args, **kwargs)` (self left out), or None without data_func. A failing
    data_func records the event with data None and the error in the report's monitor_errors."""
    call = None if data_func is None else _caller(data_func)

    def decorate(fn):
        method = is_method(fn)

        def record(result, args, kwargs):
            session = api.current_session()
            if session is None:
                return
            data = None
            if call is not None:
                try:
                    data = call(result, *(args[1:] if method else args), **kwargs)
                except Exception as exc:
                    session.note(f"event {event_name}: data function failed: {type(exc).__name__}: {exc}")
            api.record_event(event_name, lambda: data)  # data itself may be callable

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                result = await fn(*args, **kwargs)
                record(result, args, kwargs)
                return result

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            result = fn(*args, **kwargs)
            record(result, args, kwargs)
            return result

        return wrapper

    return decorate


def _with_step_index(extract):
    """Inferix names the step `step`; this pack's rows and titles use `step_index`."""
    if extract is None:
        return None

    def adapted(args, kwargs, result):
        info = extract(args, kwargs, result)
        if isinstance(info, Mapping) and "step" in info and "step_index" not in info:
            info = {**info, "step_index": info["step"]}
        return info

    return adapted


def profile_diffusion_step(step_func: Callable | None = None):
    """A denoising step (stage `inference_steps`); `step_func(args, kwargs)` -> step, timestep,
    block_size, guidance_scale, ... kept per step in the report's details.diffusion_steps."""

    def decorate(fn):
        extract = _with_step_index(_args_kwargs_extract(step_func, is_method(fn)))
        return api.profile_diffusion_step(extract)(fn)

    return decorate


def profile_block_computation(block_info_func: Callable | None = None):
    """A block (stage `block_computation`); `block_info_func(args, kwargs)` -> block_index,
    block_size, computation_time_ms, memory_usage_mb, ... kept per block in details.blocks."""

    def decorate(fn):
        return api.profile_block_computation(_args_kwargs_extract(block_info_func, is_method(fn)))(fn)

    return decorate


def profile_model_parameters(model_name_func: Callable | None = None):
    """Model figures: `model_name_func(args, kwargs)` -> model_name, parameters_count, model_type
    (kept as given, parameters_count also as n_parameters), recorded in details.models."""

    def decorate(fn):
        extract = _args_kwargs_extract(model_name_func, is_method(fn))

        def figures(args, kwargs, result):
            info = dict(extract(args, kwargs, result) or {}) if extract is not None else {}
            info.setdefault("model_name", "unknown_model")
            info.setdefault("parameters_count", 0)
            info.setdefault("model_type", "unknown")
            count = info["parameters_count"]
            if isinstance(count, int) and not isinstance(count, bool):
                info.setdefault("n_parameters", count)
            return info

        return api.profile_model_parameters(figures, name=fn.__name__)(fn)

    return decorate


# -- command line ----------------------------------------------------------------------------------


def add_profiling_arguments(parser: argparse.ArgumentParser, *, enabled_by_default: bool = False):
    """`--enable_profiling` (and `--no-enable_profiling`) and `--profiling_config PATH`, as
    Inferix's pipelines take them; read them back with `configure_from_args`."""
    group = parser.add_argument_group("profiling")
    group.add_argument(
        "--enable_profiling",
        action=argparse.BooleanOptionalAction,
        default=enabled_by_default,
        help=f"profile this run (default: {'on' if enabled_by_default else 'off'})",
    )
    group.add_argument(
        "--profiling_config",
        metavar="PATH",
        help="a profiling YAML file: this pack's keys or Inferix's top-level 'profiling:' file",
    )
    return group


def configure_from_args(
    args: argparse.Namespace, *, preset: str | None = None, **overrides
) -> ProfilingConfig:
    """Configure profiling from the parsed flags: off unless `--enable_profiling`; then the file
    (and `preset` / keyword overrides, as `configure` takes them)."""
    if not getattr(args, "enable_profiling", False):
        return api.configure(enabled=False)
    return api.configure(getattr(args, "profiling_config", None), preset=preset, **overrides)

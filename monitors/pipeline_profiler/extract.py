"""What a decorated call tells the profiler: an `extract` function in this pack's form
`extract(args, kwargs, result)` or Inferix's `extract(args, kwargs)` (self left out), and its
result made safe for the report (a failing or odd extractor becomes a note, never an exception);
the parameter figures of a model a decorated call built.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..report import to_jsonable

if TYPE_CHECKING:
    from .session import ProfileSession


def is_method(fn: Callable) -> bool:
    """Inferix's decorators always drop the first argument (`self`); here only where the decorated
    function's first parameter is `self` or `cls`, so plain functions keep all their arguments."""
    try:
        first = next(iter(inspect.signature(fn).parameters), None)
    except (TypeError, ValueError):
        return False
    return first in ("self", "cls")


def n_positional(fn: Callable) -> int | None:
    """How many positional arguments `fn` accepts (None: any number)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return None
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def either_form(extract: Callable | None, fn: Callable) -> Callable | None:
    """This pack's `extract(args, kwargs, result)`, or Inferix's `extract(args, kwargs)` (two
    positional parameters) with `self` left out of `args`, so code written for Inferix's
    decorators runs with `from monitors.pipeline_profiler import ...` too."""
    if extract is None or n_positional(extract) != 2:
        return extract
    method = is_method(fn)

    def adapted(args, kwargs, result):
        return extract(args[1:] if method else args, kwargs)

    return adapted


def safe_extract(session: ProfileSession, what: str, extract, args, kwargs, result) -> dict:
    """`extract`'s mapping as plain data, {} where there is none (why goes to the session's notes)."""
    if extract is None:
        return {}
    try:
        info = extract(args, kwargs, result)
    except Exception as exc:
        session.note(f"{what}: extract failed: {type(exc).__name__}: {exc}")
        return {}
    if info is None:
        return {}
    if not isinstance(info, Mapping):
        session.note(f"{what}: extract must return a mapping, got {type(info).__name__}")
        return {}
    if type(info) is dict and all(_plain(k, v) for k, v in info.items()):  # the usual step/block info
        return dict(info)
    return to_jsonable(dict(info))


def _plain(key, value) -> bool:
    """Already what to_jsonable would return: a str key and a str, int, bool, None or finite float."""
    kind = type(value)
    return type(key) is str and (
        kind in (str, int, bool) or value is None or (kind is float and value - value == 0.0)
    )


def describe_parameters(obj) -> dict:
    """Parameter figures of a torch module (or any object with .parameters()); {} otherwise."""
    parameters = getattr(obj, "parameters", None)
    if not callable(parameters):
        return {}
    n = trainable = n_bytes = 0
    dtypes: dict[str, int] = {}
    devices: dict[str, int] = {}
    for p in parameters():
        count = int(p.numel())
        n += count
        trainable += count if getattr(p, "requires_grad", False) else 0
        n_bytes += count * int(p.element_size())
        dtypes[str(p.dtype).replace("torch.", "")] = dtypes.get(str(p.dtype).replace("torch.", ""), 0) + count
        devices[str(p.device)] = devices.get(str(p.device), 0) + count
    return {
        "class_name": type(obj).__name__,
        "n_parameters": n,
        "n_trainable_parameters": trainable,
        "parameter_bytes": n_bytes,
        "dtypes": dtypes,
        "devices": devices,
    }

"""One state_dict() per module per LoRA step.

A step reads a model's state dict in three places (the sides' key counts, the base weights, the
key coverage), and each call walks the whole model building every key: shared within a step, it is
read once. Nothing outlives the step: the dicts hold references to the model's own tensors.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

from ..models.state import shared_module_memory

_SHARED: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "pipeline_monitor_state_dicts", default=None
)


@contextlib.contextmanager
def shared_state_dicts():
    """Within this block state_dict_of reads each module's state dict once."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def state_dict_of(module) -> dict:
    shared = _SHARED.get()
    if shared is None:
        return module.state_dict()
    entry = shared.get(id(module))
    if entry is None or entry[0] is not module:  # the module is kept with it: its id stays its own
        entry = shared[id(module)] = (module, module.state_dict())
    return entry[1]


def with_shared_state_dicts(function):
    """Decorator: the whole call in shared_state_dicts(), and the models' memory walks shared too
    (the patchers before and after a LoRA hold one module)."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        with shared_state_dicts(), shared_module_memory():
            return function(*args, **kwargs)

    return call

"""One state_dict() per module per LoRA step, and none at all for a plain torch module after its first.

A step reads a model's state dict in three places (the sides' key counts, the base weights, the
key coverage), and each call walks the whole model building every key: shared within a step, it is
read once. Nothing outlives the step: the dicts hold references to the model's own tensors.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import threading
import weakref
from collections.abc import Mapping

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


def state_dict_of(module) -> Mapping:
    """The module's state dict: a LiveState where its table applies (no walk after the first),
    else state_dict(), read once within shared_state_dicts()."""
    live = live_state(module)
    if live is not None:
        return live
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


# -- a module's state dict without walking it each step --------------------------------------------


class LiveState(Mapping):
    """A state dict read through a table of (owner module, name) made once per module: each read
    gives the tensor the module holds now (detached, as state_dict() gives it). Built only for a
    module whose every submodule uses torch's own state_dict and has no state-dict hooks, so its
    keys are exactly state_dict()'s; the tree of a loaded model does not change (as for
    weights.leaf_parameter_rule)."""

    __slots__ = ("_table",)

    def __init__(self, table: dict) -> None:
        self._table = table

    def __getitem__(self, key):
        owner_ref, name, is_parameter = self._table[key]
        owner = owner_ref()
        tensors = None if owner is None else (owner._parameters if is_parameter else owner._buffers)
        tensor = None if tensors is None else tensors.get(name)
        if tensor is None:
            raise KeyError(key)
        return tensor.detach()

    def shape(self, key) -> list[int] | None:
        """The shape of the tensor under `key` now (None: no tensor), without a detached view."""
        owner_ref, name, is_parameter = self._table.get(key, (None, None, None))
        owner = None if owner_ref is None else owner_ref()
        tensors = None if owner is None else (owner._parameters if is_parameter else owner._buffers)
        tensor = None if tensors is None else tensors.get(name)
        return None if tensor is None else [int(d) for d in tensor.shape]

    def __iter__(self):
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __contains__(self, key) -> bool:
        return key in self._table


_TABLES = None  # module -> its LiveState table or False (state_dict() needed), held weakly
_TABLES_LOCK = threading.Lock()
STATE_DICT_METHODS = ("state_dict", "_save_to_state_dict")


def _state_table(module):
    """{key: (owner ref, name, is_parameter)} as state_dict() would list them, or None when a submodule
    has its own state_dict or hooks (then only state_dict() says what it holds)."""
    import torch

    table = {}  # owners held weakly: the table is kept with the module and must not keep it alive
    for prefix, owner in module.named_modules(remove_duplicate=True):
        kind = type(owner)
        if any(getattr(kind, name) is not getattr(torch.nn.Module, name) for name in STATE_DICT_METHODS):
            return None
        if getattr(owner, "_state_dict_hooks", None) or getattr(owner, "_state_dict_pre_hooks", None):
            return None
        dot = f"{prefix}." if prefix else ""
        for name, tensor in owner._parameters.items():
            if tensor is not None:
                table[dot + name] = (weakref.ref(owner), name, True)
        for name, tensor in owner._buffers.items():
            if tensor is not None and name not in owner._non_persistent_buffers_set:
                table[dot + name] = (weakref.ref(owner), name, False)
    return table


def live_state(module) -> LiveState | None:
    """The module's LiveState (its table made at the first call), None where state_dict() is needed."""
    import torch
    from torch.utils.weak import WeakIdKeyDictionary

    global _TABLES
    if not isinstance(module, torch.nn.Module):
        return None
    with _TABLES_LOCK:
        if _TABLES is None:
            _TABLES = WeakIdKeyDictionary()
        try:
            table = _TABLES.get(module)
        except TypeError:
            return None
    if table is None:
        table = _state_table(module)
        with _TABLES_LOCK:
            _TABLES[module] = False if table is None else table
    return LiveState(table) if table else None

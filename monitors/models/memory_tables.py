"""A loaded model's memory table (bytes per device and dtype, elements) kept with the model.

Walking every parameter and buffer of a checkpoint costs milliseconds each run, and a workflow
queued again describes the same MODEL, CLIP and VAE. Where a ComfyUI patcher stands beside the
module, the table is kept per module (weakly: it goes with the model) under a placement
signature made of ComfyUI's own sizes, `model_size()` (the whole model, cached by ComfyUI) and
`loaded_size()` (what its memory manager holds on the load device), plus the device and dtype of
the module's first parameter: loading, offloading or a partial (low-VRAM) load changes one of
them, and the table is walked again. A module without a patcher is walked each time.
"""

from __future__ import annotations

import threading

from .patching import loaded_bytes

MAX_SIGNATURES = 8  # tables kept per module (placements seen: offloaded, loaded, partly loaded...)


def placement_signature(patcher, module) -> tuple | None:
    """(model_size, loaded_size, first parameter's device and dtype) of the patcher's own module,
    None when one is unknown."""
    model_size = getattr(patcher, "model_size", None)
    if patcher is None or getattr(patcher, "model", None) is not module or not callable(model_size):
        return None  # the sizes are the patcher's module's, and only that module's
    if not callable(getattr(module, "parameters", None)):
        return None
    try:
        size, loaded = model_size(), loaded_bytes(patcher)
        first = next(iter(module.parameters()), None)
    except Exception:
        return None
    if not isinstance(size, int) or isinstance(size, bool):
        return None
    probe = None if first is None else (str(first.device), str(first.dtype))
    return (size, loaded, probe)


class MemoryTables:
    """module -> {placement signature: memory table}, the module held weakly; `n_walks` counts the
    walks over a module's parameters made through it (a repeated run makes none; a module whose
    placement cannot be stated is walked by the caller, not here)."""

    def __init__(self) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self._by_module = WeakIdKeyDictionary()
        self._lock = threading.Lock()
        self.n_walks = 0

    def memory(self, module, patcher, walk) -> dict | None:
        """The module's table for its placement now (walk(module) when not kept); None when the
        placement cannot be stated (the caller walks as without a patcher)."""
        signature = placement_signature(patcher, module)
        if signature is None:
            return None
        with self._lock:
            try:
                tables = self._by_module.get(module)
                if tables is None:
                    tables = self._by_module[module] = {}
            except TypeError:
                return None
            found = tables.get(signature)
            if found is None:
                self.n_walks += 1
        if found is not None:
            return copy_table(found)
        table = walk(module)
        with self._lock:
            if len(tables) >= MAX_SIGNATURES:
                tables.clear()
            tables[signature] = copy_table(table)
        return table

    def n_models(self) -> int:
        return len(self._by_module)

    def clear(self) -> None:
        with self._lock:
            self._by_module.clear()


def copy_table(table: dict) -> dict:
    """A table the caller may change (its one nested dict copied too)."""
    return {**table, "bytes_by_device": dict(table.get("bytes_by_device") or {})}


MEMORY_TABLES = MemoryTables()

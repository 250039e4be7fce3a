"""Row templates: what a LoRA patch row holds that does not depend on its strength, per loaded module.

A user trying strengths queues the same LoRA file again: ComfyUI's LoraLoader keeps the file's
tensors and wraps them in new patch entries with the new strength. Everything of a row but its
strengths (type, rank, alpha, scale, whether ComfyUI applies it and why not, block, patch bytes
and device, the change norm at unit strength and the base weight's norm) is a function of the
loaded module, the key, the offset and the patch tensors. It is kept per module (weakly: it goes
with the model) and key, and reused only when the entry holds the very same tensor objects (alive,
by identity) at the same offset, or, those gone, tensors of the same shapes from the same file
identity (the rule of the file figures in caches.py: a file changed on disk is a new file). A new
strength is then identity checks and a rescale (row_from_template, entries.set_delta). A template
is served read-only: the caller's row is a new dict made from it.
"""

from __future__ import annotations

import threading
import weakref

from .patches import entry_tensors, float_or_none

MAX_TEMPLATES_PER_MODULE = 16384  # a module's templates are dropped together past this (bounded)


class Template:
    """One entry's strength-free row, its unit-strength change norm (`unit`, None with `reason`),
    and its key's base-weight norm (`base`, None with `base_reason`)."""

    __slots__ = ("refs", "match", "row", "unit", "reason", "base", "base_reason")  # match: shapes

    def __init__(self, refs, match, row, unit, reason, base, base_reason) -> None:
        self.refs, self.match, self.row = refs, match, row
        self.unit, self.reason, self.base, self.base_reason = unit, reason, base, base_reason


def _offset(entry):
    offset = entry[3] if len(entry) > 3 else None
    return tuple(offset) if offset else None


class ModuleTemplates:
    """One module's templates: {(key, file, offset[, tensor ids]): Template}."""

    def __init__(self, table: dict, lock, limit: int) -> None:
        self._table, self._lock, self._limit = table, lock, limit

    @staticmethod
    def _key(key: str, entry, file, tensors: list) -> tuple:
        # A known file names the tensors' values (caches.py): one template per file and key; an
        # entry of no known file is matched by its tensors' identity alone.
        ids = None if file is not None else tuple(id(t) for t in tensors)
        return (key, file, _offset(entry), ids)

    def get(self, key: str, entry, file=None) -> Template | None:
        """The entry's template when its tensors are the ones it was made from (alive, by identity),
        or, all of those gone, tensors of the same shapes from the same file (the loader read it
        again); None: compute."""
        tensors = entry_tensors(entry)
        if not tensors:
            return None
        found = self._table.get(self._key(key, entry, file, tensors))
        if found is None or len(found.refs) != len(tensors):
            return None
        alive = [ref() for ref in found.refs]
        if all(a is t for a, t in zip(alive, tensors, strict=True)):
            return found
        if file is None or any(a is not None for a in alive):
            return None
        if found.match != tuple(tuple(t.shape) for t in tensors):
            return None
        found.refs = tuple(weakref.ref(t) for t in tensors)
        return found

    def put(self, key: str, entry, file, template_fields: tuple) -> None:
        """Keep the entry's template: (strength-free row, unit, reason, base, base_reason)."""
        tensors = entry_tensors(entry)
        if not tensors:
            return
        try:
            refs = tuple(weakref.ref(t) for t in tensors)
        except TypeError:
            return
        shapes = tuple(tuple(t.shape) for t in tensors)
        with self._lock:
            if len(self._table) >= self._limit:
                self._table.clear()
            self._table[self._key(key, entry, file, tensors)] = Template(refs, shapes, *template_fields)


class RowTemplates:
    """module -> ModuleTemplates, the module held weakly."""

    def __init__(self, max_per_module: int = MAX_TEMPLATES_PER_MODULE) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self._by_module = WeakIdKeyDictionary()
        self._lock = threading.Lock()
        self.max_per_module = max_per_module

    def of(self, module, create: bool = True) -> ModuleTemplates | None:
        """The module's templates (None: no module, or one that cannot be held weakly)."""
        if module is None:
            return None
        with self._lock:
            try:
                table = self._by_module.get(module)
                if table is None:
                    if not create:
                        return None
                    table = self._by_module[module] = {}
            except TypeError:
                return None
        return ModuleTemplates(table, self._lock, self.max_per_module)

    def n_templates(self, module) -> int:
        found = self.of(module, create=False)
        return 0 if found is None else len(found._table)

    def n_models(self) -> int:
        return len(self._by_module)

    def clear(self) -> None:
        with self._lock:
            self._by_module.clear()


TEMPLATES = RowTemplates()

# Row fields a template leaves to the entry: its strengths and what follows from them.
STRENGTH_FIELDS = ("strength", "base_weight_scale", "effective_scale")


def row_from_template(template: Template, entry) -> dict:
    """A new row from the template and the entry's own strengths (before set_delta)."""
    row = dict(template.row)
    strength = float_or_none(entry[0]) if len(entry) > 0 else None
    row["strength"] = strength
    row["base_weight_scale"] = float_or_none(entry[2]) if len(entry) > 2 else None
    scale = row["scale"]
    row["effective_scale"] = None if scale is None or strength is None else strength * scale
    return row


def strength_free(row: dict) -> dict:
    """The row's template part (its strengths are filled per entry)."""
    return {k: (None if k in STRENGTH_FIELDS else v) for k, v in row.items()}

"""LoRA patches on a ModelPatcher-like object: what each entry is, how strong, and how big a change.

Duck-typed on ComfyUI's bookkeeping (notes 2.1): `patcher.patches` maps a state-dict key to entries
(strength_patch, patch_value, strength_model, offset, function); `patch_value` is a weight adapter
(`.name`, `.weights`), ("diff", (t,)), ("set", (t,)), ("model_as_lora", (t,)), a bare (t,) or a
merge list. Clones copy each key's list but share the entries, so the entries a clone added are the
ones its parent does not hold (by identity). Norms of the change never build a base weight or a
whole delta (lora_norms); the base weight's own norm is read once per loaded model (caches.py).
Rows are plain data: nothing here keeps a tensor or a patcher after returning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..models.patching import patched_on_the_fly
from ..numeric.device_figures import known, resolve
from ..numeric.tensor_stats import one_cpu_thread
from .entries import ADAPTER_INFO, WITHOUT_NORM, analyse_entry, entry_facts, set_delta  # noqa: F401 (imported from here)
from .norms import frobenius_deferred
from .patches import ADAPTER_TYPES, classify_patch, patch_tensors  # noqa: F401 (imported from here)
from .state_dicts import state_dict_of
from .templates import row_from_template, strength_free
from .totals import MAX_LISTED_KEYS, aggregate, by_block, summarise_rows  # noqa: F401 (imported from here)
from .weights import weight_rows

MAX_HOPS = 64  # parent-chain walk limit: far more than any real stack of loaders
# Elements of base weights a side may copy to patch them with the framework's arithmetic (changes
# that depend on the base weight: DoRA, OFT, set...); plain base norms have no budget: they are
# read once per loaded model and cached (caches.py).
MATERIALISE_ELEMENT_BUDGET = 1 << 27


def block_of(key: str) -> str:
    """The block a weight belongs to: its path up to the first numeric part, else its module."""
    parts = key.split(".")
    for i, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: i + 1])
    return ".".join(parts[:-1]) or key


# -- which entries a clone added ------------------------------------------------------------------


def patches_of(patcher) -> dict:
    patches = getattr(patcher, "patches", None)
    return patches if isinstance(patches, dict) else {}


def added_entries(after: Mapping, before: Mapping) -> dict[str, list]:
    """key -> entries present in `after` but not in `before` (compared by identity)."""
    added = {}
    for key, entries in after.items():
        known = {id(e) for e in before.get(key, ())}
        new = [e for e in entries if id(e) not in known]
        if new:
            added[key] = new
    return added


def parent_chain(patcher, max_hops: int = MAX_HOPS) -> list:
    """[patcher, its parent, ...] following `.parent`, at most max_hops + 1 objects."""
    chain = [patcher]
    while len(chain) <= max_hops:
        parent = getattr(chain[-1], "parent", None)
        if parent is None or any(parent is seen for seen in chain):
            break
        chain.append(parent)
    return chain


# -- base weights and rows ------------------------------------------------------------------------


def base_weight_lookup(patcher) -> Callable[[str], Any]:
    """key -> the unpatched weight, read where it lives: the module's own weight, unless the key's
    patches were written into it (then `patcher.backup` holds the original). A weight patched on the
    fly (a LowVramPatch: low-VRAM mode, dynamic VRAM) is never written: the module holds the base."""
    model = getattr(patcher, "model", None)
    state = state_dict_of(model) if hasattr(model, "state_dict") else {}
    backup = getattr(patcher, "backup", None) or {}

    def lookup(key: str):
        saved = backup.get(key)
        if saved is not None and not patched_on_the_fly(model, key):
            return getattr(saved, "weight", None) if hasattr(saved, "weight") else saved[0]
        return state.get(key)

    return lookup


def _plain_tensor(tensor) -> bool:
    import torch

    return type(tensor) in (torch.Tensor, torch.nn.Parameter) and tensor.device.type != "meta"


def _shape_of(lookup, key: str):
    try:
        weight = lookup(key) if lookup is not None else None
        return tuple(weight.shape) if weight is not None and hasattr(weight, "shape") else None
    except Exception:
        return None


def patch_rows(added: Mapping[str, list], base_lookup=None, not_patched=None, reuse=None) -> list[dict]:
    """One row per added entry, with the base weight norm and relative change (one read-back).

    `not_patched(key)` says why the framework never patches a key (None: it does); `reuse`
    (caches.Reuse): cached base norms and file figures, and the counts of what was reused.
    """
    plan = RowPlan(added, base_lookup, not_patched, reuse)
    resolve(plan.figures())
    return plan.finish()


class RowPlan:
    """patch_rows before its read-back: the rows' figures stay on the device until the caller
    resolves them with every other figure of the step (device_figures.resolve), then finish()."""

    def __init__(self, added: Mapping[str, list], base_lookup=None, not_patched=None, reuse=None) -> None:
        self.reuse = reuse
        self.templates = None if reuse is None else reuse.templates.of(reuse.module)  # templates.py
        self.entries: list[tuple] = []  # (row, raw, reason, function, key, entry, computed)
        self.bases: list[tuple] = []  # (rows of the key, figure, reason, store)
        # Hundreds of small Gram products and base-weight chunks, each kernel ending in a
        # thread-pool barrier: on a loaded 2-core CPU the real-size SD1.5 LoRA took 11 s on
        # torch's threads, 25-60x what one thread takes (GPU tensors are unaffected).
        with one_cpu_thread("cpu"):
            for key in sorted(added, key=str):
                self._plan_key(str(key), added[key], base_lookup, not_patched)

    def _plan_key(self, key: str, entries: list, base_lookup, not_patched) -> None:
        if self._from_templates(key, entries, base_lookup):
            return
        shape = _shape_of(base_lookup, key)
        skip = not_patched(key) if not_patched is not None else None
        key_rows = []
        for entry in entries:
            cached = self._cached_unit_norm(key, entry)
            row, raw, reason, function = entry_facts(entry, shape, skip, cached)
            row = {"key": key, "block": block_of(key), **row}
            fresh = strength_free(row) if self._templates_on() else None
            self.entries.append((row, raw, reason, function, key, entry, cached is None, fresh))
            key_rows.append(row)
        if base_lookup is not None:
            self.bases.append((key_rows, *_base_norm(base_lookup, key, key_rows[0]["offset"], self.reuse)))
        else:
            for row in key_rows:
                row["base_norm"] = row["base_norm_unavailable"] = None

    def _templates_on(self) -> bool:
        return self.templates is not None

    def _from_templates(self, key: str, entries: list, base_lookup) -> bool:
        """Every entry of the key from its template (templates.py): no patch tensor or base weight
        is looked at. False (nothing planned) when one entry has none."""
        if not self._templates_on() or base_lookup is None:
            return False
        found = [self.templates.get(key, entry, self.reuse.file_of(entry)) for entry in entries]
        if not found or any(t is None for t in found):
            return False
        key_rows = []
        self.reuse.counts["n_delta_norms_reused"] += len(found)
        for template, entry in zip(found, entries, strict=True):
            row = row_from_template(template, entry)
            raw = None if template.reason is not None else known(template.unit)
            self.entries.append((row, raw, template.reason, _function(entry), key, entry, False, None))
            key_rows.append(row)
        first = found[0]
        memo_key = (key, _offset_key(key_rows[0]["offset"]))
        figure = self.reuse.pending_base.get(memo_key)
        if figure is None and first.base is not None:
            self.reuse.count("n_base_norms_reused")
            figure = self.reuse.pending_base[memo_key] = known(first.base)
        self.bases.append((key_rows, figure, first.base_reason, None))
        return True

    def _cached_unit_norm(self, key: str, entry) -> float | None:
        return None if self.reuse is None else self.reuse.unit_norm(key, entry)

    def figures(self) -> list:
        return [e[1] for e in self.entries] + [b[1] for b in self.bases]

    def finish(self) -> list[dict]:
        rows, made = [], {}
        for row, raw, reason, function, key, entry, computed, fresh in self.entries:
            value = None if raw is None else raw.value()
            set_delta(row, value, reason, function)
            if computed and value is not None and self.reuse is not None:
                self.reuse.put_unit_norm(key, entry, value)
            if fresh is not None:
                made[id(row)] = (fresh, value, reason, key, entry)
            rows.append(row)
        for key_rows, figure, reason, store in self.bases:
            base = None if figure is None else figure.value()
            if store is not None and base is not None:
                store(base)
            for row in key_rows:
                row["base_norm"] = base
                row["base_norm_unavailable"] = reason if base is None else None
                delta = row["delta_norm"]
                row["relative_change"] = delta / base if delta is not None and base else None
                if id(row) in made:
                    self._keep_template(made[id(row)], base, row["base_norm_unavailable"])
        for row in rows:
            row.setdefault("relative_change", None)
        return rows

    def _keep_template(self, made: tuple, base, base_reason) -> None:
        fresh, value, reason, key, entry = made
        unit = None if reason is not None else value
        if reason is None and value is None:
            return  # a figure that could not be read: computed again next time
        self.templates.put(key, entry, self.reuse.file_of(entry), (fresh, unit, reason, base, base_reason))


def _function(entry) -> bool:
    return len(entry) > 4 and entry[4] is not None


def _base_norm(lookup, key: str, offset, reuse) -> tuple:
    """(figure of the unpatched weight's norm or None, why none, how to cache it once read).

    No read budget: a norm is read once per loaded model (caches.BaseNorms) and reused after."""
    try:
        weight = lookup(key)
    except Exception as exc:
        return None, f"base weight unreadable: {type(exc).__name__}", None
    if weight is None:
        return None, "no base weight under this key", None
    if not _plain_tensor(weight):
        return None, f"base weight is a {type(weight).__name__} (quantised or offloaded)", None
    if reuse is None:
        return _narrowed_norm(weight, offset), None, None
    memo = reuse.pending_base.get((key, _offset_key(offset)))
    if memo is not None:  # the same weight in another hop of this side: counted once
        return memo, None, None
    cached = reuse.base_norms.get(reuse.module, key, offset, weight)
    if cached is not None:
        reuse.count("n_base_norms_reused")
        reuse.pending_base[(key, _offset_key(offset))] = known(cached)
        return known(cached), None, None
    reuse.count("n_base_norms_computed")
    figure = reuse.pending_base[(key, _offset_key(offset))] = _narrowed_norm(weight, offset)

    def store(norm: float) -> None:
        reuse.base_norms.put(reuse.module, key, offset, weight, norm)

    return figure, None, store


def _offset_key(offset) -> tuple | None:
    return tuple(offset) if offset else None


def _narrowed_norm(weight, offset):
    if offset:
        weight = weight.narrow(int(offset[0]), int(offset[1]), int(offset[2]))
    return frobenius_deferred(weight)


def weights_of(added: Mapping[str, list], rows: list[dict], lookup, calculate, budget, cache) -> list[dict]:
    """weight_rows for the entries `added` whose rows are `rows` (same order as patch_rows)."""
    rows_by_key: dict[str, list] = {}
    for row in rows:
        rows_by_key.setdefault(row["key"], []).append(row)
    return weight_rows({str(k): v for k, v in added.items()}, rows_by_key, lookup, calculate, budget, cache)

"""What a LoRA step reuses from the steps before it: base-weight norms per loaded model, figures per
LoRA file.

A base weight's norm is a property of the loaded base model, not of the prompt. It is kept per
module object (weakly: when ComfyUI drops or replaces the model, its norms go with it) and per
state-dict key, checked against the weight's shape and dtype. The module rather than the weight
tensor is the key because ComfyUI copies the unpatched weight into a new backup tensor each time it
loads a patched model onto a GPU: a cache tied to that tensor would miss on every new strength.
ComfyUI never changes a base weight's values in place (patches live beside it), so the module and
key name the same values for as long as the module lives.

A LoRA file's figures (per weight: the norm of its change at unit strength; per pair of stacked
files: the inner products of their changes) are properties of the file. They are kept by the file's
identity (path, size, modification time), in a bounded LRU; each figure also records the patch's
type and tensor shapes, and is reused only when the patch in hand has the same. A new strength
rescales them exactly: a change is linear in its strength, and a stack's total is
sqrt(sum_ij c_i c_j <D_i, D_j>).
"""

from __future__ import annotations

import copy
import os
import threading
import weakref
from collections import OrderedDict
from typing import Any

from .patches import entry_tensors, patch_signature
from .templates import TEMPLATES
from .weights import RULES

MAX_FILES = 32  # LoRA files whose figures are kept (a few MB of floats for real-size files)
MAX_PAIRS = 64  # pairs of stacked files whose inner products are kept


def file_identity(path: str | None) -> tuple | None:
    """(path, size, mtime_ns) of a file, None when it cannot be stated."""
    if not path:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return (os.path.abspath(path), int(stat.st_size), int(stat.st_mtime_ns))


class BaseNorms:
    """module -> {(key, offset): ((shape, dtype), norm)}, the module held weakly."""

    def __init__(self) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self._by_module = WeakIdKeyDictionary()
        self._lock = threading.Lock()

    @staticmethod
    def _check(weight) -> tuple:
        return (tuple(weight.shape), str(weight.dtype))

    def get(self, module, key: str, offset, weight) -> float | None:
        if module is None:
            return None
        with self._lock:
            found = self._by_module.get(module, {}).get((key, _offset(offset)))
        return found[1] if found is not None and found[0] == self._check(weight) else None

    def put(self, module, key: str, offset, weight, norm: float) -> None:
        if module is None:
            return
        with self._lock:
            per_module = self._by_module.get(module)
            if per_module is None:
                per_module = self._by_module[module] = {}
            per_module[(key, _offset(offset))] = (self._check(weight), norm)

    def clear(self) -> None:
        with self._lock:
            self._by_module.clear()

    def n_models(self) -> int:
        return len(self._by_module)


def _offset(offset) -> tuple | None:
    return tuple(int(v) for v in offset) if offset else None


class FileFigures:
    """Figures of LoRA files by file identity, bounded (least recently used dropped first).

    Each figure keeps weak references to the patch tensors it was computed from: while those are
    alive, a patch with other tensors (another copy of the file, or patches that did not come from
    it) does not get it; once they are gone (the loader read the file again), the file identity
    alone vouches for it."""

    def __init__(self, max_files: int = MAX_FILES, max_pairs: int = MAX_PAIRS) -> None:
        self._norms: OrderedDict[tuple, dict] = OrderedDict()
        self._inner: OrderedDict[tuple, dict] = OrderedDict()
        self.max_files, self.max_pairs = max_files, max_pairs
        self._lock = threading.Lock()

    def _table(self, store: OrderedDict, ident: tuple, limit: int, create: bool) -> dict | None:
        with self._lock:
            table = store.get(ident)
            if table is not None:
                store.move_to_end(ident)
            elif create:
                table = store[ident] = {}
                while len(store) > limit:
                    store.popitem(last=False)
            return table

    def unit_norm(self, file: tuple | None, signature: tuple, tensors: list) -> float | None:
        """The norm of the file's change on one weight at unit strength, when known."""
        table = None if file is None else self._table(self._norms, file, self.max_files, False)
        return _valid(None if table is None else table.get(signature), tensors)

    def put_unit_norm(self, file: tuple | None, signature: tuple, tensors: list, norm: float) -> None:
        if file is not None and norm is not None:
            self._table(self._norms, file, self.max_files, True)[signature] = (norm, _refs(tensors))

    def inner(self, files: tuple, signatures: tuple, tensors: list) -> float | None:
        """<D_a, D_b> at unit strengths for entries of files (a, b) on one weight, when known."""
        if None in files:
            return None
        table = self._table(self._inner, _pair(files), self.max_pairs, False)
        return _valid(None if table is None else table.get(_pair_key(files, signatures)), tensors)

    def put_inner(self, files: tuple, signatures: tuple, tensors: list, value: float) -> None:
        if None not in files and value is not None:
            table = self._table(self._inner, _pair(files), self.max_pairs, True)
            table[_pair_key(files, signatures)] = (value, _refs(tensors))

    def clear(self) -> None:
        with self._lock:
            self._norms.clear()
            self._inner.clear()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"n_files": len(self._norms), "n_file_pairs": len(self._inner)}


def _refs(tensors: list) -> tuple:
    return tuple(weakref.ref(t) for t in tensors)


def _valid(record, tensors: list) -> float | None:
    """The record's figure when its tensors are these, or all gone (see FileFigures)."""
    if record is None:
        return None
    figure, refs = record
    alive = [ref() for ref in refs]
    if all(t is None for t in alive) or (
        len(alive) == len(tensors) and all(a is t for a, t in zip(alive, tensors, strict=True))
    ):
        return figure
    return None


def _pair(files: tuple) -> tuple:
    return tuple(sorted(files))


def _pair_key(files: tuple, signatures: tuple) -> tuple:
    """Order-free key of an inner product (it is symmetric)."""
    return tuple(sorted(zip(files, signatures, strict=True), key=repr))


BASE_NORMS = BaseNorms()
FILE_FIGURES = FileFigures()


class Reuse:
    """One side of one step: which file each patch entry came from, the caches, and counts of the
    figures reused and computed (reported as the side's `reuse`)."""

    def __init__(self, module=None, files_by_entry: dict | None = None, base_norms=None, files=None) -> None:
        self.module, self.templates = module, TEMPLATES
        self.files_by_entry = files_by_entry or {}
        self.base_norms = BASE_NORMS if base_norms is None else base_norms
        self.files = FILE_FIGURES if files is None else files
        self.pending_base: dict = {}  # (key, offset) -> figure within one batch
        self.counts = dict.fromkeys(COUNTS, 0)

    def file_of(self, entry) -> tuple | None:
        return self.files_by_entry.get(id(entry))

    def count(self, name: str) -> None:
        self.counts[name] += 1

    def unit_norm(self, key: str, entry) -> float | None:
        """The cached unit-strength norm of an entry whose file is known (counted either way)."""
        file = self.file_of(entry)
        if file is None:
            return None
        found = self.files.unit_norm(file, *_signed(key, entry))
        self.count("n_delta_norms_reused" if found is not None else "n_delta_norms_computed")
        return found

    def put_unit_norm(self, key: str, entry, norm: float) -> None:
        self.files.put_unit_norm(self.file_of(entry), *_signed(key, entry), norm)

    def inner(self, key: str, a, b) -> tuple:
        """(cached unit inner product of two entries or None, how to store it once computed or None)."""
        files_of = (self.file_of(a), self.file_of(b))
        if None in files_of:
            return None, None
        # The product is symmetric: both orders of the pair store and find it, tensors included.
        sides = [(files_of[0], *_signed(key, a)), (files_of[1], *_signed(key, b))]
        (file_1, signature_1, tensors_1), (file_2, signature_2, tensors_2) = sorted(
            sides, key=lambda side: repr(side[:2])
        )
        files, signatures, tensors = (file_1, file_2), (signature_1, signature_2), tensors_1 + tensors_2
        found = self.files.inner(files, signatures, tensors)
        self.count("n_inner_products_reused" if found is not None else "n_inner_products_computed")
        if found is not None:
            return found, None
        return None, lambda value: self.files.put_inner(files, signatures, tensors, value)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.counts,
            "n_entries_with_file": len(self.files_by_entry),
            "files": sorted({ident[0] for ident in self.files_by_entry.values()}),
        }


COUNTS = tuple(
    f"n_{figure}_{how}"
    for figure in ("base_norms", "delta_norms", "inner_products")
    for how in ("reused", "computed")
)


class CoverageCache:
    """Key coverage of a LoRA file against the modules it was checked on: a property of the file and
    the model, kept by (file identity, modules), the modules held weakly, bounded. A hit is a new
    top-level dict whose nested values (key lists, counts by reason) are the cached ones, read-only:
    a deep copy is taken once, when the coverage is stored."""

    def __init__(self, max_entries: int = MAX_FILES) -> None:
        self._entries: OrderedDict[tuple, tuple] = OrderedDict()
        self.max_entries = max_entries
        self._lock = threading.Lock()

    def get(self, file: tuple | None, modules: tuple) -> dict | None:
        if file is None:
            return None
        with self._lock:
            found = self._entries.get((file, tuple(id(m) for m in modules)))
        if found is None or not all(_same(ref, m) for ref, m in zip(found[0], modules, strict=True)):
            return None
        return dict(found[1])  # served read-only: a new top-level dict, the nested values shared

    def put(self, file: tuple | None, modules: tuple, coverage: dict) -> None:
        if file is None:
            return
        refs = tuple(None if m is None else weakref.ref(m) for m in modules)
        with self._lock:
            self._entries[(file, tuple(id(m) for m in modules))] = (refs, copy.deepcopy(coverage))
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def _same(ref, module) -> bool:
    return module is None if ref is None else ref() is module


COVERAGE = CoverageCache()


class FileStatuses:
    """What a LoRA file's header says (file.lora_file_status: the report's status, the tensor
    index), by file identity, at most `max_files`: a header of a real-size LoRA is ~800 entries to
    parse and check, every prompt. A hit is a new top-level dict of the status (the caller sets its
    name) whose nested values are the cached ones, read-only like the index: nothing is copied
    deeply on a hit."""

    def __init__(self, max_files: int = MAX_FILES) -> None:
        self._by_file: OrderedDict = OrderedDict()
        self._max = max_files
        self._lock = threading.Lock()

    def get(self, ident: tuple | None) -> tuple | None:
        if ident is None:
            return None
        with self._lock:
            found = self._by_file.get(ident)
            if found is None:
                return None
            self._by_file.move_to_end(ident)
        status, index = found
        return dict(status), index  # served read-only: a new top-level dict, the nested values shared

    def put(self, ident: tuple | None, status: dict, index: dict | None) -> None:
        if ident is None or index is None:
            return  # only whole, readable headers are kept: an error is looked at again
        with self._lock:
            self._by_file[ident] = (copy.deepcopy(status), index)
            self._by_file.move_to_end(ident)
            while len(self._by_file) > self._max:
                self._by_file.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._by_file.clear()


FILE_STATUSES = FileStatuses()


def entry_files(pairs: list, added_by_hop: list[dict], hop_files) -> dict[int, tuple]:
    """id(entry) -> file identity, for the entries of patching hops paired with their loaders one
    to one and whose strengths are the loader's (anything else: no file figure is reused)."""
    if not hop_files:
        return {}
    patching = [
        added
        for (child, parent), added in zip(pairs, added_by_hop, strict=True)
        if added or getattr(child, "patches_uuid", None) != getattr(parent, "patches_uuid", None)
    ]
    if len(patching) != len(hop_files):
        return {}
    found: dict[int, tuple] = {}
    for added, (ident, strength) in zip(patching, hop_files, strict=True):
        for entries in added.values():
            for entry in entries:
                if strength is not None and _strength(entry) != strength:
                    return {}  # not the loader's patches, or not only them: attribution doubtful
                if ident is not None:
                    found[id(entry)] = ident
    return found


def _strength(entry) -> float | None:
    try:
        return float(entry[0])
    except (TypeError, ValueError, IndexError):
        return None


def clear_caches() -> None:
    """Forget every cached figure (tests; a user never needs it: entries go with their model)."""
    BASE_NORMS.clear()
    FILE_FIGURES.clear()
    TEMPLATES.clear()
    COVERAGE.clear()
    RULES.clear()
    FILE_STATUSES.clear()


def _signed(key: str, entry) -> tuple[tuple, list]:
    """(the entry's patch_signature, its tensors), the tensors found once."""
    tensors = entry_tensors(entry)
    return patch_signature(key, entry, tensors), tensors

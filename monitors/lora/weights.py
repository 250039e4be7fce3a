"""Which patches ComfyUI really applies, and the exact change of each weight over all its patches.

ComfyUI queues every patch whose key is in the state dict, but applies one only when
(1) its module is patched at all: ModelPatcher._load_list skips a module that has parameters in
child modules ("random weights in non leaf modules", e.g. WAN's `blocks.N.modulation`), and only
parameters are patched (a buffer under a patched key never changes); and
(2) the patch's arithmetic fits the weight: calculate_weight catches the shape error of a LoRA
made for another model size, logs it, and leaves the weight as it was (a `diff` of another shape:
"WEIGHT NOT MERGED"; OFT/BOFT need out = blocks x block size; BOFT without alpha fails on
`alpha > 0`). These rules are checked on shapes only (patches.delta_shape_mismatch), and
tests/comfyui/test_lora_oracle.py holds them to what ComfyUI does.

The change of a weight with several patches is the norm of their sum, not a root of summed squares:
||sum c_i D_i||^2 = sum_ij c_i c_j <D_i, D_j>, with <U1 D1, U2 D2> = sum((U1^T U2) * (D1 D2^T)) for
low-rank pairs (no m x n product is built). Patches whose change depends on the base weight (set,
DoRA, OFT, BOFT, GLoRA, Tucker factors) need the weight itself: with a `calculate` callable (the
framework's own calculate_weight) the weight is copied once, within the read budget, and patched.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

from ..numeric.device_figures import Expr, Scalar, figure_value, known, resolve, root
from ..numeric.tensor_stats import one_cpu_thread

LINEAR_CHEAP = ("lora", "diff")  # types whose cross inner products need no base weight


class ModuleAnswers:
    """Per module (held weakly), answers about its fixed structure: key -> value."""

    def __init__(self) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self._by_module = WeakIdKeyDictionary()
        self._lock = threading.Lock()

    def answers(self, module) -> dict | None:
        """The module's dict of answers (None: a module that cannot be held weakly)."""
        if module is None:
            return None
        with self._lock:
            try:
                found = self._by_module.get(module)
                if found is None:
                    found = self._by_module[module] = {}
            except TypeError:
                return None
            return found

    def clear(self) -> None:
        with self._lock:
            self._by_module.clear()


RULES = ModuleAnswers()  # leaf_parameter_rule: why ComfyUI's loader never patches a key


def leaf_parameter_rule(model) -> Callable[[str], str | None]:
    """key -> why ComfyUI's loader never patches it (None: it does), from the module tree; the
    answers are kept per module (weakly: RULES), the tree of a loaded model does not change."""
    get = getattr(model, "get_submodule", None)

    known = RULES.answers(model)

    def rule(key: str) -> str | None:
        if known is not None and key in known:
            return known[key]
        answer = _rule(key)
        if known is not None:
            known[key] = answer
        return answer

    def _rule(key: str) -> str | None:
        if get is None or "." not in key:
            return None
        owner, name = key.rsplit(".", 1)
        try:
            module = get(owner)
        except Exception:
            return None
        own = dict(module.named_parameters(recurse=False))
        if name not in own:
            return "not a parameter: ComfyUI never patches it"
        if any(True for child in module.children() for _ in child.parameters()):
            return "parameter of a module with child modules: ComfyUI's loader skips it"
        return None

    return rule


# -- exact norm of a weight's summed change -------------------------------------------------------


def _linear_term(row: Mapping, entry) -> tuple | None:
    """(coefficient, kind, factors) of a cheap linear patch, as float64 matrices."""
    import torch

    value = entry[1]
    coef = row["effective_scale"]
    if coef is None:
        return None
    if row["type"] == "lora":
        up, down = value.weights[0], value.weights[1]
        u = up.detach().reshape(up.shape[0], -1).to(torch.float64)
        d = down.detach().reshape(down.shape[0], -1).to(torch.float64)
        return coef, "lowrank", (u, d)
    tensor = value[0] if len(value) == 1 else value[1][0]
    return coef, "dense", (tensor.detach().to(torch.float64),)


def _inner(a: tuple, b: tuple):
    """<change a, change b> at unit coefficients, a float64 0-dim tensor on their device."""
    _, kind_a, fa = a
    _, kind_b, fb = b
    if kind_a == "lowrank" and kind_b == "lowrank":
        (u1, d1), (u2, d2) = fa, fb
        if u1.shape[0] != u2.shape[0] or d1.shape[1] != d2.shape[1]:
            return ((u1 @ d1).reshape(-1) * (u2 @ d2).reshape(-1)).sum()
        return ((u1.T @ u2) * (d1 @ d2.T)).sum()
    if kind_a == "dense" and kind_b == "dense":
        return (fa[0].reshape(-1) * fb[0].reshape(-1)).sum()
    (u, d), m = (fa, fb[0]) if kind_a == "lowrank" else (fb, fa[0])
    return ((u.T @ m.reshape(u.shape[0], -1)) * d).sum()


def summed_linear_norm(rows: list[Mapping], entries: list) -> float | None:
    """||sum of the changes|| of lora/diff patches on one weight, from inner products."""
    figure, _ = summed_linear_deferred(rows, entries)
    return figure_value(figure)


def summed_linear_deferred(rows: list[Mapping], entries: list, key: str = "", reuse=None) -> tuple:
    """(summed_linear_norm as a figure on the device, inner products to cache once read).

    `reuse` (caches.Reuse): inner products of entries whose files are known come from the file
    cache; a new strength only changes the coefficients."""
    if len(rows) != len(entries):
        raise ValueError(f"{len(rows)} rows for {len(entries)} entries")
    coefs = [r["effective_scale"] for r in rows]
    if any(c is None for c in coefs):
        return known(None), []
    terms: dict[int, tuple] = {}
    scalars, order, to_store = [], [], []
    for i in range(len(rows)):
        for j in range(i, len(rows)):
            cached, store = _cached_inner(reuse, key, entries[i], entries[j])
            if cached is not None:
                order.append((i, j, cached))
                continue
            for k in (i, j):
                if k not in terms:
                    terms[k] = _linear_term(rows[k], entries[k])
            scalar = Scalar(_inner(terms[i], terms[j]))
            scalars.append(scalar)
            order.append((i, j, scalar))
            if store is not None:
                to_store.append((store, scalar))

    def combine(_values) -> float:
        total = 0.0
        for i, j, ip in order:
            value = ip.value if isinstance(ip, Scalar) else ip
            total += coefs[i] * coefs[j] * value * (1.0 if i == j else 2.0)
        return math.sqrt(max(0.0, total))

    return Expr(scalars, combine), to_store


def _cached_inner(reuse, key: str, a, b) -> tuple:
    """(cached unit inner product or None, how to store it once computed or None)."""
    return (None, None) if reuse is None else reuse.inner(key, a, b)


def cheap_linear(row: Mapping) -> bool:
    return (
        row["type"] in LINEAR_CHEAP
        and row["delta_norm"] is not None
        and row.get("linear", False)
        and row["offset"] is None
    )


def materialised_change(calculate, entries: list, weight, key: str) -> float:
    """||calculate(entries, W) - W|| on a float32 copy: the framework's own arithmetic."""
    return figure_value(materialised_deferred(calculate, entries, weight, key))


def materialised_deferred(calculate, entries: list, weight, key: str) -> Expr:
    import torch

    with torch.no_grad():
        base = weight.detach().to(torch.float32)
        patched = calculate(list(entries), base.clone(), key)
        difference = patched.to(torch.float64) - base.to(torch.float64)
        return root(Scalar(torch.sum(difference * difference)))


def weight_total(
    key: str,
    rows: list[dict],
    entries: list,
    weight,
    calculate: Callable | None,
    budget: list | None,
    cache: dict,
) -> tuple[float | None, str | None]:
    """(norm of the summed change of the applied patches on `key`, reason when unknown).

    Fills the delta_norm of rows that need the base weight when it can be read (one read-back)."""
    plan = WeightPlan({key: entries}, {key: rows}, lambda _key: weight, calculate, budget, cache)
    resolve(plan.figures())
    plan.finish()
    return plan.results[key]


class WeightPlan:
    """weight_rows before its read-back: every weight's total as a figure on the device."""

    def __init__(
        self, added, rows_by_key, lookup, calculate, budget, cache, reuse=None, pending=None
    ) -> None:
        self.cache, self.reuse = cache, reuse
        self.pending = {} if pending is None else pending  # cache key -> (figure, reason), shared
        self.rows_by_key = rows_by_key
        self.keys = sorted(added, key=str)
        self.planned: dict = {}  # key -> (figure or None, reason, fills, stores, cache key)
        self.results: dict = {}
        for key in self.keys:
            weight = _Weight(lookup, key)  # read only where a total needs the base weight
            self.planned[key] = self._plan(str(key), rows_by_key[key], added[key], weight, calculate, budget)

    def _plan(self, key, rows, entries, weight, calculate, budget) -> tuple:
        applied = [(r, e) for r, e in zip(rows, entries, strict=True) if r["applied"]]
        if not applied:
            return known(0.0), None, [], [], None
        cache_key = (key, tuple(id(e) for _, e in applied))
        if cache_key in self.cache:
            total, reason = self.cache[cache_key]
            return known(total), reason, [], [], None
        if cache_key in self.pending:  # planned by another plan of this batch, which fills its rows
            figure, reason = self.pending[cache_key]
            return figure, reason, [], [], cache_key
        planned = self._plan_total(key, applied, weight, calculate, budget)
        self.pending[cache_key] = (planned[0], planned[1])
        return (*planned, cache_key)

    def _plan_total(self, key, applied, weight, calculate, budget) -> tuple:
        needs_weight = any(r["delta_norm"] is None for r, _ in applied) or (
            len(applied) > 1 and not all(cheap_linear(r) for r, _ in applied)
        )
        if not needs_weight:
            if len(applied) == 1:
                return known(applied[0][0]["delta_norm"]), None, [], []
            figure, stores = summed_linear_deferred(
                [r for r, _ in applied], [e for _, e in applied], key, self.reuse
            )
            return figure, None, [], stores
        figure, reason, fills = _materialise(key, applied, weight.read(), calculate, budget)
        return figure, reason, fills, []

    def figures(self) -> list:
        planned = self.planned.values()
        return [p[0] for p in planned] + [figure for p in planned for _, figure in p[2]]

    def finish(self) -> list[dict[str, Any]]:
        out = []
        for key in self.keys:
            figure, reason, fills, stores, cache_key = self.planned[key]
            for row, row_figure in fills:
                row["delta_norm"] = row_figure.value()
                row["delta_norm_unavailable"] = None
                row["delta_norm_method"] = "patched copy of the base weight"
            for store, scalar in stores:
                store(scalar.value)
            total = None if figure is None else figure.value()
            if cache_key is not None:
                self.cache[cache_key] = (total, reason)
            self.results[key] = (total, reason)
            out.append(_weight_row(key, self.rows_by_key[key], total, reason))
        return out


class _Weight:
    """A key's base weight, looked up on first use (None when it cannot be)."""

    def __init__(self, lookup, key) -> None:
        self.lookup, self.key = lookup, key

    def read(self):
        try:
            return self.lookup(self.key) if self.lookup is not None else None
        except Exception:
            return None


def _weight_row(key, rows: list[dict], total, reason) -> dict[str, Any]:
    base_norm = rows[0]["base_norm"] if rows else None
    for row in rows:  # rows filled in by the materialisation get their relative change now
        if row["delta_norm"] is not None and row["base_norm"]:
            row["relative_change"] = row["delta_norm"] / row["base_norm"]
    return {
        "key": str(key),
        "block": rows[0]["block"] if rows else None,
        "n_entries": len(rows),
        "n_applied": sum(1 for r in rows if r["applied"]),
        "applied": any(r["applied"] for r in rows),
        "delta_norm": total,
        "delta_norm_unavailable": reason if total is None else None,
        "base_norm": base_norm,
        "base_norm_unavailable": rows[0].get("base_norm_unavailable") if rows and base_norm is None else None,
        "relative_change": total / base_norm if total is not None and base_norm else None,
    }


def _materialise(key, applied, weight, calculate, budget) -> tuple:
    """(figure of the total or None, why none, [(row, its own figure)])."""
    if calculate is None:
        return None, "the change depends on the base weight (no framework arithmetic given)", []
    if weight is None or not _plain(weight):
        return None, "base weight not readable", []
    n = int(weight.numel())
    if budget is not None:
        if budget[0] < n:
            return None, "skipped: base-weight read budget spent", []
        budget[0] -= n
    try:
        fills = [
            (row, materialised_deferred(calculate, [entry], weight, key))
            for row, entry in applied
            if row["delta_norm"] is None
        ]
        if len(applied) == 1:
            figure = fills[0][1] if fills else known(applied[0][0]["delta_norm"])
            return figure, None, fills
        return materialised_deferred(calculate, [e for _, e in applied], weight, key), None, fills
    except Exception as exc:
        return None, f"patched copy failed: {type(exc).__name__}: {exc}", []


def _plain(tensor) -> bool:
    import torch

    return type(tensor) in (torch.Tensor, torch.nn.Parameter) and tensor.device.type != "meta"


def weight_rows(
    added: Mapping[str, list],
    rows_by_key: Mapping[str, list],
    lookup,
    calculate: Callable | None,
    budget: list | None,
    cache: dict,
    reuse=None,
) -> list[dict[str, Any]]:
    """One row per weight: its patches' summed change, base norm and relative change (one read-back)."""
    with one_cpu_thread("cpu"):  # small kernels on torch's thread pool: see analysis.RowPlan
        plan = WeightPlan(added, rows_by_key, lookup, calculate, budget, cache, reuse)
        resolve(plan.figures())
        return plan.finish()

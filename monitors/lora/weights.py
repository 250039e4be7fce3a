"""Which patches ComfyUI really applies, and the exact change of each weight over all its patches.

ComfyUI queues every patch whose key is in the state dict, but applies one only when
(1) its module is patched at all: ModelPatcher._load_list skips a module that has parameters in
child modules ("random weights in non leaf modules", e.g. WAN's `blocks.N.modulation`), and only
parameters are patched (a buffer under a patched key never changes); and
(2) the patch's arithmetic fits the weight: calculate_weight catches the shape error of a LoRA
made for another model size, logs it, and leaves the weight as it was (a `diff` of another shape:
"WEIGHT NOT MERGED"; OFT/BOFT need out = blocks x block size; BOFT without alpha fails on
`alpha > 0`). These rules are checked on shapes only; tests/comfyui/test_lora_oracle.py holds
them to what ComfyUI does.

The change of a weight with several patches is the norm of their sum, not a root of summed squares:
||sum c_i D_i||^2 = sum_ij c_i c_j <D_i, D_j>, with <U1 D1, U2 D2> = sum((U1^T U2) * (D1 D2^T)) for
low-rank pairs (no m x n product is built). Patches whose change depends on the base weight (set,
DoRA, OFT, BOFT, GLoRA, Tucker factors) need the weight itself: with a `calculate` callable (the
framework's own calculate_weight) the weight is copied once, within the read budget, and patched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ..tensor_stats import one_cpu_thread

LINEAR_CHEAP = ("lora", "diff")  # types whose cross inner products need no base weight


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _shape(t) -> tuple:
    return tuple(int(d) for d in t.shape)


def _flat_cols(t) -> int:
    return _numel(t.shape[1:])


def delta_shape_mismatch(patch_type: str, value, weight_shape: tuple) -> str | None:
    """Why this patch cannot be applied to a weight of `weight_shape` (None: it fits)."""
    weights = getattr(value, "weights", None)
    n = _numel(weight_shape)
    if patch_type == "lora":
        up, down, _alpha, mid, _dora, reshape = (list(weights) + [None] * 6)[:6]
        if mid is not None or reshape is not None:
            return None  # padded / Tucker forms: shapes follow other rules, left to ComfyUI
        if _flat_cols(up) != int(down.shape[0]):
            return f"up {list(_shape(up))} and down {list(_shape(down))} do not multiply"
        made = int(up.shape[0]) * _flat_cols(down)
        if made != n:
            return (
                f"file makes [{int(up.shape[0])}, {_flat_cols(down)}], model weight is {list(weight_shape)}"
            )
        return None
    if patch_type == "loha":
        w1a, w1b, _alpha, w2a, w2b, t1 = (list(weights) + [None] * 6)[:6]
        if t1 is not None:
            return None
        first = (int(w1a.shape[0]), int(w1b.shape[-1]))
        second = (int(w2a.shape[0]), int(w2b.shape[-1]))
        if first != second or _numel(first) != n:
            return f"file makes {list(first)} x {list(second)}, model weight is {list(weight_shape)}"
        return None
    if patch_type == "lokr":
        w1, w2, _alpha, w1_a, w1_b, w2_a, w2_b, t2 = (list(weights) + [None] * 8)[:8]
        if t2 is not None:
            return None
        left = _numel(w1.shape) if w1 is not None else int(w1_a.shape[0]) * _flat_cols(w1_b)
        right = _numel(w2.shape) if w2 is not None else int(w2_a.shape[0]) * _flat_cols(w2_b)
        if left * right != n:
            return f"file makes {left * right} elements, model weight is {list(weight_shape)}"
        return None
    if patch_type in ("oft", "boft"):
        blocks = weights[0]
        size = _numel(blocks.shape[:2]) if patch_type == "oft" else _numel(blocks.shape[1:3])
        if int(weight_shape[0]) != size if weight_shape else True:
            return f"file blocks cover {size} rows, model weight is {list(weight_shape)}"
        if patch_type == "boft" and weights[2] is None:
            return "BOFT without alpha: ComfyUI's calculate_weight fails on it"
        return None
    if patch_type == "diff":
        tensor = value[0] if len(value) == 1 else value[1][0]
        pad = len(value) == 2 and len(value[1]) > 1 and isinstance(value[1][1], Mapping)
        if not pad and _shape(tensor) != tuple(weight_shape):
            return f"file {list(_shape(tensor))}, model weight is {list(weight_shape)}"
    return None


def leaf_parameter_rule(model) -> Callable[[str], str | None]:
    """key -> why ComfyUI's loader never patches it (None: it does), from the module tree."""
    get = getattr(model, "get_submodule", None)

    def rule(key: str) -> str | None:
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


def _inner(a: tuple, b: tuple) -> float:
    _, kind_a, fa = a
    _, kind_b, fb = b
    if kind_a == "lowrank" and kind_b == "lowrank":
        (u1, d1), (u2, d2) = fa, fb
        if u1.shape[0] != u2.shape[0] or d1.shape[1] != d2.shape[1]:
            return float(((u1 @ d1).reshape(-1) * (u2 @ d2).reshape(-1)).sum())
        return float(((u1.T @ u2) * (d1 @ d2.T)).sum())
    if kind_a == "dense" and kind_b == "dense":
        return float((fa[0].reshape(-1) * fb[0].reshape(-1)).sum())
    (u, d), m = (fa, fb[0]) if kind_a == "lowrank" else (fb, fa[0])
    return float(((u.T @ m.reshape(u.shape[0], -1)) * d).sum())


def summed_linear_norm(rows: list[Mapping], entries: list) -> float | None:
    """||sum of the changes|| of lora/diff patches on one weight, from inner products."""
    terms = [_linear_term(r, e) for r, e in zip(rows, entries, strict=True)]
    if any(t is None for t in terms):
        return None
    total = 0.0
    for i, a in enumerate(terms):
        for j in range(i, len(terms)):
            b = terms[j]
            ip = a[0] * b[0] * _inner(a, b)
            total += ip if i == j else 2.0 * ip
    return math.sqrt(max(0.0, total))


def cheap_linear(row: Mapping) -> bool:
    return (
        row["type"] in LINEAR_CHEAP
        and row["delta_norm"] is not None
        and row.get("linear", False)
        and row["offset"] is None
    )


def materialised_change(calculate, entries: list, weight, key: str) -> float:
    """||calculate(entries, W) - W|| on a float32 copy: the framework's own arithmetic."""
    import torch

    with torch.no_grad():
        base = weight.detach().to(torch.float32)
        patched = calculate(list(entries), base.clone(), key)
        return float(torch.linalg.vector_norm(patched.to(torch.float64) - base.to(torch.float64)))


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

    Fills the delta_norm of rows that need the base weight when it can be read.
    """
    applied = [(r, e) for r, e in zip(rows, entries, strict=True) if r["applied"]]
    if not applied:
        return 0.0, None
    cache_key = (key, tuple(id(e) for _, e in applied))
    if cache_key in cache:
        return cache[cache_key]
    result: tuple[float | None, str | None]
    needs_weight = any(r["delta_norm"] is None for r, _ in applied) or (
        len(applied) > 1 and not all(cheap_linear(r) for r, _ in applied)
    )
    if not needs_weight:
        if len(applied) == 1:
            result = (applied[0][0]["delta_norm"], None)
        else:
            result = (summed_linear_norm([r for r, _ in applied], [e for _, e in applied]), None)
    else:
        result = _materialise(key, applied, weight, calculate, budget)
    cache[cache_key] = result
    return result


def _materialise(key, applied, weight, calculate, budget) -> tuple[float | None, str | None]:
    if calculate is None:
        return None, "the change depends on the base weight (no framework arithmetic given)"
    if weight is None or not _plain(weight):
        return None, "base weight not readable"
    n = int(weight.numel())
    if budget is not None:
        if budget[0] < n:
            return None, "skipped: base-weight read budget spent"
        budget[0] -= n
    try:
        for row, entry in applied:
            if row["delta_norm"] is None:
                row["delta_norm"] = materialised_change(calculate, [entry], weight, key)
                row["delta_norm_unavailable"] = None
                row["delta_norm_method"] = "patched copy of the base weight"
        if len(applied) == 1:
            return applied[0][0]["delta_norm"], None
        return materialised_change(calculate, [e for _, e in applied], weight, key), None
    except Exception as exc:
        return None, f"patched copy failed: {type(exc).__name__}: {exc}"


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
) -> list[dict[str, Any]]:
    """One row per weight: its patches' summed change, base norm and relative change."""
    with one_cpu_thread("cpu"):  # small kernels on torch's thread pool: see analysis.patch_rows
        return _weight_rows(added, rows_by_key, lookup, calculate, budget, cache)


def _weight_rows(added, rows_by_key, lookup, calculate, budget, cache) -> list[dict[str, Any]]:
    out = []
    for key in sorted(added, key=str):
        rows, entries = rows_by_key[key], added[key]
        weight = None
        try:
            weight = lookup(key) if lookup is not None else None
        except Exception:
            weight = None
        total, reason = weight_total(str(key), rows, entries, weight, calculate, budget, cache)
        base_norm = rows[0]["base_norm"] if rows else None
        for row in rows:  # rows filled in by weight_total get their relative change now
            if row["delta_norm"] is not None and row["base_norm"]:
                row["relative_change"] = row["delta_norm"] / row["base_norm"]
        out.append(
            {
                "key": str(key),
                "block": rows[0]["block"] if rows else None,
                "n_entries": len(rows),
                "n_applied": sum(1 for r in rows if r["applied"]),
                "applied": any(r["applied"] for r in rows),
                "delta_norm": total,
                "delta_norm_unavailable": reason if total is None else None,
                "base_norm": base_norm,
                "relative_change": total / base_norm if total is not None and base_norm else None,
            }
        )
    return out

"""One LoRA patch entry: what it is (type, rank, alpha, scales), whether ComfyUI applies it, and the
norm of its change, left on the device (numeric/device_figures.py) until the step reads every figure back.

Duck-typed on ComfyUI's bookkeeping (analysis.py says how); `entry_facts` gives a row and its
unit-strength norm still on the device, `set_delta` the row's change norm once that is read.
"""

from __future__ import annotations

from typing import Any

from ..numeric.device_figures import known, product, resolve
from .norms import frobenius_deferred, loha_deferred, lora_deferred
from .patches import (
    ADAPTER_TYPES,
    classify_patch,
    delta_shape_mismatch,
    diff_tensor,
    float_or_none,
    is_tensor,
    padded,
    patch_tensors,
)

WITHOUT_NORM = {
    "glora": "GLoRA: the change depends on the base weight",
    "oft": "OFT: the change is a rotation of the base weight",
    "boft": "BOFT: the change is a rotation of the base weight",
    "set": "set: the weight is replaced, the change depends on the base weight",
    "model_as_lora": "model_as_lora: the change depends on the base weight",
    "merge": "merged patch list: the change depends on the base weight",
    "unknown": "unknown patch type",
}


def _scale(alpha, rank) -> float:
    """alpha / rank, or 1 when either is unknown (ComfyUI's rule for lora, loha, lokr)."""
    return alpha / rank if alpha is not None and rank else 1.0


def _lora_info(weights, norm: bool = True) -> tuple:
    up, down, alpha, mid, dora, _reshape = padded(weights, 6)
    rank = int(down.shape[0])
    reason = None
    if dora is not None:
        reason = "DoRA: the change depends on the base weight"
    elif mid is not None:
        reason = "Tucker mid weight (LoCon CP decomposition): not computed"
    raw = None if reason or not norm else lora_deferred(up, down)
    return rank, float_or_none(alpha), raw, reason


def _loha_info(weights, norm: bool = True) -> tuple:
    w1a, w1b, alpha, w2a, w2b, t1, _t2, dora = padded(weights, 8)
    rank = int(w1b.shape[0])
    reason = None
    if dora is not None:
        reason = "DoRA: the change depends on the base weight"
    elif t1 is not None:
        reason = "Tucker core (LoHa CP decomposition): not computed"
    raw = None if reason or not norm else loha_deferred(w1a, w1b, w2a, w2b)
    return rank, float_or_none(alpha), raw, reason


def _glora_rank(weights) -> int:
    """ComfyUI's own rule (weight_adapter/glora.py): new-style a2 [r, in] unless the old layout fits."""
    a1, a2, b1, b2 = weights[:4]
    if int(b2.shape[0]) == int(b1.shape[1]) == int(a1.shape[1]) == int(a2.shape[0]):
        return int(a2.shape[0])
    return int(a1.shape[0])


def _block_rank(patch_type: str, weights) -> int:
    """OFT/BOFT: the block size, what LyCORIS trains as the network dim of these adapters."""
    blocks = weights[0]
    return int(blocks.shape[1] if patch_type == "oft" else blocks.shape[2])


def _lokr_info(weights, norm: bool = True) -> tuple:
    w1, w2, alpha, w1_a, w1_b, w2_a, w2_b, t2, dora = padded(weights, 9)
    dim = None  # the rank that divides alpha: the factorised side's (w2 wins), as ComfyUI does
    if w1 is None:
        dim = int(w1_b.shape[0])
    if w2 is None:
        dim = int(w2_b.shape[0])
    reason = None
    if dora is not None:
        reason = "DoRA: the change depends on the base weight"
    elif w2 is None and t2 is not None:
        reason = "Tucker core (LoKr CP decomposition): not computed"
    raw = None
    if reason is None and norm:
        left = frobenius_deferred(w1) if w1 is not None else lora_deferred(w1_a, w1_b)
        right = frobenius_deferred(w2) if w2 is not None else lora_deferred(w2_a, w2_b)
        raw = product(left, right)  # ||kron(A, B)|| = ||A|| ||B||
    return dim, float_or_none(alpha), raw, reason


ADAPTER_INFO = {"lora": _lora_info, "loha": _loha_info, "lokr": _lokr_info}


def analyse_entry(entry, weight_shape: tuple | None = None, not_patched: str | None = None) -> dict[str, Any]:
    """One patch entry -> type, strengths, rank, alpha, scales, applied or not, and its change norm.

    `weight_shape`: the target weight's shape (checked against the patch's); `not_patched`: why
    the framework's loader never patches this key (the patch is then not applied, change 0).
    One read-back; a step analyses its entries together (patch_rows) with one for all.
    """
    row, raw, reason, function = entry_facts(entry, weight_shape, not_patched)
    resolve([raw])
    set_delta(row, None if raw is None else raw.value(), reason, function)
    return row


def entry_facts(entry, weight_shape=None, not_patched=None, unit_norm: float | None = None) -> tuple:
    """(row without its change norm, the unit-strength norm as a figure still on the device or
    None, why there is none, whether a function is applied): analyse_entry before its read-back.
    `unit_norm`: the norm already known (cached), nothing is computed for it."""
    strength, value, base_scale, offset, function = padded(entry, 5)
    patch_type = classify_patch(value)
    strength = float_or_none(strength)
    base_scale = float_or_none(base_scale)
    rank = alpha = raw = scale = rank_reason = None
    reason = WITHOUT_NORM.get(patch_type)
    mismatch = None
    compute = unit_norm is None
    try:
        if patch_type in ADAPTER_INFO:
            rank, alpha, raw, reason = ADAPTER_INFO[patch_type](value.weights, compute)
            scale = _scale(alpha, rank)
            if patch_type == "lokr" and rank is None:
                rank_reason = "LoKr with two full factors: no factor has a rank"
        elif patch_type in ("glora", "oft", "boft"):
            alpha = float_or_none(padded(value.weights, 5)[4 if patch_type == "glora" else 2])
            rank = (
                _glora_rank(value.weights)
                if patch_type == "glora"
                else _block_rank(patch_type, value.weights)
            )
        elif patch_type == "diff":
            tensor = diff_tensor(value)
            if is_tensor(tensor):
                raw = frobenius_deferred(tensor) if compute else None
                reason = None
            else:
                reason = "diff without a tensor"
            scale = 1.0
        if not compute and reason is None:
            raw = known(unit_norm)
        if weight_shape is not None and offset is None:
            mismatch = delta_shape_mismatch(patch_type, value, tuple(weight_shape))
    except Exception as exc:  # a malformed patch is reported on its row, the others still count
        raw, reason = None, f"unreadable patch: {type(exc).__name__}: {exc}"
    effective = None if scale is None or strength is None else strength * scale
    not_applied = not_patched or (f"shape mismatch: {mismatch}" if mismatch else None)
    tensors = patch_tensors(value)
    row = {
        "type": patch_type,
        "adapter_class": type(value).__name__ if patch_type in ADAPTER_TYPES else None,
        "strength": strength,
        # ComfyUI's own "strength_model" of a patch entry: it multiplies the base weight first
        "base_weight_scale": base_scale,
        "rank": rank,
        "rank_unavailable": rank_reason if rank is None else None,
        "alpha": alpha,
        "scale": scale,
        "effective_scale": effective,
        "applied": not not_applied,
        "not_applied_reason": not_applied,
        "shape_mismatch": mismatch,
        "offset": list(offset) if isinstance(offset, (list, tuple)) else None,
        "patch_bytes": sum(int(t.numel()) * int(t.element_size()) for t in tensors),
        "patch_device": str(tensors[0].device) if tensors else None,
    }
    return row, raw, reason, function is not None


def set_delta(row: dict, raw: float | None, reason: str | None, function: bool) -> None:
    """The row's change norm from its unit-strength norm `raw` (resolved) and its strength."""
    effective, strength, base_scale = row["effective_scale"], row["strength"], row["base_weight_scale"]
    delta = None if raw is None or effective is None else abs(effective) * raw
    linear = raw is not None
    if strength == 0.0 and row["type"] in ("lora", "loha", "lokr", "diff"):
        delta, reason = 0.0, None  # every one of these scales linearly with the strength
    elif function:
        delta, reason, linear = None, "a function is applied to the change", False
    elif base_scale is not None and base_scale != 1.0:
        delta, reason, linear = None, "the base weight is rescaled too (base_weight_scale)", False
    if row["not_applied_reason"]:
        delta, reason = 0.0, None
    row["linear"] = linear
    row["delta_norm"] = delta
    row["delta_norm_unavailable"] = reason if delta is None else None

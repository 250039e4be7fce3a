"""LoRA patches on a ModelPatcher-like object: what each entry is, how strong, and how big a change.

Duck-typed on ComfyUI's bookkeeping (notes 2.1): `patcher.patches` maps a state-dict key to entries
(strength_patch, patch_value, strength_model, offset, function); `patch_value` is a weight adapter
(`.name`, `.weights`), ("diff", (t,)), ("set", (t,)), ("model_as_lora", (t,)), a bare (t,) or a
merge list. Clones copy each key's list but share the entries, so the entries a clone added are the
ones its parent does not hold (by identity). Norms of the change never build a base weight or a
whole delta (lora_norms); the base weight's own norm is read in chunks where a budget allows.
Rows are plain data: nothing here keeps a tensor or a patcher after returning.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from ..models.patching import patched_on_the_fly
from ..tensor_stats import one_cpu_thread
from .norms import frobenius_norm, kron_norm, loha_norm, lora_norm
from .state_dicts import state_dict_of
from .weights import delta_shape_mismatch, weight_rows

MAX_HOPS = 64  # parent-chain walk limit: far more than any real stack of loaders
MAX_LISTED_KEYS = 1000  # per-key rows kept in a report per side (totals cover every key)
# Base-weight elements read per side for relative changes: reading is O(weight size), so a big
# LoRA gets relative figures for its first keys only (rows say why the others have none).
BASE_NORM_ELEMENT_BUDGET = 1 << 27

ADAPTER_TYPES = ("lora", "loha", "lokr", "glora", "oft", "boft")
WITHOUT_NORM = {
    "glora": "GLoRA: the change depends on the base weight",
    "oft": "OFT: the change is a rotation of the base weight",
    "boft": "BOFT: the change is a rotation of the base weight",
    "set": "set: the weight is replaced, the change depends on the base weight",
    "model_as_lora": "model_as_lora: the change depends on the base weight",
    "merge": "merged patch list: the change depends on the base weight",
    "unknown": "unknown patch type",
}


def classify_patch(value) -> str:
    """lora, loha, lokr, glora, oft, boft, diff, set, model_as_lora, merge or unknown."""
    name = getattr(value, "name", None)
    if isinstance(name, str) and hasattr(value, "weights"):
        return name.lower() if name.lower() in ADAPTER_TYPES else "unknown"
    if isinstance(value, list):
        return "merge"
    if isinstance(value, tuple):
        if len(value) == 1:
            return "diff"
        if len(value) == 2 and isinstance(value[0], str):
            return value[0] if value[0] in ("diff", "set", "model_as_lora") else "unknown"
    return "unknown"


def _is_tensor(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "element_size") and hasattr(value, "numel")


def _padded(values, length: int) -> list:
    values = list(values) if isinstance(values, (list, tuple)) else []
    return values + [None] * (length - len(values))


def _float_or_none(value) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _scale(alpha, rank) -> float:
    """alpha / rank, or 1 when either is unknown (ComfyUI's rule for lora, loha, lokr)."""
    return alpha / rank if alpha is not None and rank else 1.0


def _lora_info(weights) -> tuple:
    up, down, alpha, mid, dora, _reshape = _padded(weights, 6)
    rank = int(down.shape[0])
    reason = None
    if dora is not None:
        reason = "DoRA: the change depends on the base weight"
    elif mid is not None:
        reason = "Tucker mid weight (LoCon CP decomposition): not computed"
    raw = None if reason else lora_norm(up, down)
    return rank, _float_or_none(alpha), raw, reason


def _loha_info(weights) -> tuple:
    w1a, w1b, alpha, w2a, w2b, t1, _t2, dora = _padded(weights, 8)
    rank = int(w1b.shape[0])
    reason = None
    if dora is not None:
        reason = "DoRA: the change depends on the base weight"
    elif t1 is not None:
        reason = "Tucker core (LoHa CP decomposition): not computed"
    raw = None if reason else loha_norm(w1a, w1b, w2a, w2b)
    return rank, _float_or_none(alpha), raw, reason


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


def _lokr_info(weights) -> tuple:
    w1, w2, alpha, w1_a, w1_b, w2_a, w2_b, t2, dora = _padded(weights, 9)
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
    if reason is None:
        left = frobenius_norm(w1) if w1 is not None else lora_norm(w1_a, w1_b)
        right = frobenius_norm(w2) if w2 is not None else lora_norm(w2_a, w2_b)
        raw = kron_norm(left, right)
    return dim, _float_or_none(alpha), raw, reason


ADAPTER_INFO = {"lora": _lora_info, "loha": _loha_info, "lokr": _lokr_info}


def _diff_tensor(value):
    return value[0] if len(value) == 1 else (value[1][0] if value[1] else None)


def patch_tensors(value) -> list:
    """The tensors a patch value holds (adapter weights, diff/set tensors, merge lists)."""
    if hasattr(value, "weights") and hasattr(value, "name"):
        return [t for t in getattr(value, "weights", ()) or () if _is_tensor(t)]
    if isinstance(value, list):
        found = []
        for item in value:
            inner = item[1] if isinstance(item, tuple) and len(item) > 1 else item
            found.extend(patch_tensors(inner) if not _is_tensor(inner) else [inner])
        return found
    if isinstance(value, tuple):
        inner = value if len(value) == 1 else (value[1] if len(value) == 2 else ())
        return [t for t in (inner if isinstance(inner, tuple) else ()) if _is_tensor(t)]
    return []


def analyse_entry(entry, weight_shape: tuple | None = None, not_patched: str | None = None) -> dict[str, Any]:
    """One patch entry -> type, strengths, rank, alpha, scales, applied or not, and its change norm.

    `weight_shape`: the target weight's shape (checked against the patch's); `not_patched`: why
    the framework's loader never patches this key (the patch is then not applied, change 0).
    """
    strength, value, base_scale, offset, function = _padded(entry, 5)
    patch_type = classify_patch(value)
    strength = _float_or_none(strength)
    base_scale = _float_or_none(base_scale)
    rank = alpha = raw = scale = rank_reason = None
    reason = WITHOUT_NORM.get(patch_type)
    mismatch = None
    try:
        if patch_type in ADAPTER_INFO:
            rank, alpha, raw, reason = ADAPTER_INFO[patch_type](value.weights)
            scale = _scale(alpha, rank)
            if patch_type == "lokr" and rank is None:
                rank_reason = "LoKr with two full factors: no factor has a rank"
        elif patch_type in ("glora", "oft", "boft"):
            alpha = _float_or_none(_padded(value.weights, 5)[4 if patch_type == "glora" else 2])
            rank = (
                _glora_rank(value.weights)
                if patch_type == "glora"
                else _block_rank(patch_type, value.weights)
            )
        elif patch_type == "diff":
            tensor = _diff_tensor(value)
            raw = frobenius_norm(tensor) if _is_tensor(tensor) else None
            reason = None if raw is not None else "diff without a tensor"
            scale = 1.0
        if weight_shape is not None and offset is None:
            mismatch = delta_shape_mismatch(patch_type, value, tuple(weight_shape))
    except Exception as exc:  # a malformed patch is reported on its row, the others still count
        raw, reason = None, f"unreadable patch: {type(exc).__name__}: {exc}"
    effective = None if scale is None or strength is None else strength * scale
    delta = None if raw is None or effective is None else abs(effective) * raw
    linear = raw is not None
    if strength == 0.0 and patch_type in ("lora", "loha", "lokr", "diff"):
        delta, reason = 0.0, None  # every one of these scales linearly with the strength
    elif function is not None:
        delta, reason, linear = None, "a function is applied to the change", False
    elif base_scale is not None and base_scale != 1.0:
        delta, reason, linear = None, "the base weight is rescaled too (base_weight_scale)", False
    not_applied = not_patched or (f"shape mismatch: {mismatch}" if mismatch else None)
    if not_applied:
        delta, reason = 0.0, None
    tensors = patch_tensors(value)
    return {
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
        "linear": linear,
        "delta_norm": delta,
        "delta_norm_unavailable": reason if delta is None else None,
        "offset": list(offset) if isinstance(offset, (list, tuple)) else None,
        "patch_bytes": sum(int(t.numel()) * int(t.element_size()) for t in tensors),
        "patch_device": str(tensors[0].device) if tensors else None,
    }


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


def patch_rows(
    added: Mapping[str, list], base_lookup=None, budget: list | None = None, not_patched=None
) -> list[dict]:
    """One row per added entry, with the base weight norm and relative change where affordable.

    `budget` is a one-element list of base-weight elements still allowed to be read (shared by
    the hops of one side so the whole analysis stays bounded); `not_patched(key)` says why the
    framework never patches a key (None: it does).
    """
    # Hundreds of small Gram products and base-weight chunks, each kernel ending in a thread-pool
    # barrier: on a loaded 2-core CPU the real-size SD1.5 LoRA took 11 s on torch's threads, 25-60x
    # what one thread takes (GPU tensors are unaffected by the intra-op thread count).
    with one_cpu_thread("cpu"):
        return _patch_rows(added, base_lookup, budget, not_patched)


def _patch_rows(added, base_lookup, budget, not_patched) -> list[dict]:
    rows = []
    for key in sorted(added, key=str):
        base_norm, base_reason = None, None
        shape = _shape_of(base_lookup, str(key))
        skip = not_patched(str(key)) if not_patched is not None else None
        for entry in added[key]:
            row = {"key": str(key), "block": block_of(str(key))}
            row.update(analyse_entry(entry, shape, skip))
            if base_lookup is not None and base_norm is None and base_reason is None:
                base_norm, base_reason = _base_norm(base_lookup, str(key), row["offset"], budget)
            row["base_norm"] = base_norm
            row["base_norm_unavailable"] = base_reason
            delta = row["delta_norm"]
            row["relative_change"] = delta / base_norm if delta is not None and base_norm else None
            rows.append(row)
    return rows


def _base_norm(lookup, key: str, offset, budget) -> tuple[float | None, str | None]:
    try:
        weight = lookup(key)
    except Exception as exc:
        return None, f"base weight unreadable: {type(exc).__name__}"
    if weight is None:
        return None, "no base weight under this key"
    if not _plain_tensor(weight):
        return None, f"base weight is a {type(weight).__name__} (quantised or offloaded)"
    if offset:
        weight = weight.narrow(int(offset[0]), int(offset[1]), int(offset[2]))
    n = int(weight.numel())
    if budget is not None:
        if budget[0] < n:
            return None, "skipped: base-weight read budget spent"
        budget[0] -= n
    return frobenius_norm(weight), None


def _root_sum_square(values) -> float:
    return math.sqrt(sum(v * v for v in values))


def aggregate(rows: list[dict], weights: list[dict] | None = None) -> dict[str, Any]:
    """Totals of rows: counts by type, and norms per weight over all its patches.

    `weights` (weight_rows) carry each weight's summed change; the totals are the root of the
    summed squares over distinct weights (exact: different weights are orthogonal), the base norm
    counts each weight once. `delta_norm_partial` is true when a weight with applied patches has
    no norm: the total then covers the others only.
    """
    weights = weights if weights is not None else _weights_from_rows(rows)
    with_norm = [w for w in weights if w["delta_norm"] is not None]
    relative = [w for w in with_norm if w["base_norm"]]
    top = max(relative, key=lambda w: w["relative_change"], default=None)
    # no patched weight at all: the change is known to be 0; weights without a norm: unknown
    delta_norm = _root_sum_square(w["delta_norm"] for w in with_norm) if with_norm or not weights else None
    base_norm = _root_sum_square(w["base_norm"] for w in relative) if relative else None
    partial = [w for w in weights if w["delta_norm"] is None]
    row_norms = [r for r in rows if r["delta_norm"] is not None]
    devices = Counter()
    for row in rows:
        if row["patch_device"]:
            devices[row["patch_device"]] += row["patch_bytes"]
    return {
        "n_keys": len({r["key"] for r in rows}),
        "n_entries": len(rows),
        "n_by_type": dict(Counter(r["type"] for r in rows)),
        "n_with_delta_norm": len(row_norms),
        "n_without_delta_norm": len(rows) - len(row_norms),
        "n_not_applied": sum(1 for r in rows if r.get("applied") is False),
        "n_shape_mismatches": sum(1 for r in rows if r.get("shape_mismatch")),
        "n_weights": len(weights),
        "n_weights_without_delta_norm": len(partial),
        "delta_norm_partial": bool(partial),
        "n_with_relative_change": len(relative),
        "reasons_without_norm": dict(
            Counter(r["delta_norm_unavailable"] for r in rows if r["delta_norm_unavailable"])
        ),
        "strengths": sorted({r["strength"] for r in rows if r["strength"] is not None}),
        "ranks": sorted({r["rank"] for r in rows if r["rank"] is not None}),
        "alphas": sorted({r["alpha"] for r in rows if r["alpha"] is not None}),
        "delta_norm": delta_norm,
        "base_norm": base_norm,
        "relative_change": delta_norm / base_norm if relative and base_norm else None,
        "max_relative_change": None if top is None else top["relative_change"],
        "max_relative_change_key": None if top is None else top["key"],
        "patch_bytes": sum(r["patch_bytes"] for r in rows),
        "patch_bytes_by_device": dict(devices),
    }


def _relative(weights) -> float | None:
    if not weights:
        return None
    base = _root_sum_square(w["base_norm"] for w in weights)
    return _root_sum_square(w["delta_norm"] for w in weights) / base if base else None


def _weights_from_rows(rows: list[dict]) -> list[dict]:
    """Per-weight rows when no base weight is at hand: cheap linear sums only."""
    by_key: dict[str, list] = {}
    for row in rows:
        by_key.setdefault(row["key"], []).append(row)
    out = []
    for key, members in by_key.items():
        applied = [r for r in members if r.get("applied", True)]
        if not applied:
            total = 0.0
        elif len(applied) == 1:
            total = applied[0]["delta_norm"]
        else:
            total = None  # the inner products need the entries: see weights.weight_rows
        base = members[0]["base_norm"]
        out.append(
            {
                "key": key,
                "block": members[0]["block"],
                "delta_norm": total,
                "base_norm": base,
                "relative_change": total / base if total is not None and base else None,
            }
        )
    return out


def weights_of(added: Mapping[str, list], rows: list[dict], lookup, calculate, budget, cache) -> list[dict]:
    """weight_rows for the entries `added` whose rows are `rows` (same order as patch_rows)."""
    rows_by_key: dict[str, list] = {}
    for row in rows:
        rows_by_key.setdefault(row["key"], []).append(row)
    return weight_rows({str(k): v for k, v in added.items()}, rows_by_key, lookup, calculate, budget, cache)


def by_block(rows: list[dict], weights: list[dict] | None = None) -> dict[str, dict]:
    weights = weights if weights is not None else _weights_from_rows(rows)
    blocks: dict[str, list] = {}
    for weight in weights:
        blocks.setdefault(weight["block"], []).append(weight)
    result = {}
    for name, members in sorted(blocks.items(), key=lambda item: str(item[0])):
        norms = [w["delta_norm"] for w in members if w["delta_norm"] is not None]
        result[name] = {
            "n_keys": len(members),
            "delta_norm": _root_sum_square(norms) if norms else None,
            "delta_norm_partial": len(norms) < len(members),
            "relative_change": _relative(
                [w for w in members if w["delta_norm"] is not None and w["base_norm"]]
            ),
        }
    return result


def summarise_rows(rows: list[dict], max_listed: int = MAX_LISTED_KEYS) -> dict[str, Any]:
    return {
        "totals": aggregate(rows),
        "by_block": by_block(rows),
        "keys": rows[:max_listed],
        "keys_truncated": len(rows) > max_listed,
    }

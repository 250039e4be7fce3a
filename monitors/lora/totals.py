"""Totals of a side's rows: counts by type, norms per weight and block, relative change over one set.

The relative change divides the change norm of a set of weights by the base norm of the same set:
the weights with both a change norm and a base norm. When some weight with a change norm has no
base norm, the ratio is partial: `relative_change_partial` says so and `n_weights_relative_change`
how many weights it covers; each weight row says why its base norm is missing.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

MAX_LISTED_KEYS = 1000  # per-key rows kept in a report per side (totals cover every key)


def _root_sum_square(values) -> float:
    return math.sqrt(sum(v * v for v in values))


def aggregate(rows: list[dict], weights: list[dict] | None = None) -> dict[str, Any]:
    """Totals of rows: counts by type, and norms per weight over all its patches.

    `weights` (weight_rows) carry each weight's summed change; the totals are the root of the
    summed squares over distinct weights (exact: different weights are orthogonal), the base norm
    counts each weight once. `delta_norm_partial` is true when a weight with applied patches has
    no norm: the total then covers the others only. The relative change divides the change of the
    weights that have both norms by their base norm; `relative_change_partial` is true when it
    covers fewer weights than were patched.
    """
    weights = weights if weights is not None else _weights_from_rows(rows)
    with_norm = [w for w in weights if w["delta_norm"] is not None]
    # measured weights: a change norm and a base norm (0 included: a zero bias still counts)
    relative = [w for w in with_norm if w["base_norm"] is not None]
    top = max(
        (w for w in relative if w["relative_change"] is not None),
        key=lambda w: w["relative_change"],
        default=None,
    )
    # no patched weight at all: the change is known to be 0; weights without a norm: unknown
    delta_norm = _root_sum_square(w["delta_norm"] for w in with_norm) if with_norm or not weights else None
    base_norm = _root_sum_square(w["base_norm"] for w in relative) if relative else None
    ratio = _relative(relative)
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
        "relative_change": ratio,
        "relative_change_partial": None if ratio is None else len(relative) < len(weights),
        "reasons_without_base_norm": dict(
            Counter(_without_base_reason(w) for w in weights if w["base_norm"] is None)
        ),
        "max_relative_change": None if top is None else top["relative_change"],
        "max_relative_change_key": None if top is None else top["key"],
        "patch_bytes": sum(r["patch_bytes"] for r in rows),
        "patch_bytes_by_device": dict(devices),
    }


def _without_base_reason(weight: dict) -> str:
    return weight.get("base_norm_unavailable") or "no base weight looked up"


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
                "base_norm_unavailable": members[0].get("base_norm_unavailable"),
                "relative_change": total / base if total is not None and base else None,
            }
        )
    return out


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
                [w for w in members if w["delta_norm"] is not None and w["base_norm"] is not None]
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

"""compare_pair's float64 path (dumps/compare.py): pairs with NaN or Inf, or whose float32 sums
overflow. NaN equals NaN and an Inf only the same Inf, as torch.allclose(equal_nan=True) has it;
norms and the cosine cover the pairs where both values are finite."""

from __future__ import annotations

import math

FLOAT64_FIGURES = ("max_diff", "sum_diff", "n_finite_diff", "n_not_close", "n_nan_mismatch")
FLOAT64_SUMS = ("dot", "norm_a2", "norm_b2", "diff2")


def float64_totals(flat_a, flat_b, rtol: float, atol: float, cpu_chunk: int, device_chunk: int) -> dict:
    """Chunks in float64 on the tensors' device (`cpu_chunk` or `device_chunk` elements), NaN and
    Inf handled by masks (never compacted: that would be a host sync per chunk); the per-chunk
    figures are read back once per pair."""
    import torch

    parts = []
    step = cpu_chunk if flat_a.device.type == "cpu" else device_chunk
    for start in range(0, int(flat_a.numel()), step):
        ca = flat_a[start : start + step].to(torch.float64)
        cb = flat_b[start : start + step].to(torch.float64)
        parts.append(_chunk_with_specials(ca, cb, rtol, atol))
    columns = torch.stack(parts).T.tolist()
    totals = {
        name: math.fsum(column) for name, column in zip(FLOAT64_FIGURES + FLOAT64_SUMS, columns, strict=True)
    }
    totals["max_diff"] = max(columns[0])
    for name in ("n_finite_diff", "n_not_close", "n_nan_mismatch"):
        totals[name] = int(totals[name])
    return totals


def _chunk_with_specials(ca, cb, rtol: float, atol: float):
    """One float64 chunk pair's figures, in the order FLOAT64_FIGURES + FLOAT64_SUMS: NaN equals NaN,
    an Inf equals the same Inf; norms and cosine use the finite pairs only."""
    import torch

    nan_a, nan_b = torch.isnan(ca), torch.isnan(cb)
    same_special = (nan_a & nan_b) | (torch.isinf(ca) & (ca == cb))
    diff = torch.where(same_special, torch.zeros_like(ca), (cb - ca).abs())
    finite_diff = torch.isfinite(diff)
    close = finite_diff & (diff <= atol + rtol * ca.abs().nan_to_num(posinf=0.0))
    both_finite = torch.isfinite(ca) & torch.isfinite(cb)
    fa, fb = torch.where(both_finite, ca, 0.0), torch.where(both_finite, cb, 0.0)
    finite_values = torch.where(finite_diff, diff, 0.0)
    pair_diff = fb - fa
    return torch.stack(
        [
            finite_values.amax() if finite_values.numel() else finite_values.sum(),
            finite_values.sum(),
            finite_diff.sum().to(torch.float64),
            (~close).sum().to(torch.float64),
            (nan_a ^ nan_b).sum().to(torch.float64),
            torch.dot(fa, fb),
            torch.dot(fa, fa),
            torch.dot(fb, fb),
            torch.dot(pair_diff, pair_diff),
        ]
    )

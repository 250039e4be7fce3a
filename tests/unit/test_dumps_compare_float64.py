"""compare_pair's float64 path (monitors/dumps/compare_float64.py): chunked by the tensors' device."""

from __future__ import annotations

import torch

from monitors.dumps import compare_float64
from monitors.dumps.compare_float64 import float64_totals


def test_tensors_on_the_cpu_are_chunked_by_the_cpu_chunk(monkeypatch):
    # Kept patch of a private name: the chunk sizes bound the float64 path's memory and show in no
    # figure; the per-chunk helper is where they are seen.
    sizes = []
    original = compare_float64._chunk_with_specials

    def counting(ca, cb, rtol, atol):
        sizes.append(int(ca.numel()))
        return original(ca, cb, rtol, atol)

    monkeypatch.setattr(compare_float64, "_chunk_with_specials", counting)
    a = torch.arange(10, dtype=torch.float32)
    b = a.clone()
    b[9] = float("nan")
    totals = float64_totals(a, b, 1e-5, 1e-8, cpu_chunk=4, device_chunk=1000)
    assert sizes == [4, 4, 2]
    assert (totals["n_nan_mismatch"], totals["n_finite_diff"], totals["max_diff"]) == (1, 9, 0.0)

"""compare_pair's float64 path (monitors/dumps/compare_float64.py): chunked by the tensors' device."""

from __future__ import annotations

import torch

from monitors.dumps.compare_float64 import float64_totals


class _Float64Copies(torch.overrides.TorchFunctionMode):
    """Records the size of every float64 copy of a float32 tensor made while it is active (a fake
    of the backend)."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        source = args[0] if args else None
        if func is torch.Tensor.to and source.dtype == torch.float32 and out.dtype == torch.float64:
            self.sizes.append(int(out.numel()))
        return out


def test_tensors_on_the_cpu_are_chunked_by_the_cpu_chunk():
    a = torch.arange(10, dtype=torch.float32)
    b = a.clone()
    b[9] = float("nan")
    with _Float64Copies() as copies:
        totals = float64_totals(a, b, 1e-5, 1e-8, cpu_chunk=4, device_chunk=1000)
    assert copies.sizes == [4, 4, 4, 4, 2, 2]  # a's and b's chunks: never more than 4 elements at once
    assert (totals["n_nan_mismatch"], totals["n_finite_diff"], totals["max_diff"]) == (1, 9, 0.0)

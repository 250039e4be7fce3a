"""compare_pair's GPU fast path (compare_device.py), forced on CPU tensors: several chunks of rows
of 16 Ki elements with a tail, every floating dtype and a mixed pair; the count outside tolerance
exactly torch.isclose's on the pair cast to float32, the other figures within the documented
bounds of a float64 reference; no float32 copy of a half-precision input is made."""

from __future__ import annotations

import math

import pytest
import torch

from monitors.dumps import compare, compare_device
from monitors.dumps.compare import compare_pair
from monitors.numeric.rows import DEVICE_ROW_ELEMENTS, SUM_CHAIN_BOUND

BOUND = (SUM_CHAIN_BOUND + 2) * 2.0**-24
N = 5 * DEVICE_ROW_ELEMENTS + 3333


@pytest.fixture
def device_path(monkeypatch):
    """The GPU's chunks (two full rows and a tail each, several chunks) on CPU tensors."""
    monkeypatch.setattr(compare, "DEVICE_CHUNK_ELEMENTS", 2 * DEVICE_ROW_ELEMENTS + 777)
    monkeypatch.setattr(compare, "_fast_chunk", lambda flat: compare.DEVICE_CHUNK_ELEMENTS)
    monkeypatch.setattr(compare, "FLOAT64_MAX_ELEMENTS", 0)
    calls = []
    real = compare_device.add_device_parts
    monkeypatch.setattr(compare, "add_device_parts", lambda *a, **k: calls.append(1) or real(*a, **k))
    yield
    assert calls, "the device path did not run"


def pair(dtype_a, dtype_b, seed=0):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(N, generator=generator) * 2 + 0.5
    b = a + 1e-2 * torch.randn(N, generator=generator)
    return a.to(dtype_a), b.to(dtype_b)


@pytest.mark.parametrize(
    "dtype_a, dtype_b",
    [
        (torch.float32, torch.float32),
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float16),
    ],
)
def test_the_device_path_within_the_bounds_of_float64(device_path, dtype_a, dtype_b):
    a, b = pair(dtype_a, dtype_b)
    rtol, atol = 1e-3, 1e-4
    row = compare_pair(a, b, rtol, atol)
    a32, b32 = a.float(), b.float()
    assert row["n_not_close"] == int((~torch.isclose(b32, a32, rtol, atol)).sum())
    diff = (b32 - a32).double()  # float32(b) - float32(a), rounded once, as the kernels do
    assert row["max_abs_diff"] == float(diff.abs().max())
    exact_mean = float(diff.abs().mean())
    assert abs(row["mean_abs_diff"] - exact_mean) <= SUM_CHAIN_BOUND * 2.0**-24 * exact_mean
    ad, bd = a.double(), b.double()
    exact_rel = float(torch.linalg.vector_norm(bd - ad)) / float(torch.linalg.vector_norm(ad))
    assert abs(row["relative_error"] - exact_rel) <= 2 * BOUND * exact_rel + 1e-7 * exact_rel
    cos = float(torch.dot(ad, bd)) / float(torch.linalg.vector_norm(ad) * torch.linalg.vector_norm(bd))
    assert abs(row["cosine_similarity"] - cos) <= BOUND * 3
    assert row["allclose"] is (row["n_not_close"] == 0) and row["equal"] is False


def test_identical_half_pairs_are_equal_on_the_device_path(device_path):
    a, _ = pair(torch.bfloat16, torch.bfloat16, seed=2)
    row = compare_pair(a, a.clone(), 0.0, 0.0)
    assert row["equal"] is True and row["n_not_close"] == 0 and row["max_abs_diff"] == 0.0


def test_no_float32_copy_of_a_half_input(monkeypatch):
    a, b = pair(torch.float16, torch.float16, seed=3)
    made = []
    real_to = torch.Tensor.to
    real_float = torch.Tensor.float

    def watched_to(self, *args, **kwargs):
        made.append(("to", int(self.numel())))
        return real_to(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", watched_to)
    monkeypatch.setattr(torch.Tensor, "float", lambda self: made.append(("float", int(self.numel()))) or real_float(self))
    parts = []
    compare_device.add_device_parts(parts, a, b, 1e-5, 1e-8, 2 * DEVICE_ROW_ELEMENTS)
    assert parts and all(count < DEVICE_ROW_ELEMENTS for _, count in made), made  # row results only
    assert math.isfinite(float(torch.stack(parts).sum()))

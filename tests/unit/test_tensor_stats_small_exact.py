"""Small tensors (up to FLOAT64_MAX_ELEMENTS) keep float64's precision: their squares are summed
exactly as squares, so small integer values give exact statistics, as a reader comparing them by
eye expects."""

import math

import pytest
import torch

from monitors.numeric.tensor_stats import value_stats


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_small_integer_values_give_exact_statistics(dtype):
    # [1, 2]: mean 1.5, mean of squares 2.5, variance 0.25; [1, 2, 3, 4]: 2.5, 7.5, 1.25
    two = value_stats(torch.tensor([1.0, 2.0], dtype=dtype))
    assert (two["min"], two["max"], two["mean"], two["std"]) == (1.0, 2.0, 1.5, 0.5)
    four = value_stats(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=dtype))
    assert (four["mean"], four["std"]) == (2.5, math.sqrt(1.25))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_a_small_tensor_gets_float64_figures(dtype):
    flat = (torch.randn(4099, generator=torch.Generator().manual_seed(3)) * 5 + 1).to(dtype)
    values = flat.double().tolist()  # each value exact in float64
    mean = math.fsum(values) / len(values)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
    stats = value_stats(flat)
    assert (stats["min"], stats["max"]) == (min(values), max(values))
    assert stats["mean"] == pytest.approx(mean, rel=1e-13, abs=1e-15)
    assert stats["std"] == pytest.approx(std, rel=1e-12)

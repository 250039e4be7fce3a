"""value_stats' float32 sum of squares as row norms (tensor_stats.row_sum_of_squares): rows with a
tail, float16 input, specials, against a float64 reference within the documented bound."""

from __future__ import annotations

import pytest
import torch

from monitors.numeric import tensor_stats
from monitors.numeric.tensor_stats import (
    ROW_ELEMENTS,
    SUM_CHAIN_BOUND,
    row_sum_of_squares,
    stats_error_bound,
    value_stats,
)


@pytest.fixture
def float32_chunks(monkeypatch):
    monkeypatch.setattr(tensor_stats, "CHUNK_ELEMENTS", 1000)  # chunks of 7 full rows and a tail
    monkeypatch.setattr(tensor_stats, "FLOAT64_MAX_ELEMENTS", 0)


def test_rows_stay_within_the_chain_bound():
    assert ROW_ELEMENTS + 2 <= SUM_CHAIN_BOUND  # a row, its squares and square root within M


@pytest.mark.parametrize("length", [1, ROW_ELEMENTS - 1, ROW_ELEMENTS, ROW_ELEMENTS + 1, 1000])
def test_row_sum_of_squares_against_float64(length):
    x = 2.0 + torch.randn(length, generator=torch.Generator().manual_seed(length))
    exact = float((x.double() ** 2).sum())
    got = row_sum_of_squares(x)
    assert got.dtype == torch.float64 and got.shape == ()
    assert abs(float(got) - exact) <= (ROW_ELEMENTS + 2) * 2.0**-24 * exact


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_statistics_over_rows_and_chunks_within_the_bound(float32_chunks, dtype):
    x = (3.0 + torch.randn(10_007, generator=torch.Generator().manual_seed(3))).to(dtype)
    stats = value_stats(x)
    ref = x.double()
    bound = stats_error_bound(float(ref.abs().mean()), float((ref * ref).mean()), float(ref.mean()))
    assert abs(stats["mean"] - float(ref.mean())) <= bound["mean"]
    assert abs(stats["std"] - float(ref.std(unbiased=False))) <= bound["std"]
    assert stats["min"] == float(ref.min()) and stats["max"] == float(ref.max())


def test_float16_specials_counted_over_chunks(float32_chunks):
    x = torch.randn(5000).half()
    x[[1, 2500]] = float("nan")
    x[4999] = float("-inf")
    stats = value_stats(x)
    finite = x[torch.isfinite(x)].double()
    assert stats["n_nan"] == 2 and stats["n_inf"] == 1
    assert stats["min"] == float(finite.min()) and stats["max"] == float(finite.max())
    assert stats["mean"] == pytest.approx(float(finite.mean()), abs=1e-5)


def test_strided_and_transposed_inputs_give_the_contiguous_figures(float32_chunks):
    """Equal up to summation order: torch reduces strided memory in another order."""
    base = torch.randn(6000, generator=torch.Generator().manual_seed(4))
    square = base[:3600].reshape(60, 60)
    for view, dense in ((base[::2], base[::2].clone()), (square.T, square.T.contiguous())):
        got, want = value_stats(view), value_stats(dense)
        assert {k: got[k] for k in ("min", "max", "n_nan", "n_inf")} == {
            k: want[k] for k in ("min", "max", "n_nan", "n_inf")
        }
        assert got["mean"] == pytest.approx(want["mean"], abs=1e-6) and got["std"] == pytest.approx(
            want["std"], rel=1e-6
        )

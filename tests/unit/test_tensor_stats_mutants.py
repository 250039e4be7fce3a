"""monitors/numeric/tensor_stats.py with known values where mutants survived the first tests: the error
bound's formula, which accumulation type a size gets, the underflow threshold at its boundary, and
the exact float64 path's counts and statistics (scripts/mutate.py survivors)."""

from __future__ import annotations

import math

import pytest
import torch

from monitors.numeric import tensor_stats
from monitors.numeric.tensor_stats import stats_error_bound, value_stats


def test_error_bound_formula_in_float32_and_float64():
    u = 2.0**-24
    mean_err = 256 * u * 1.5
    variance = 258 * u * 4.0 + 2 * 0.5 * mean_err + mean_err**2
    assert stats_error_bound(1.5, 4.0, -0.5) == {
        "mean": mean_err,
        "variance": variance,
        "std": math.sqrt(variance),
    }
    u = 2.0**-53
    mean_err = 256 * u * 1.5
    variance = 258 * u * 4.0 + 2 * 0.5 * mean_err + mean_err**2
    assert stats_error_bound(1.5, 4.0, 0.5, accumulate_float64=True)["variance"] == variance


def test_underflow_scale_is_the_smallest_normal_over_the_unit_roundoff():
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        info = torch.finfo(dtype)
        assert tensor_stats.UNDERFLOW_SCALE[name] == info.tiny / (info.eps / 2)


@pytest.fixture
def spy(monkeypatch):
    """The accumulation type of each chunked pass, and whether the exact float64 path ran."""
    seen = {"acc": [], "exact": 0}
    chunked, small, exact = (
        tensor_stats._chunk_reductions,
        tensor_stats._small_reductions,
        tensor_stats._exact_float64_stats,
    )

    def chunk_reductions(flat, acc):
        seen["acc"].append(acc)
        return chunked(flat, acc)

    def small_reductions(flat):  # the one float64 chunk of a small tensor
        seen["acc"].append(torch.float64)
        return small(flat)

    def exact_stats(flat, stats):
        seen["exact"] += 1
        return exact(flat, stats)

    monkeypatch.setattr(tensor_stats, "_chunk_reductions", chunk_reductions)
    monkeypatch.setattr(tensor_stats, "_small_reductions", small_reductions)
    monkeypatch.setattr(tensor_stats, "_exact_float64_stats", exact_stats)
    return seen


def test_float64_accumulation_up_to_64_ki_elements(spy):
    assert tensor_stats.FLOAT64_MAX_ELEMENTS == 2**16
    values = torch.arange(2**16 + 1, dtype=torch.float32) % 7
    value_stats(values[: 2**16])
    value_stats(values)
    assert spy["acc"] == [torch.float64, torch.float32] and spy["exact"] == 0


def test_underflow_threshold_is_strict(spy):
    # float32 accumulation (above 64 Ki elements), peak**2 == n * UNDERFLOW_SCALE exactly: kept on
    # the fast path; any smaller peak goes to the exact float64 path.
    n = 2**18
    peak = math.sqrt(n * tensor_stats.UNDERFLOW_SCALE["float32"])
    assert peak == 2.0**-42
    at = torch.full((n,), peak / 2, dtype=torch.float32)
    at[0] = peak
    value_stats(at)
    assert spy["exact"] == 0
    below = torch.full((n,), peak / 2, dtype=torch.float32)
    below[0] = peak * 0.75
    stats = value_stats(below)
    assert spy["exact"] == 1
    assert stats["max"] == pytest.approx(peak * 0.75) and stats["min"] == pytest.approx(peak / 2)


def test_squares_that_underflow_float32_still_give_the_true_spread():
    values = torch.tensor([1e-30, 3e-30] * 40_000, dtype=torch.float32)  # float32 squares are 0
    stats = value_stats(values)
    assert stats["mean"] == pytest.approx(2e-30, rel=1e-6) and stats["std"] == pytest.approx(1e-30, rel=1e-5)


def test_exact_path_of_integers():
    stats = value_stats(torch.tensor([1, 2, 3]))
    assert stats == {
        "min": 1.0,
        "max": 3.0,
        "mean": 2.0,
        "std": pytest.approx(math.sqrt(2 / 3), rel=1e-15),
        "n_nan": 0,
        "n_inf": 0,
    }


def test_exact_path_counts_nan_and_inf_when_float32_sums_overflow():
    values = torch.full((70_000,), 1e30, dtype=torch.float32)  # squares overflow float32
    values[:3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    values[3] = -1e30
    stats = value_stats(values)
    assert (stats["n_nan"], stats["n_inf"]) == (1, 2)
    finite = values[torch.isfinite(values)].double()  # the reference: the finite values in float64
    assert (stats["min"], stats["max"]) == (float(finite.min()), float(finite.max()))
    assert stats["mean"] == pytest.approx(float(finite.mean()), rel=1e-12)
    assert stats["std"] == pytest.approx(float(finite.std(unbiased=False)), rel=1e-9)


def test_exact_path_with_no_finite_value_has_no_statistics():
    stats = {"min": None, "max": None, "mean": None, "std": None, "n_nan": 0, "n_inf": 0}
    out = tensor_stats._exact_float64_stats(torch.tensor([float("nan"), float("inf")]), stats)
    assert out == {"min": None, "max": None, "mean": None, "std": None, "n_nan": 1, "n_inf": 1}


def test_one_cpu_thread_is_shared_by_nested_users_and_restores_the_count():
    saved = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with tensor_stats.one_cpu_thread("cpu"):
            assert torch.get_num_threads() == 1
            with tensor_stats.one_cpu_thread("cpu"):
                assert torch.get_num_threads() == 1
            assert torch.get_num_threads() == 1  # the outer user still holds it
        assert torch.get_num_threads() == 3 and tensor_stats._threads_users == 0
        with tensor_stats.one_cpu_thread("cuda"):  # GPU work leaves the CPU threads alone
            assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(saved)

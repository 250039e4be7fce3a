"""The GPU rule on a CPU (issue 25): value_stats and compare_pair read back once per tensor (per
pair) whatever its size and values, on the chunked CPU path and on the whole-tensor path a GPU
takes (forced here on CPU tensors: the same kernels), with the same figures."""

from __future__ import annotations

import math

import pytest
import torch

import monitors.dumps.compare as compare
import monitors.numeric.tensor_stats as tensor_stats
from monitors.dumps.compare import compare_pair
from monitors.numeric.tensor_stats import SUM_CHAIN_BOUND, value_stats
from tests.readbacks import ReadbackCounter

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]


def tensor(n: int, dtype, seed: int = 0):
    return (torch.randn(n, generator=torch.Generator().manual_seed(seed)) * 3 + 1).to(dtype)


def counted(fn, *args):
    with ReadbackCounter() as counter:
        result = fn(*args)
    return result, counter.n_readbacks


@pytest.fixture(params=["chunked", "whole"])
def path(request, monkeypatch):
    if request.param == "whole":  # what a GPU tensor takes, on a CPU tensor
        # Kept patches of private names: no GPU here, so the choice of the whole-tensor path that
        # a device tensor gets is forced on a CPU tensor to count its read-backs.
        monkeypatch.setattr(tensor_stats, "_whole_tensor", lambda flat: flat.dtype in DTYPES)
        monkeypatch.setattr(compare, "_fast_chunk", lambda flat: compare.DEVICE_CHUNK_ELEMENTS)
    return request.param


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [(1 << 16) + 1, 3 * (1 << 20) + 77])
def test_value_stats_reads_back_once(path, dtype, n):
    values = tensor(n, dtype)
    stats, n_reads = counted(value_stats, values)
    assert n_reads == 1
    exact = values.double()
    assert stats["min"] == float(exact.min()) and stats["max"] == float(exact.max())
    assert stats["mean"] == pytest.approx(float(exact.mean()), rel=1e-5, abs=1e-6)
    assert stats["std"] == pytest.approx(float(exact.std(unbiased=False)), rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int8, torch.bool, torch.uint8])
def test_integer_and_bool_tensors_read_back_once(dtype):
    values = (torch.arange(3 * (1 << 20) + 5) % 7).to(dtype)
    stats, n_reads = counted(value_stats, values)
    assert n_reads == 1
    exact = values.double()
    assert (stats["min"], stats["max"]) == (float(exact.min()), float(exact.max()))
    assert stats["mean"] == pytest.approx(float(exact.mean()), rel=1e-12)


def test_nan_and_inf_cost_one_more_read_back_not_one_per_chunk(path):
    values = tensor(3 * (1 << 20), torch.float32)
    values[5], values[(1 << 20) + 9], values[-1] = math.nan, math.inf, -math.inf
    stats, n_reads = counted(value_stats, values)
    assert n_reads == 2
    assert (stats["n_nan"], stats["n_inf"]) == (1, 2)
    finite = values[torch.isfinite(values)].double()
    assert stats["mean"] == pytest.approx(float(finite.mean()), rel=1e-5)


def test_the_whole_tensor_reductions_equal_the_chunked_ones():
    for dtype in DTYPES:
        values = tensor(2 * (1 << 20) + 3, dtype, seed=4)
        flat = values.reshape(-1)
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        whole = [float(x) for x in tensor_stats._device_reductions(flat, acc)]
        mins, maxs, sums, squares = tensor_stats._chunk_reductions(flat, acc)
        assert whole[0] == min(float(x) for x in mins) and whole[1] == max(float(x) for x in maxs)
        assert whole[2] == pytest.approx(math.fsum(float(x) for x in sums), rel=1e-6)
        # The GPU's rows (16 Ki) on a CPU: its norm kernel adds a row sequentially, ~20 roundings
        # off here (a CUDA row reduction is a tree: rows.py); within the documented (M+2)*u.
        bound = (SUM_CHAIN_BOUND + 2) * 2.0**-24
        assert whole[3] == pytest.approx(math.fsum(float(x) for x in squares), rel=bound)


@pytest.mark.parametrize("dtype", DTYPES)
def test_compare_pair_reads_back_once_per_pair(path, dtype):
    a = tensor(3 * (1 << 20) + 11, dtype)
    b = (a.double() * 1.001).to(dtype)
    row, n_reads = counted(compare_pair, a, b, 1e-5, 1e-8)
    assert n_reads == 1
    assert row["max_abs_diff"] == pytest.approx(float((b.double() - a.double()).abs().max()), rel=1e-3)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int16, torch.bool])
def test_compare_pair_of_integers_reads_back_once(dtype):
    a = (torch.arange(3 * (1 << 20)) % 5).to(dtype)
    b = a.clone()
    b[7] = 3 if dtype != torch.bool else not bool(a[7])
    row, n_reads = counted(compare_pair, a, b, 0.0, 0.0)
    assert n_reads == 1 and row["n_not_close"] == 1 and row["equal"] is False


def test_compare_pair_with_nan_and_inf_reads_back_twice(path):
    a = tensor(3 * (1 << 20), torch.float32)
    b = a.clone()
    a[3] = b[3] = math.nan
    a[(1 << 20) + 1] = b[(1 << 20) + 1] = math.inf
    b[-1] = math.nan
    row, n_reads = counted(compare_pair, a, b, 1e-5, 1e-8)
    assert n_reads == 2  # the fast path's, then the float64 path's that handles them
    assert (row["n_nan_mismatch"], row["n_not_close"]) == (1, 1)
    assert row["max_abs_diff"] == 0.0 and row["equal"] is False

"""The whole-tensor path a GPU takes (rows of rows.DEVICE_ROW_ELEMENTS, issue 35), forced on CPU
tensors with value_stats(whole_tensor=True): within the documented error bound of a float64
reference in every floating dtype, the same min/max, one read-back; and the numeric package's
imports go one way (no cycle between tensor_stats and fused_kernels)."""

from __future__ import annotations

import ast
import os

import pytest
import torch

from monitors.numeric import rows, tensor_stats
from monitors.numeric.tensor_stats import stats_error_bound, value_stats
from tests.readbacks import ReadbackCounter

NUMERIC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "monitors", "numeric")
ROW = rows.DEVICE_ROW_ELEMENTS


def values(n: int, dtype, offset: float = 3.0, seed: int = 1):
    return (offset + torch.randn(n, generator=torch.Generator().manual_seed(seed))).to(dtype)


def test_device_rows_are_8_to_16_ki_elements_and_the_cpu_rows_stay_short():
    assert 8 * 1024 <= ROW <= 16 * 1024
    assert rows.ROW_ELEMENTS + 2 <= rows.SUM_CHAIN_BOUND


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [(1 << 16) + 1, 5 * ROW, 7 * ROW + 1234])
def test_whole_tensor_statistics_within_the_bound_of_float64(dtype, n):
    x = values(n, dtype)
    with ReadbackCounter() as counter:
        stats = value_stats(x, whole_tensor=True)
    assert counter.n_readbacks == 1
    ref = x.double()
    bound = stats_error_bound(float(ref.abs().mean()), float((ref * ref).mean()), float(ref.mean()))
    assert stats["min"] == float(ref.min()) and stats["max"] == float(ref.max())
    assert abs(stats["mean"] - float(ref.mean())) <= bound["mean"]
    assert abs(stats["std"] - float(ref.std(unbiased=False))) <= bound["std"]


@pytest.mark.parametrize("row_elements", [8 * 1024, 16 * 1024])
def test_row_lengths_of_8_and_16_ki_give_the_float64_sums_within_the_bound(row_elements):
    x = values(3 * row_elements + 999, torch.float16, offset=-2.0, seed=7)
    lo, hi, total, squares = tensor_stats._device_reductions(x, torch.float32, row_elements)
    ref = x.double()
    n = int(x.numel())
    bound = stats_error_bound(float(ref.abs().mean()), float((ref * ref).mean()), float(ref.mean()))
    assert (float(lo), float(hi)) == (float(ref.min()), float(ref.max()))
    assert abs(float(total) / n - float(ref.mean())) <= bound["mean"]
    mean_sq = float((ref * ref).mean())
    assert abs(float(squares) / n - mean_sq) <= (rows.SUM_CHAIN_BOUND + 2) * 2.0**-24 * mean_sq


def test_forcing_the_chunked_path_gives_the_same_min_and_max():
    x = values(3 * ROW + 5, torch.bfloat16, seed=3)
    whole, chunked = value_stats(x, whole_tensor=True), value_stats(x, whole_tensor=False)
    assert (whole["min"], whole["max"]) == (chunked["min"], chunked["max"])
    assert whole["mean"] == pytest.approx(chunked["mean"], rel=1e-5)


def imported_modules(name: str) -> tuple[set[str], list[int]]:
    """Relative modules a numeric module imports at its top level, and lines of imports made
    inside functions (of this package or its parent)."""
    with open(os.path.join(NUMERIC, f"{name}.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    top = {node.module or "" for node in tree.body if isinstance(node, ast.ImportFrom) and node.level}
    inner = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level and node not in tree.body
    ]
    return top, inner


def test_tensor_stats_and_fused_kernels_import_one_way_and_never_inside_functions():
    stats_imports, stats_inner = imported_modules("tensor_stats")
    kernels_imports, kernels_inner = imported_modules("fused_kernels")
    assert "fused_kernels" in stats_imports and "tensor_stats" not in kernels_imports
    assert stats_inner == [] and kernels_inner == []
    assert imported_modules("rows")[0] == set()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_deferred_statistics_equal_value_stats_whole_tensor_path(dtype):
    from monitors.numeric.deferred_stats import enqueue_stats, finish_stats

    x = values(5 * ROW + 11, dtype, seed=9)
    with ReadbackCounter() as counter:
        pending = enqueue_stats(x, whole_tensor=True)  # a GPU's path, on a CPU tensor
    assert counter.n_readbacks == 0 and pending is not None
    assert finish_stats(pending, x.clone()) == value_stats(x, whole_tensor=True)


def test_deferred_statistics_fall_back_to_the_copy_they_are_given():
    from monitors.numeric.deferred_stats import enqueue_stats, finish_stats

    tiny = torch.full((1 << 17,), 1e-30)  # squares underflow float32: the exact path
    tiny[3] = 2e-30
    assert finish_stats(enqueue_stats(tiny, whole_tensor=True), tiny) == value_stats(tiny)
    with_nan = values(1 << 17, torch.float32)
    copy = with_nan.clone()
    with_nan[0] = float("nan")
    pending = enqueue_stats(with_nan, whole_tensor=True)
    copy[0] = float("nan")
    assert finish_stats(pending, copy)["n_nan"] == 1
    assert enqueue_stats(torch.ones(10)) is None and enqueue_stats(torch.ones(1 << 17, dtype=torch.int32)) is None

"""One read-back per step (numeric/batch_stats.py): a step's tensors reduced together give
value_stats' own figures, with one read-back per device, and the conditioning step reads back once
for both sides."""

from __future__ import annotations

import contextlib
import math

import pytest
import torch

import monitors.conditioning.analysis as conditioning_analysis
import monitors.numeric.batch_stats as batch_stats
import monitors.numeric.tensor_stats as tensor_stats
from monitors.conditioning.report import build_conditioning_step
from monitors.numeric.batch_stats import batch_value_stats, stats_read_back_once
from monitors.numeric.deferred_stats import enqueue_stats
from monitors.numeric.describe import STATS_MAX_ELEMENTS, describe_deferred, describe_tensor_bounded
from monitors.numeric.tensor_stats import FLOAT64_MAX_ELEMENTS, value_stats
from tests.readbacks import ReadbackCounter


def tensor(shape, dtype=torch.float32, seed=0):
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 2 + 0.5).to(dtype)


def test_small_tensors_of_every_float_type_give_value_stats_figures_in_one_read_back():
    tensors = [tensor((3, 77, 64), dtype, seed) for seed, dtype in
               enumerate((torch.float32, torch.float16, torch.bfloat16, torch.float64))]
    with ReadbackCounter() as counter:
        read = batch_value_stats(tensors, STATS_MAX_ELEMENTS)
    assert counter.n_readbacks == 1
    for t in tensors:
        assert read[id(t)] == (t, value_stats(t))


def test_tensors_value_stats_reduces_another_way_are_left_to_it():
    integer, empty = torch.arange(10), torch.zeros(0)
    large = tensor((1 << 17,))  # a CPU tensor above FLOAT64_MAX_ELEMENTS: chunked by value_stats
    huge = tensor((64,))
    read = batch_value_stats([integer, empty, large, huge, "not a tensor"], max_elements=32)
    assert read == {}
    at_the_bound = tensor((32,))
    assert set(batch_value_stats([at_the_bound], max_elements=32)) == {id(at_the_bound)}
    largest_small = tensor((FLOAT64_MAX_ELEMENTS,))  # still one float64 chunk, on the CPU too
    assert batch_value_stats([largest_small], STATS_MAX_ELEMENTS)[id(largest_small)][1] == value_stats(largest_small)


def test_only_a_devices_tensor_takes_the_whole_tensor_path():
    large = tensor((1 << 17,))  # a CPU tensor: value_stats reduces it in chunks, not batched
    assert batch_value_stats([large], STATS_MAX_ELEMENTS) == {}
    assert enqueue_stats(large) is None and enqueue_stats(large, whole_tensor=True) is not None


def test_a_tensor_with_nan_or_inf_falls_back_to_value_stats_alone():
    clean, broken = tensor((8, 8)), tensor((8, 8), seed=1)
    broken[0, 0], broken[1, 1] = math.nan, math.inf
    with ReadbackCounter() as counter:
        read = batch_value_stats([clean, broken], STATS_MAX_ELEMENTS)
    assert counter.n_readbacks == 3  # the batch, then value_stats of the broken one alone (its two)
    assert read[id(broken)][1] == value_stats(broken) and read[id(broken)][1]["n_nan"] == 1
    assert read[id(clean)][1] == value_stats(clean)


def test_a_gpus_whole_tensor_path_is_batched_too(monkeypatch):
    # Kept patch of a private name: no GPU here, so the whole-tensor path a device tensor takes is
    # forced on CPU tensors (the same kernels) to count its read-backs.
    monkeypatch.setattr(tensor_stats, "_whole_tensor", lambda flat: True)
    tensors = [tensor((1 << 17,), torch.float32), tensor((3 * (1 << 16) + 5,), torch.float16, 1), tensor((40,))]
    with ReadbackCounter() as counter:
        read = batch_value_stats(tensors, STATS_MAX_ELEMENTS)
    assert counter.n_readbacks == 1
    for t in tensors[:2]:
        assert read[id(t)][1] == value_stats(t, whole_tensor=True)


def test_describe_takes_the_figures_read_together_only_inside_the_block_and_only_for_that_tensor():
    a, b = tensor((4, 4)), tensor((4, 4), seed=2)
    with stats_read_back_once([a, a], STATS_MAX_ELEMENTS) as n_batched:
        assert n_batched == 1  # given twice, reduced once
        with ReadbackCounter() as counter:
            inside = describe_tensor_bounded(a)
            other = describe_tensor_bounded(b)
        assert counter.n_readbacks == 1  # b's own
    assert inside == describe_tensor_bounded(a) and other == describe_tensor_bounded(b)
    assert batch_stats.read_together(a) is None


def conditioning(seed, hidden=768):
    extras = {"pooled_output": tensor((1, 1280), seed=seed + 1), "conditioning_lyrics": tensor((1, 8, 64), seed=seed + 2)}
    return [[tensor((1, 77, hidden), seed=seed), extras]]


@pytest.mark.parametrize("hidden", [768, 2048])
def test_the_conditioning_step_reads_back_once_for_both_sides_with_the_same_figures(monkeypatch, hidden):
    if hidden == 2048:  # 77 x 2048 values: the whole-tensor path of a GPU, forced (see above)
        monkeypatch.setattr(tensor_stats, "_whole_tensor", lambda flat: True)
    positive, negative = conditioning(0, hidden), conditioning(10, hidden)
    with ReadbackCounter() as counter:
        batched = build_conditioning_step("7", None, positive, negative)
    assert counter.n_readbacks == 1
    monkeypatch.setattr(conditioning_analysis, "stats_read_back_once", lambda *a: contextlib.nullcontext(0))
    with ReadbackCounter() as counter:
        alone = build_conditioning_step("7", None, positive, negative)
    assert counter.n_readbacks == 6  # one per tensor: cond, pooled, extra of each side
    assert batched.summary == alone.summary and batched.findings == alone.findings
    strip = lambda d: {k: v for k, v in d.items() if k not in ("analysis_s",)}  # noqa: E731
    assert strip(batched.details) == strip(alone.details)


@pytest.mark.parametrize("same", [True, False])
def test_one_conditioning_on_both_sides_is_reduced_once(same):
    positive = conditioning(0)
    negative = positive if same else conditioning(3)
    with ReadbackCounter() as counter:
        step = build_conditioning_step("7", None, positive, negative)
    assert counter.n_readbacks == 1 and step.summary["positive_n_nan"] == 0


def test_a_large_cpu_tensor_whose_copy_is_kept_is_described_later_never_on_a_gpus_rows():
    """A dump's CPU tensor above FLOAT64_MAX_ELEMENTS: nothing is reduced in the node (the writer
    describes its host copy); without a kept copy it is described now, on the CPU's own path."""
    large = tensor((1 << 18,))
    with ReadbackCounter() as counter:
        metadata, pending = describe_deferred(large, host_copy_kept=True)
    assert counter.n_readbacks == 0
    assert pending is not None and pending.figures is None and metadata["min"] is None  # nothing reduced here
    described, none = describe_deferred(large)
    assert none is None and described == describe_tensor_bounded(large)

"""The LoRA analysis runs its many small CPU kernels on one intra-op thread and restores the count;
the base-weight norm's one-pass float32 path gives the same figure as the widening path."""

import pytest
import torch

import monitors.lora.analysis as analysis
import monitors.lora.entries as entries
import monitors.lora.norms as norms
import monitors.lora.weights as weights

from .test_lora_norms import Adapter, rand


def lora_entry(seed: int, strength: float = 1.0):
    return (
        strength,
        Adapter("lora", (rand(16, 4, seed=seed), rand(4, 24, seed=seed + 1), None, None, None, None)),
        1.0,
        None,
        None,
    )


@pytest.fixture
def two_threads():
    saved = torch.get_num_threads()
    torch.set_num_threads(2)  # so that a limit to one is visible even where torch starts on one
    yield 2
    torch.set_num_threads(saved)


def test_patch_rows_and_weight_rows_run_on_one_thread_and_restore_the_count(monkeypatch, two_threads):
    seen = []
    original_lora, original_norm = entries.lora_deferred, analysis.frobenius_deferred

    def spy_lora(up, down):
        seen.append(("lora_norm", torch.get_num_threads()))
        return original_lora(up, down)

    def spy_norm(tensor):
        seen.append(("base_norm", torch.get_num_threads()))
        return original_norm(tensor)

    monkeypatch.setattr(entries, "lora_deferred", spy_lora)
    monkeypatch.setattr(analysis, "frobenius_deferred", spy_norm)
    added = {"a.weight": [lora_entry(1)], "b.weight": [lora_entry(3), lora_entry(5, 0.5)]}
    base = rand(16, 24, seed=9)
    rows = analysis.patch_rows(added, lambda key: base)
    assert torch.get_num_threads() == two_threads
    assert {name for name, _ in seen} == {"lora_norm", "base_norm"} and {n for _, n in seen} == {1}

    summed = []
    original_summed = weights.summed_linear_deferred

    def spy_summed(*args):
        summed.append(torch.get_num_threads())
        return original_summed(*args)

    monkeypatch.setattr(weights, "summed_linear_deferred", spy_summed)
    out = analysis.weights_of(added, rows, lambda key: base, None, [1 << 20], {})
    assert summed == [1] and torch.get_num_threads() == two_threads
    assert [w["key"] for w in out] == ["a.weight", "b.weight"]


def test_the_thread_count_is_restored_when_the_analysis_raises(monkeypatch, two_threads):
    def boom(*args):
        raise RuntimeError("boom")

    monkeypatch.setattr(analysis, "block_of", boom)
    with pytest.raises(RuntimeError):
        analysis.patch_rows({"a.weight": [lora_entry(1)]})
    assert torch.get_num_threads() == two_threads
    monkeypatch.setattr(weights, "cheap_linear", boom)
    with pytest.raises(RuntimeError):
        weights.weight_rows(
            {"a.weight": [lora_entry(1), lora_entry(2)]},
            {"a.weight": [{"applied": True, "delta_norm": 1.0}] * 2},
            None,
            None,
            None,
            {},
        )
    assert torch.get_num_threads() == two_threads


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_frobenius_norm_in_one_pass_or_widened_matches_float64_across_chunks(monkeypatch, dtype):
    t = rand(37, 41, seed=4, dtype=dtype)
    reference = float(torch.linalg.vector_norm(t.double()))
    whole = norms.frobenius_norm(t)
    monkeypatch.setattr(norms, "CHUNK_ELEMENTS", 100)  # 16 chunks, the last one short
    chunked = norms.frobenius_norm(t)
    assert whole == pytest.approx(reference, rel=1e-6) and chunked == pytest.approx(reference, rel=1e-6)
    assert torch.equal(t, rand(37, 41, seed=4, dtype=dtype))  # the weight itself is never squared


def test_float32_squares_beyond_float32_range_fall_back_to_float64():
    t = torch.tensor([3e20, -4e20, 0.0], dtype=torch.float32)
    reference = float(torch.linalg.vector_norm(t.double()))  # 3e20 and 4e20 round in float32
    assert norms.frobenius_norm(t) == pytest.approx(reference, rel=1e-12)

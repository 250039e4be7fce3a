"""What a VAE chain run is given and gives back (monitors/vae/outcomes.py): the default free-memory
reader and cleanup on stand-in torch.cuda calls, an attempt as data, the reclaimed total and the
plans."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from monitors.probes.fake import GiB, fake_probes
from monitors.vae import outcomes
from monitors.vae.geometry import Prediction
from monitors.vae.outcomes import (
    OK,
    OOM,
    Attempt,
    ChainResult,
    is_out_of_memory,
    read_free_memory,
    release_memory,
    strategy_plan,
)

MiB = 1024**2


def stand_in_cuda(monkeypatch, free, allocated, reserved, current=0):
    seen = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: seen.append(index) or (free, 100 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda index: allocated)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda index: reserved)
    return seen


def test_cuda_free_memory_adds_the_cached_blocks_of_the_named_device(monkeypatch):
    seen = stand_in_cuda(monkeypatch, free=10 * GiB, allocated=GiB, reserved=GiB + 3 * MiB, current=5)
    probes = fake_probes("2 GPUs")
    reading = read_free_memory("cuda:1", probes=probes)
    assert reading.free_bytes == 10 * GiB + 3 * MiB and seen == [1]
    assert reading.source.startswith("torch.cuda.mem_get_info + cached (no memory manager)")
    assert reading.manager is None


def test_cuda_without_an_index_is_the_current_device(monkeypatch):
    seen = stand_in_cuda(monkeypatch, free=10 * GiB, allocated=0, reserved=0, current=1)
    assert read_free_memory("cuda", probes=fake_probes("2 GPUs")).free_bytes == 10 * GiB
    assert seen == [1]


def test_cached_blocks_are_never_negative(monkeypatch):
    stand_in_cuda(monkeypatch, free=10 * GiB, allocated=2 * GiB, reserved=GiB)
    assert read_free_memory("cuda:0", probes=fake_probes("1 GPU")).free_bytes == 10 * GiB


def test_cpu_free_memory_is_the_available_ram(monkeypatch):
    import psutil

    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"available": 1234.0})())
    assert read_free_memory("cpu") == 1234
    assert read_free_memory(torch.device("cpu")) == 1234
    assert read_free_memory("mps") is None


@pytest.mark.parametrize(
    "available, initialized, emptied", [(True, True, 1), (True, False, 0), (False, True, 0)]
)
def test_release_memory_empties_the_cache_only_where_cuda_is_in_use(
    monkeypatch, available, initialized, emptied
):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(1))
    monkeypatch.setattr(outcomes.gc, "collect", lambda: calls.append("gc"))
    release_memory()
    assert calls == ["gc"] + [1] * emptied


def test_release_memory_survives_a_failing_empty_cache(monkeypatch):
    def broken():
        raise RuntimeError("driver gone")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", broken)
    release_memory()


def test_an_attempt_as_plain_data():
    prediction = Prediction("direct", "cuda:0", 1, 2, 3, 4, True)
    data = Attempt("direct", OOM, notes=("a", "b"), prediction=prediction).to_dict()
    assert data["notes"] == ["a", "b"] and data["prediction"] == prediction.to_dict()
    assert data["strategy"] == "direct" and data["outcome"] == OOM and data["caught_by_comfyui"] is False
    assert Attempt("tiled", OK).to_dict()["prediction"] is None


def test_reclaimed_bytes_are_summed_over_the_attempts_that_know():
    result = ChainResult(requested="auto")
    assert result.cleanup_reclaimed_bytes is None
    result.attempts = [Attempt("direct", OOM, cleanup_reclaimed_bytes=0), Attempt("tiled", OK)]
    assert result.cleanup_reclaimed_bytes == 0
    result.attempts.append(Attempt("cpu", OOM, cleanup_reclaimed_bytes=-5))
    result.attempts.append(Attempt("dummy", OOM, cleanup_reclaimed_bytes=12))
    assert result.cleanup_reclaimed_bytes == 7


def test_out_of_memory_texts_are_matched_in_any_case():
    assert is_out_of_memory(RuntimeError("CUDA Out Of Memory. Tried to allocate"))
    assert not is_out_of_memory(Exception("out of memory"))  # only a RuntimeError's text counts


def test_dummy_cannot_be_asked_for_and_the_error_lists_the_choices():
    with pytest.raises(ValueError, match="unknown strategy 'dummy': choose one of auto, direct, tiled, cpu"):
        strategy_plan("dummy")


def test_an_attempt_is_frozen():
    attempt = Attempt("direct", OK)
    with pytest.raises(dataclasses.FrozenInstanceError):
        attempt.outcome = OOM


def test_an_error_message_is_kept_to_its_first_1000_characters():
    from monitors.vae.chain import run_chain
    from tests.unit.test_vae_chain import FakeVAE, options, pixels

    result = run_chain(FakeVAE(fail={"direct": RuntimeError("x" * 1500)}), pixels(), options())
    assert result.attempts[0].error_message == "x" * 1000

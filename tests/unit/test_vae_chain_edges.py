"""The VAE chain's edges (monitors/vae/chain.py): which peaks an attempt keeps, the uncalibrated
skip exactly at its bound, when a prediction held, and the monitor's own failures recorded
without changing the encode."""

from __future__ import annotations

import pytest

from monitors.engine.span import Peak, SpanResult
from monitors.probes.fake import fake_probes
from monitors.probes.readings import Snapshot
from monitors.vae.chain import _held, _peaks, _surely_too_large, run_chain
from monitors.vae.free_memory import FreeMemory
from monitors.vae.geometry import Prediction
from monitors.vae.outcomes import ERROR, OK, OOM, SKIPPED, ChainOptions
from tests.unit.test_vae_chain import CUDA_OOM, FakeMemory, FakeVAE, cpu_encode, options, outcomes, pixels


def own_options(**kwargs):
    kwargs.setdefault("cleanup", lambda: None)
    return ChainOptions(cpu_encode=cpu_encode, probes=fake_probes("1 GPU"), **kwargs)


def span_result(peaks):
    return SpanResult("s", 0.0, 1.0, Snapshot(0.0, 0.0), Snapshot(1.0, 1.0), peaks=peaks, changes={})


PEAKS = {
    "process_rss_bytes": Peak(10.5, 0.25, "sampled"),
    "cuda:0.allocated_bytes": Peak(20.0, 0.5, "torch"),
    "cuda:0.reserved_bytes": Peak(None, None, "torch"),
    "cuda:1.allocated_bytes": Peak(40.0, 0.75, "torch"),
}


def test_peaks_of_a_gpu_attempt_by_label():
    assert _peaks(span_result(PEAKS), "cuda") == {
        "rss": {"value": 10, "at_s": 0.25, "metric": "process_rss_bytes"},
        "gpu_allocated": {"value": 20, "at_s": 0.5, "metric": "cuda:0.allocated_bytes"},
    }
    assert _peaks(span_result(PEAKS), "cuda:1")["gpu_allocated"] == {
        "value": 40,
        "at_s": 0.75,
        "metric": "cuda:1.allocated_bytes",
    }


@pytest.mark.parametrize("device", ["cpu", None, "mps"])
def test_peaks_of_an_attempt_off_the_gpu_are_rss_only(device):
    assert list(_peaks(span_result(PEAKS), device)) == ["rss"]


def test_no_span_no_peaks():
    assert _peaks(None, "cuda:0") == {}
    assert _peaks(span_result({}), "cuda:0") == {}


def prediction(estimate, free, weights=0, fits=False):
    return Prediction("direct", "cuda:0", estimate, weights, None, free, fits)


def test_uncalibrated_too_large_only_when_even_half_the_estimate_exceeds_the_free_memory():
    assert _surely_too_large(prediction(200, 100)) is False  # half fits exactly
    assert _surely_too_large(prediction(202, 100)) is True
    assert _surely_too_large(prediction(100, 60, weights=10)) is False  # 50 + 10 = 60
    assert _surely_too_large(prediction(100, 59, weights=10)) is True
    assert _surely_too_large(prediction(100, 59, weights=None)) is False
    assert _surely_too_large(prediction(None, 1)) is False
    assert _surely_too_large(prediction(100, None)) is False


def test_a_prediction_held_when_fitting_matched_running_out():
    fits, too_large = prediction(1, 1, fits=True), prediction(1, 1, fits=False)
    assert _held(fits, OK, ()) is True
    assert _held(fits, OOM, ()) is False
    assert _held(fits, OK, ("retrying with tiled",)) is False  # the VAE ran out and retried
    assert _held(too_large, OOM, ()) is True
    assert _held(too_large, OK, ()) is False
    assert _held(too_large, OK, ("retrying",)) is True


def test_no_verdict_without_a_prediction_or_for_an_attempt_that_did_not_run():
    assert _held(None, OK, ()) is None
    assert _held(prediction(1, 1, fits=None), OK, ()) is None
    assert _held(prediction(1, 1, fits=True), ERROR, ()) is None
    assert _held(prediction(1, 1, fits=True), SKIPPED, ()) is None


def test_nothing_could_run_is_said():
    result = run_chain(FakeVAE(), pixels(), options(strategy="cpu", cpu_encode=None))
    assert outcomes(result) == [("cpu", SKIPPED), ("dummy", SKIPPED)]
    assert result.error_kind == "out_of_memory"
    assert result.error.startswith("VAE encode ran out of memory with every strategy: none could run.")


def test_every_oom_is_listed_with_its_message():
    fail = {s: CUDA_OOM(f"CUDA out of memory in {s}") for s in ("direct", "tiled", "cpu")}
    result = run_chain(FakeVAE(fail=fail), pixels(), options())
    assert result.error.startswith(
        "VAE encode ran out of memory with every strategy: direct (CUDA out of memory in direct); "
        "tiled (CUDA out of memory in tiled); cpu (CUDA out of memory in cpu). "
    )


def test_cleanup_reclaimed_is_free_after_minus_before_per_attempt():
    memory = FakeMemory(free=4 * 1024**3, reclaim=1000)
    fail = {"direct": CUDA_OOM("CUDA out of memory")}
    result = run_chain(FakeVAE(fail=fail), pixels(), options(memory))
    assert [a.cleanup_reclaimed_bytes for a in result.attempts] == [1000, None]
    assert memory.cleanups == 1
    assert (result.free_before_bytes, result.free_after_bytes) == (4 * 1024**3, 4 * 1024**3 + 1000)


def test_the_memory_manager_of_the_first_reading_is_kept():
    # cuda:0 is read for the direct and tiled predictions, then before and after the encode
    managers = iter([None, None, "dynamic", "estimate-based"])

    def read(device):
        return FreeMemory(100, next(managers, None) if device == "cuda:0" else None)

    result = run_chain(FakeVAE(), pixels(), own_options(free_memory=read))
    assert result.free_memory_manager == "dynamic"


def test_failures_of_the_monitor_are_recorded_and_the_encode_goes_on():
    def broken_free(device):
        raise OSError("no reading")

    def broken_cleanup():
        raise RuntimeError("cleanup broke")

    def broken_snapshot():
        raise ValueError("snapshot broke")

    vae = FakeVAE(fail={"direct": CUDA_OOM("CUDA out of memory")})
    result = run_chain(
        vae,
        pixels(),
        own_options(free_memory=broken_free, cleanup=broken_cleanup, memory_snapshot=broken_snapshot),
    )
    assert outcomes(result) == [("direct", OOM), ("tiled", OK)]
    errors = result.monitor_errors
    assert "free memory: OSError: no reading" in errors
    assert "cleanup: RuntimeError: cleanup broke" in errors
    assert "memory snapshot: ValueError: snapshot broke" in errors
    assert result.free_before_bytes is None and result.attempts[0].cleanup_reclaimed_bytes is None
    assert result.attempts[0].memory_snapshot is None


def test_a_memory_snapshot_is_taken_only_when_an_attempt_runs_out():
    taken = []
    vae = FakeVAE(fail={"direct": CUDA_OOM("CUDA out of memory")})
    result = run_chain(vae, pixels(), options(memory_snapshot=lambda: taken.append(1) or {"loaded": 2}))
    assert taken == [1]
    assert result.attempts[0].memory_snapshot == {"loaded": 2} and result.attempts[1].memory_snapshot is None


def test_a_vae_without_a_device_has_no_free_memory_reading():
    vae = FakeVAE()
    vae.device = None
    result = run_chain(vae, pixels(), options())
    assert result.device is None and result.free_before_bytes is None and result.free_after_bytes is None
    assert result.strategy_used == "direct"

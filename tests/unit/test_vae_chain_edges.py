"""The VAE chain's edges (monitors/vae/chain.py): which peaks an attempt keeps, the uncalibrated
skip exactly at its bound, when a prediction held, and the monitor's own failures recorded
without changing the encode."""

from __future__ import annotations

import pytest

from monitors.engine.span import Peak, SpanResult
from monitors.probes.fake import GiB, fake_probes
from monitors.probes.readings import Snapshot
from monitors.vae import chain as chain_module
from monitors.vae import comfy_retry as comfy_retry_module
from monitors.vae.calibration import MEASURED, RAN_OUT, CalibrationTable
from monitors.vae.chain import _held, _peaks, _surely_too_large, run_chain
from monitors.vae.comfy_retry import RETRY_STRATEGY
from monitors.vae.free_memory import FreeMemory
from monitors.vae.geometry import Prediction
from monitors.vae.outcomes import ERROR, OK, OOM, SKIPPED, ChainOptions
from monitors.vae.tiles import TileSettings
from tests.unit.test_vae_calibration import DIRECT_ESTIMATE, KEY, MeasuredVAE
from tests.unit.test_vae_calibration import chain as calibration_chain
from tests.unit.test_vae_chain import CUDA_OOM, FakeMemory, FakeVAE, cpu_encode, options, outcomes, pixels
from tests.unit.test_vae_comfy_retry import ComfyLikeVAE
from tests.unit.test_vae_comfy_retry import chain as retry_chain


def own_options(**kwargs):
    kwargs.setdefault("cleanup", lambda: None)
    return ChainOptions(cpu_encode=cpu_encode, probes=fake_probes("1 GPU"), **kwargs)


MiB = 1024**2


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


def test_a_vae_without_a_device_says_why_it_has_no_calibration():
    vae = FakeVAE()
    vae.device = None
    result = run_chain(
        vae, pixels(), own_options(free_memory=lambda device: None, calibration=CalibrationTable())
    )
    assert result.predictions["direct"].calibration_unknown_reason == "the VAE has no device"
    assert result.monitor_errors == [] and result.strategy_used == "direct"


def test_a_skipped_attempt_carries_its_prediction():
    vae = FakeVAE(bytes_per_pixel=100_000)
    result = run_chain(
        vae, pixels(1, 256, 256), options(FakeMemory(free=2 * GiB), tiles=TileSettings(tile_size=64))
    )
    skipped, tiled = result.attempts
    assert skipped.outcome == SKIPPED and skipped.prediction is result.predictions["direct"]
    assert tiled.prediction is result.predictions["tiled"]


def test_the_error_names_the_strategy_that_failed():
    vae = FakeVAE(fail={"direct": CUDA_OOM("CUDA out of memory"), "tiled": RuntimeError("boom")})
    result = run_chain(vae, pixels(), options())
    assert result.error == "VAE encode (tiled) failed with RuntimeError: boom"


def test_reclaimed_is_unknown_when_the_reading_before_cleanup_failed():
    state = {"ran_out": False, "reads_after": 0}

    class Failing(FakeVAE):
        def _run(self, strategy, pixels):
            if strategy == "direct":
                state["ran_out"] = True
            return super()._run(strategy, pixels)

    def read(device):
        if device == "cuda:0" and state["ran_out"]:
            state["reads_after"] += 1
            return None if state["reads_after"] == 1 else 5 * GiB
        return 4 * GiB

    vae = Failing(fail={"direct": CUDA_OOM("CUDA out of memory")})
    result = run_chain(vae, pixels(), own_options(free_memory=read))
    assert outcomes(result) == [("direct", OOM), ("tiled", OK)]
    assert result.attempts[0].cleanup_reclaimed_bytes is None and result.free_after_bytes == 5 * GiB


class FakeClock:
    """time.monotonic of the chain and of ComfyUI's retry watch: one second per call."""

    def __init__(self, start=100.0):
        self.now = start

    def monotonic(self):
        self.now += 1.0
        return self.now


def test_an_attempts_duration_is_end_minus_start(monkeypatch):
    monkeypatch.setattr(chain_module, "time", FakeClock())
    result = run_chain(FakeVAE(), pixels(), options())
    assert result.attempts[0].duration_s == 1.0


def test_comfyuis_retry_lasts_from_its_tilers_call_to_the_end(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(chain_module, "time", clock)
    monkeypatch.setattr(comfy_retry_module, "time", clock)
    result = retry_chain(ComfyLikeVAE())
    direct, retry = result.attempts
    assert (direct.outcome, retry.strategy, retry.outcome) == (OOM, RETRY_STRATEGY, OK)
    # started 101, the tiler called 102, ended 103
    assert (direct.duration_s, retry.duration_s) == (2.0, 1.0)


# -- what an attempt teaches the calibration -------------------------------------------------------

MEASURED_KEY_CPU = ("GrowingVAE", "cpu", "float32")


def cpu_chain(table, rss_rise, fail=None):
    probes = fake_probes("1 GPU")

    class GrowingVAE(FakeVAE):
        def _run(self, strategy, pixels):
            probes.host.set_rss(probes.host.rss_bytes + rss_rise)
            return super()._run(strategy, pixels)

    vae = GrowingVAE(device="cpu", size=0, fail=fail)
    memory = FakeMemory()
    options = ChainOptions(
        free_memory=memory.read, cleanup=memory.cleanup, probes=probes, calibration=table, allow_dummy=True
    )
    return run_chain(vae, pixels(1, 64, 64), options)


def test_an_encode_on_the_cpu_teaches_its_rss_rise_exactly():
    table = CalibrationTable()
    result = cpu_chain(table, rss_rise=2_048_000)
    assert outcomes(result) == [("direct", OK)]
    (sample,) = table.samples(MEASURED_KEY_CPU)
    estimate = 1000 * 64 * 64
    assert (sample.strategy, sample.kind, sample.ratio) == ("direct", MEASURED, 2_048_000 / estimate)


def test_an_attempt_that_failed_otherwise_teaches_nothing():
    table = CalibrationTable()
    result = cpu_chain(table, rss_rise=2_048_000, fail={"direct": RuntimeError("not memory")})
    assert outcomes(result) == [("direct", ERROR)]
    assert table.keys() == [] and result.monitor_errors == []


def test_a_gpu_without_an_index_teaches_from_cuda_0():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    vae = MeasuredVAE(probes, {"direct": GiB}, device="cuda")
    calibration_chain(vae, probes, 64 * GiB, table)
    (sample,) = table.samples(KEY)
    assert sample.ratio == GiB / DIRECT_ESTIMATE


def test_running_out_teaches_the_free_memory_less_the_weights_to_load():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    vae = MeasuredVAE(probes, {"direct": 512 * MiB}, size=100 * MiB)
    vae.fail["direct"] = CUDA_OOM("CUDA out of memory")
    result = calibration_chain(vae, probes, 8 * GiB, table, strategy="direct")
    assert outcomes(result)[0] == ("direct", OOM)
    ran_out = [s for s in table.samples(KEY) if s.kind == RAN_OUT]
    assert [s.ratio for s in ran_out] == [(8 * GiB - 100 * MiB) / DIRECT_ESTIMATE]

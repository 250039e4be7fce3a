"""`auto` against the VAE's own estimate calibrated by what earlier attempts measured (fakes only)."""

from __future__ import annotations

import pytest

from monitors.probes.fake import GiB, fake_probes
from monitors.vae.calibration import (
    MEASURED,
    PROCESS_TABLE,
    RAN_OUT,
    SAFETY_MARGIN,
    CalibrationTable,
    calibration_key,
)
from monitors.vae.chain import run_chain
from monitors.vae.geometry import TileSettings
from monitors.vae.outcomes import OK, OOM, SKIPPED, ChainOptions
from monitors.vae.report import build_step
from tests.unit.test_vae_chain import CUDA_OOM, FakeMemory, FakeVAE, cpu_encode, outcomes, pixels

MiB = 1024**2
BYTES_PER_PIXEL = 100_000  # direct on 256x256: 6.1 GiB estimated; a 64-pixel tile: 391 MiB
DIRECT_ESTIMATE = BYTES_PER_PIXEL * 256 * 256
TILE_ESTIMATE = BYTES_PER_PIXEL * 64 * 64
TILES = TileSettings(tile_size=64)


class MeasuredVAE(FakeVAE):
    """Allocates `peaks[strategy]` bytes on the fake GPU while it encodes and frees them again,
    so each attempt's nested span measures that peak. No weights (size 0) unless given."""

    def __init__(self, probes, peaks, size=0, **kwargs):
        super().__init__(bytes_per_pixel=BYTES_PER_PIXEL, size=size, **kwargs)
        self.probes, self.peaks = probes, dict(peaks)

    def _run(self, strategy, pixels):
        peak = self.peaks.get(strategy, 0)
        self.probes.torch.allocate(0, peak)
        self.probes.torch.devices[0]["allocated_bytes"] -= peak
        return super()._run(strategy, pixels)


def chain(vae, probes, free, table, **kwargs):
    memory = FakeMemory(free=free)
    options = ChainOptions(
        free_memory=memory.read,
        cleanup=memory.cleanup,
        cpu_encode=cpu_encode,
        probes=probes,
        tiles=TILES,
        calibration=table,
        **kwargs,
    )
    return run_chain(vae, pixels(1, 256, 256), options)


KEY = ("MeasuredVAE", "cuda", "float32")


# -- without calibration --------------------------------------------------------------------------


def test_first_encode_tries_direct_when_the_estimate_is_within_twice_the_free_memory():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    vae = MeasuredVAE(probes, {"direct": 1 * GiB})
    result = chain(vae, probes, 4 * GiB, table)  # estimate 6.1 GiB: over free, under twice free
    assert outcomes(result) == [("direct", OK)]
    direct = result.attempts[0].prediction
    assert direct.fits is False and result.attempts[0].prediction_held is False  # honest: it said no
    assert direct.calibration_ratio is None and direct.calibrated_estimate_bytes is None
    assert direct.calibration_unknown_reason == (
        "no earlier encode of MeasuredVAE on cuda (float32) measured in this process"
    )
    assert direct.needed_bytes == DIRECT_ESTIMATE  # the raw estimate, no weights


def test_first_encode_goes_straight_to_tiles_when_even_half_the_estimate_cannot_fit():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    vae = MeasuredVAE(probes, {"tiled": 100 * MiB})
    result = chain(vae, probes, 2 * GiB, table)
    assert outcomes(result) == [("direct", SKIPPED), ("tiled", OK)]
    reason = result.attempts[0].reason
    assert (
        reason.startswith("predicted not to fit") and "uncalibrated: even 0.5 of the VAE's estimate" in reason
    )


def test_without_a_table_the_raw_estimate_decides():
    probes = fake_probes("1 GPU")
    vae = MeasuredVAE(probes, {"direct": 1 * GiB})
    result = chain(vae, probes, 4 * GiB, None)
    assert outcomes(result) == [("direct", OK)]
    assert result.predictions["direct"].calibration_unknown_reason.startswith("calibration is off")


# -- learning -------------------------------------------------------------------------------------


def test_a_direct_success_calibrates_the_next_encode():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    first = chain(MeasuredVAE(probes, {"direct": 1 * GiB}), probes, 64 * GiB, table)
    assert outcomes(first) == [("direct", OK)]
    (sample,) = table.samples(KEY)
    assert (sample.strategy, sample.kind) == ("direct", MEASURED)
    assert sample.ratio == pytest.approx(GiB / DIRECT_ESTIMATE)
    # 2 GiB free: the raw estimate (6.1 GiB) is 3x that and would go straight to tiles; the
    # calibrated one (1 GiB x 1.2) fits, so direct runs, as ComfyUI's own encode would.
    second = chain(MeasuredVAE(probes, {"direct": 1 * GiB}), probes, 2 * GiB, table)
    assert outcomes(second) == [("direct", OK)]
    direct = second.attempts[0].prediction
    assert direct.estimate_bytes == DIRECT_ESTIMATE
    assert direct.calibration_ratio == pytest.approx(GiB / DIRECT_ESTIMATE)
    assert direct.calibration_margin == SAFETY_MARGIN
    assert direct.calibrated_estimate_bytes == pytest.approx(SAFETY_MARGIN * GiB, abs=1)
    assert direct.needed_bytes == direct.calibrated_estimate_bytes
    assert direct.fits is True and second.attempts[0].prediction_held is True
    assert direct.calibration_source.startswith(
        "calibrated from 1 earlier encode attempt of MeasuredVAE on cuda (float32) in this process"
    )
    assert direct.calibration_unknown_reason is None
    # The tiled prediction is calibrated with the same ratio.
    assert second.predictions["tiled"].calibrated_estimate_bytes == pytest.approx(
        TILE_ESTIMATE * GiB / DIRECT_ESTIMATE * SAFETY_MARGIN, abs=1
    )


def test_calibrated_skip_says_where_the_calibration_came_from():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    table.record(KEY, 0.5, "direct")  # earlier encodes needed half the estimate: 3.7 GiB with margin
    result = chain(MeasuredVAE(probes, {}), probes, 3 * GiB, table)
    assert outcomes(result) == [("direct", SKIPPED), ("tiled", OK)]
    reason = result.attempts[0].reason
    assert "3.0 GiB free on cuda:0" in reason
    assert "calibrated from 1 earlier encode attempt of MeasuredVAE on cuda (float32)" in reason
    assert "up to 0.5, x1.2 margin" in reason


def test_weights_loaded_by_an_attempt_are_not_counted_as_its_need():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    # 100 MiB of weights to load (no patcher: nothing loaded yet) + 1 GiB of activations.
    vae = MeasuredVAE(probes, {"direct": 100 * MiB + GiB}, size=100 * MiB)
    chain(vae, probes, 64 * GiB, table)
    (sample,) = table.samples(KEY)
    assert sample.ratio == pytest.approx(GiB / DIRECT_ESTIMATE)


def test_tiled_attempts_calibrate_from_the_estimate_of_one_tile():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    vae = MeasuredVAE(probes, {"tiled": TILE_ESTIMATE // 4})
    result = chain(vae, probes, 64 * GiB, table, strategy="tiled")
    assert outcomes(result) == [("tiled", OK)]
    (sample,) = table.samples(KEY)
    assert (sample.strategy, sample.kind, sample.ratio) == ("tiled", MEASURED, pytest.approx(0.25))
    # A quarter of the raw estimate (x1.2) fits in 2 GiB: auto tries direct instead of tiling.
    again = chain(MeasuredVAE(probes, {}), probes, 2 * GiB, table)
    assert outcomes(again) == [("direct", OK)]
    assert again.predictions["direct"].calibration_ratio == pytest.approx(0.25)


def test_an_out_of_memory_attempt_teaches_a_lower_bound_and_the_largest_ratio_wins():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    table.record(KEY, 0.1, "direct")  # an earlier, smaller measurement
    vae = MeasuredVAE(probes, {"direct": 512 * MiB, "tiled": TILE_ESTIMATE // 4})
    vae.fail["direct"] = CUDA_OOM("CUDA out of memory")
    result = chain(vae, probes, 2 * GiB, table)  # 0.1 x 1.2 of 6.1 GiB fits: direct is tried, runs out
    assert outcomes(result) == [("direct", OOM), ("tiled", OK)]
    assert result.attempts[0].prediction.fits is True and result.attempts[0].prediction_held is False
    samples = table.samples(KEY)
    assert [(s.strategy, s.kind) for s in samples] == [
        ("direct", MEASURED),
        ("direct", RAN_OUT),
        ("tiled", MEASURED),
    ]
    # Ran out with 2 GiB free: the need exceeded 2 GiB, more than the 512 MiB it reached.
    assert samples[1].ratio == pytest.approx(2 * GiB / DIRECT_ESTIMATE)
    # kept with the estimate and the free memory it was tried with (what a precedent compares)
    assert (samples[1].estimate_bytes, samples[1].free_bytes) == (DIRECT_ESTIMATE, 2 * GiB)
    calibration = table.lookup(KEY)
    # The failed attempt is a lower bound, never a measured ratio: the measured ones stay apart.
    assert calibration.ratio == pytest.approx(0.25)  # the tiled measurement
    assert calibration.lower_bound_ratio == pytest.approx(2 * GiB / DIRECT_ESTIMATE)
    assert calibration.factor == pytest.approx(2 * GiB / DIRECT_ESTIMATE)  # the bound decides, no margin
    assert (calibration.n_samples, calibration.n_ran_out) == (3, 1)
    assert (
        "1 ran out of memory: the need is at least 0.328 x the estimate (a lower bound" in calibration.source
    )
    # The same encode again goes straight to tiles: no second failed attempt.
    again = chain(MeasuredVAE(probes, {}), probes, 2 * GiB, table)
    assert outcomes(again) == [("direct", SKIPPED), ("tiled", OK)]
    direct = again.predictions["direct"]
    assert direct.calibration_ratio == pytest.approx(0.25)
    assert direct.calibration_lower_bound_ratio == pytest.approx(2 * GiB / DIRECT_ESTIMATE)
    assert direct.needed_bytes == pytest.approx(2 * GiB, abs=1) and direct.fits is False  # need > bound


def test_a_lower_bound_alone_is_no_measurement_and_never_gets_a_margin():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    table.record(KEY, 0.5, "direct", RAN_OUT, DIRECT_ESTIMATE, DIRECT_ESTIMATE // 2)
    calibration = table.lookup(KEY)
    assert calibration.ratio is None and calibration.lower_bound_ratio == 0.5 and calibration.factor == 0.5
    assert "measured" not in calibration.source and "a lower bound, not a measurement" in calibration.source
    # With exactly the bound free the need (which exceeded it) does not fit; with more it may.
    at_bound = chain(MeasuredVAE(probes, {}), probes, DIRECT_ESTIMATE // 2, table)
    prediction = at_bound.predictions["direct"]
    assert prediction.needed_bytes == DIRECT_ESTIMATE // 2 and prediction.fits is False
    assert prediction.calibration_ratio is None and prediction.calibration_margin is None
    assert prediction.calibration_lower_bound_ratio == 0.5
    assert outcomes(at_bound)[0] == ("direct", SKIPPED)
    more = chain(MeasuredVAE(probes, {}), probes, DIRECT_ESTIMATE // 2 + 1, table)
    assert more.predictions["direct"].fits is True and outcomes(more)[0] == ("direct", OK)


def test_a_measured_ratio_with_margin_above_the_bound_decides_with_equal_fitting():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    table.record(KEY, 0.5, "direct")
    table.record(KEY, 0.25, "direct", RAN_OUT, DIRECT_ESTIMATE, DIRECT_ESTIMATE // 4)
    calibration = table.lookup(KEY)
    assert calibration.factor == pytest.approx(0.5 * SAFETY_MARGIN)
    needed = int(round(DIRECT_ESTIMATE * 0.5 * SAFETY_MARGIN))
    result = chain(MeasuredVAE(probes, {}), probes, needed, table)
    assert result.predictions["direct"].fits is True  # a measured need: equal fits


def test_comfyui_retrying_inside_direct_counts_as_running_out():
    import logging

    probes, table = fake_probes("1 GPU"), CalibrationTable()

    class RetryingVAE(MeasuredVAE):
        def encode(self, pixels):
            logging.getLogger().warning("Ran out of memory when regular VAE encoding, retrying with tiled")
            return super().encode(pixels)

    vae = RetryingVAE(probes, {"direct": 256 * MiB})
    chain(vae, probes, 4 * GiB, table, watch_log_messages=("Ran out of memory when regular VAE encoding",))
    (sample,) = table.samples(("RetryingVAE", "cuda", "float32"))
    assert sample.kind == RAN_OUT and sample.ratio == pytest.approx(4 * GiB / DIRECT_ESTIMATE)


def test_nothing_measured_teaches_nothing():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    chain(MeasuredVAE(probes, {}), probes, 64 * GiB, table)  # no allocation seen
    assert table.keys() == []


def test_the_process_table_is_the_default_and_keys_by_the_model_inside_comfyuis_wrapper():
    probes = fake_probes("1 GPU")
    vae = MeasuredVAE(probes, {"direct": GiB})
    result = run_chain(vae, pixels(1, 256, 256), ChainOptions(free_memory=FakeMemory().read, probes=probes))
    assert result.strategy_used == "direct" and PROCESS_TABLE.keys() == [KEY]

    class WanVAE:
        pass

    vae.first_stage_model = WanVAE()
    assert calibration_key(vae, "cuda:1") == ("WanVAE", "cuda", "float32")
    assert calibration_key(vae, None) is None


# -- the table's bounds ---------------------------------------------------------------------------


def test_the_table_keeps_the_last_samples_per_key_and_the_most_recent_keys():
    table = CalibrationTable(max_keys=2, max_samples=3)
    table.record(("A", "cuda", "float16"), 5.0, "direct")
    for ratio in (0.1, 0.2, 0.3):
        table.record(("A", "cuda", "float16"), ratio, "direct")
    assert [s.ratio for s in table.samples(("A", "cuda", "float16"))] == [0.1, 0.2, 0.3]
    assert table.lookup(("A", "cuda", "float16")).ratio == 0.3  # the old 5.0 has aged out
    table.record(("B", "cuda", "float16"), 1.0, "direct")
    table.lookup(("A", "cuda", "float16"))  # A used again: B is now the least recent
    table.record(("C", "cpu", "float32"), 1.0, "tiled")
    assert table.keys() == [("A", "cuda", "float16"), ("C", "cpu", "float32")]
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        assert table.record(("A", "cuda", "float16"), bad, "direct") is False
    assert table.record(None, 1.0, "direct") is False


# -- the report -----------------------------------------------------------------------------------


def test_the_step_reports_the_raw_estimate_the_calibration_and_its_source():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    chain(MeasuredVAE(probes, {"direct": GiB}), probes, 64 * GiB, table)
    result = chain(MeasuredVAE(probes, {"direct": GiB}), probes, 2 * GiB, table)
    step = build_step("7", result)
    s = step.summary
    assert s["direct_estimate_bytes"] == DIRECT_ESTIMATE
    assert s["direct_calibration_ratio"] == pytest.approx(GiB / DIRECT_ESTIMATE)
    assert s["direct_needed_bytes"] == pytest.approx(SAFETY_MARGIN * GiB, abs=1)
    assert s["direct_calibration_source"].startswith(
        "calibrated from 1 earlier encode attempt of MeasuredVAE"
    )
    assert s["direct_predicted_to_fit"] is True and s["direct_prediction_held"] is True
    prediction = step.details["predictions"]["direct"]
    assert prediction["estimate_bytes"] == DIRECT_ESTIMATE
    assert prediction["calibrated_estimate_bytes"] == s["direct_needed_bytes"]
    assert prediction["calibration_margin"] == SAFETY_MARGIN
    uncalibrated = build_step(
        "8", chain(MeasuredVAE(probes, {}), probes, 64 * GiB, CalibrationTable())
    ).summary
    assert uncalibrated["direct_calibration_ratio"] is None
    assert uncalibrated["direct_calibration_source"].startswith("no earlier encode of MeasuredVAE")
    assert uncalibrated["direct_needed_bytes"] == uncalibrated["direct_estimate_bytes"] == DIRECT_ESTIMATE


def test_a_calibrated_skip_names_the_calibration_in_its_suggestion():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    table.record(KEY, 0.5, "direct")
    step = build_step("9", chain(MeasuredVAE(probes, {}), probes, 3 * GiB, table))
    (message,) = [f.message for f in step.findings if f.code == "direct_predicted_too_large"]
    assert message.startswith("direct would need 3.7 GiB, 3.0 GiB free: used tiled")
    assert "(calibrated from 1 earlier encode attempt of MeasuredVAE" in message


# -- precedents -----------------------------------------------------------------------------------


def test_an_encode_repeated_with_as_much_free_memory_follows_its_precedent_without_margin():
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    close = int(0.95 * 4 * GiB)  # survived close to the limit: x1.2 margin would say it cannot fit
    first = chain(MeasuredVAE(probes, {"direct": close}), probes, 4 * GiB, table)
    assert outcomes(first) == [("direct", OK)]
    again = chain(MeasuredVAE(probes, {"direct": close}), probes, 4 * GiB, table)
    assert outcomes(again) == [("direct", OK)]
    direct = again.predictions["direct"]
    assert direct.calibration_margin == 1.0 and direct.calibrated_estimate_bytes == pytest.approx(
        close, abs=1
    )
    assert direct.fits is True and again.attempts[0].prediction_held is True
    assert direct.calibration_source.startswith(
        "a direct encode of MeasuredVAE on cuda (float32) in this process finished with an estimate as large"
    )
    # With less free memory than the precedent had, the margin applies again: tiles.
    less = chain(MeasuredVAE(probes, {}), probes, 4 * GiB - 1, table)
    assert outcomes(less) == [("direct", SKIPPED), ("tiled", OK)]
    assert less.predictions["direct"].calibration_margin == SAFETY_MARGIN


def test_a_later_out_of_memory_with_as_much_free_memory_overrules_the_precedent():
    table = CalibrationTable()
    table.record(KEY, 0.4, "direct", MEASURED, DIRECT_ESTIMATE, 3 * GiB)
    calibration = table.lookup(KEY)
    assert calibration.precedent("direct", DIRECT_ESTIMATE, 3 * GiB).ratio == 0.4
    assert calibration.precedent("direct", DIRECT_ESTIMATE + 1, 3 * GiB) is None  # a larger input
    assert calibration.precedent("tiled", DIRECT_ESTIMATE, 3 * GiB) is None  # another strategy
    table.record(KEY, 0.5, "direct", RAN_OUT, DIRECT_ESTIMATE, 4 * GiB)
    assert table.lookup(KEY).precedent("direct", DIRECT_ESTIMATE, 3 * GiB) is None
    # With 5 GiB free the failure at 4 GiB does not contradict the success at 3 GiB.
    assert table.lookup(KEY).precedent("direct", DIRECT_ESTIMATE, 5 * GiB).ratio == 0.4


# -- precedent boundaries (each comparison at equality, and unknown figures) -----------------------

E, F = DIRECT_ESTIMATE, 3 * GiB


def _calibration(*samples):
    table = CalibrationTable()
    for ratio, kind, estimate, free in samples:
        table.record(KEY, ratio, "direct", kind, estimate, free)
    return table.lookup(KEY)


def test_a_precedent_at_exactly_the_same_estimate_and_free_memory_counts():
    calibration = _calibration((0.4, MEASURED, E, F))
    assert calibration.precedent("direct", E, F).ratio == 0.4
    assert calibration.precedent("direct", E + 1, F) is None  # a larger encode: no precedent
    assert calibration.precedent("direct", E, F - 1) is None  # less free memory: no precedent
    assert calibration.precedent("tiled", E, F) is None  # another strategy's attempt


def test_an_attempt_that_ran_out_with_exactly_as_much_free_memory_overrules_the_precedent():
    measured = (0.4, MEASURED, E, F // 2)
    assert _calibration(measured).precedent("direct", E, F).ratio == 0.4
    assert _calibration(measured, (0.5, RAN_OUT, E, F)).precedent("direct", E, F) is None  # equal both
    assert _calibration(measured, (0.5, RAN_OUT, E, F - 1)).precedent("direct", E, F).ratio == 0.4
    assert _calibration(measured, (0.5, RAN_OUT, E + 1, F)).precedent("direct", E, F).ratio == 0.4


def test_no_precedent_without_the_estimate_or_the_free_memory():
    calibration = _calibration((0.4, MEASURED, E, F), (0.5, RAN_OUT, 2 * E, F))
    assert calibration.precedent("direct", None, F) is None
    assert calibration.precedent("direct", E, None) is None
    assert _calibration((0.4, MEASURED, None, F)).precedent("direct", E, F) is None  # sample lacks it
    assert _calibration((0.4, MEASURED, E, None)).precedent("direct", E, F) is None


def test_the_largest_fitting_precedent_wins():
    calibration = _calibration((0.4, MEASURED, E, F), (0.6, MEASURED, 2 * E, F), (0.9, MEASURED, E // 2, F))
    assert calibration.precedent("direct", E, F).ratio == 0.6  # 0.9 encoded less: no precedent


def test_the_default_table_keeps_8_samples_per_key_and_32_keys():
    table = CalibrationTable()
    for i in range(9):
        assert table.record(KEY, 0.1 * (i + 1), "direct") is True
    assert [round(s.ratio, 1) for s in table.samples(KEY)] == [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    for i in range(32):
        table.record((f"M{i}", "cuda", "float32"), 0.5, "direct")
    assert len(table.keys()) == 32 and KEY not in table.keys()  # the least recently used went first


def test_record_says_whether_it_kept_a_sample():
    table = CalibrationTable()
    assert table.record(KEY, 0.5, "direct") is True
    assert table.record(None, 0.5, "direct") is False
    assert table.record(KEY, 0.0, "direct") is False and table.record(KEY, float("inf"), "direct") is False
    assert len(table.samples(KEY)) == 1


def test_samples_and_calibrations_handed_out_cannot_be_changed():
    import dataclasses

    table = CalibrationTable()
    table.record(KEY, 0.5, "direct", RAN_OUT, 10, 5)
    (sample,) = table.samples(KEY)
    calibration = table.lookup(KEY)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sample.ratio = 0.1
    with pytest.raises(dataclasses.FrozenInstanceError):
        calibration.lower_bound_ratio = 0.1


def test_a_failed_free_memory_reading_never_skips_direct_even_with_a_calibration():
    """Unknown free memory is no prediction: auto tries direct, calibrated or not, and says why."""
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    table.record(KEY, 0.5, "direct")

    def unreadable(device):
        raise RuntimeError("mem_get_info failed")

    options = ChainOptions(
        free_memory=unreadable, cpu_encode=cpu_encode, probes=probes, tiles=TILES, calibration=table
    )
    result = run_chain(MeasuredVAE(probes, {"direct": 1 * GiB}), pixels(1, 256, 256), options)
    assert outcomes(result) == [("direct", OK)]
    direct = result.attempts[0].prediction
    assert direct.fits is None and direct.free_bytes is None
    assert "mem_get_info failed" in direct.free_bytes_unknown_reason
    assert direct.calibration_ratio == pytest.approx(0.5)  # calibrated, yet nothing to hold it against


def test_a_cpu_fallback_reads_its_peaks_from_the_process_not_the_gpu():
    """The CPU attempt's peaks are the process's RSS: the GPU's allocations (held by the model
    the GPU attempts left) are no part of it."""
    probes, table = fake_probes("1 GPU"), CalibrationTable()
    probes.torch.allocate(0, 3 * GiB)  # resident on the GPU throughout
    fail = {"direct": CUDA_OOM("CUDA out of memory"), "tiled": CUDA_OOM("CUDA out of memory")}
    vae = MeasuredVAE(probes, {}, fail=fail)
    result = chain(vae, probes, 64 * GiB, table)
    assert outcomes(result)[-1] == ("cpu", OK)
    cpu_peaks = result.attempts[-1].peaks
    assert cpu_peaks and all(not peak["metric"].startswith("cuda") for peak in cpu_peaks.values()), cpu_peaks
    assert any(peak["metric"].startswith("cuda") for peak in result.attempts[0].peaks.values())

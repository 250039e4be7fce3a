"""The `vae_encode` step's figures (monitors/vae/report.py) from hand-made chain results and spans:
exact peaks, changes, ratios and free memory, the latent's geometry, the prediction summary, the
CPU's system-wide figures and the findings that go to the log."""

from __future__ import annotations

import logging

import pytest
import torch

from monitors.engine.span import Change, Peak, SpanResult
from monitors.probes.readings import GpuReading, Snapshot
from monitors.report import Finding, StepReport
from monitors.vae.geometry import Prediction
from monitors.vae.outcomes import OK, OOM, SKIPPED, Attempt, ChainResult
from monitors.vae.report import (
    CPU_FREE_MEMORY_REASON,
    build_step,
    build_vae_encode_step,
    driver_free_figures,
    geometry,
    latent_type,
    log_findings,
    memory_figures,
    n_pixels,
)

GiB = 1024**3


def span(peaks=None, changes=None, baseline_gpus=(), end_gpus=(), duration_s=2.0):
    return SpanResult(
        name="vae_encode",
        start_unix_s=0.0,
        duration_s=duration_s,
        baseline=Snapshot(0.0, 0.0, gpus=tuple(baseline_gpus)),
        end=Snapshot(duration_s, duration_s, gpus=tuple(end_gpus)),
        peaks=peaks or {},
        changes=changes or {},
    )


def gpu_span():
    return span(
        peaks={
            "process_rss_bytes": Peak(3000.0, 0.5, "sampled"),
            "cuda:1.allocated_bytes": Peak(600.0, 1.5, "torch"),
            "cuda:1.reserved_bytes": Peak(1000.0, 1.0, "torch"),
        },
        changes={
            "process_rss_bytes": Change.between(2000, 2500),
            "cuda:1.allocated_bytes": Change.between(200, 100),
            "cuda:1.reserved_bytes": Change(None, 900, None, None),
        },
        baseline_gpus=[GpuReading(1, nvml_total_bytes=10_000, nvml_used_bytes=4_000)],
        end_gpus=[GpuReading(1, nvml_total_bytes=10_000, nvml_used_bytes=7_000)],
    )


def test_latent_type_from_the_rank():
    assert [latent_type([0] * n) for n in (3, 4, 5, 6)] == ["other", "image", "video", "other"]


def test_geometry_of_a_video_latent():
    got = geometry([9, 64, 48, 3], {"shape": (1, 16, 3, 8, 6)})
    assert got == {
        "latent_type": "video",
        "latent_shape": [1, 16, 3, 8, 6],
        "input_frames": 9,
        "latent_frames": 3,
        "spatial_compression_ratio": 64.0,
        "temporal_compression_ratio": 3.0,
    }


def test_geometry_of_a_batch_of_videos_has_no_temporal_figure():
    got = geometry([9, 64, 48, 3], {"shape": [2, 16, 3, 8, 6]})
    assert got["latent_frames"] is None and got["temporal_compression_ratio"] is None


def test_geometry_of_an_image_latent_and_of_an_unknown_input():
    got = geometry([2, 64, 32, 3], {"shape": [2, 4, 8, 4]})
    assert got["spatial_compression_ratio"] == 64.0 and got["input_frames"] == 2
    assert got["latent_frames"] is None and got["temporal_compression_ratio"] is None
    unknown = geometry(None, {"shape": [2, 4, 8, 4]})
    assert unknown["input_frames"] is None and unknown["spatial_compression_ratio"] is None
    flat = geometry([2, 64, 32, 3], {"shape": [2, 4, 8]})
    assert flat["latent_type"] == "other" and flat["spatial_compression_ratio"] is None


def test_n_pixels_is_frames_times_height_times_width():
    assert n_pixels([2, 3, 5, 4]) == 30
    assert n_pixels([2, 3, 5]) == 30
    assert n_pixels([2, 3]) is None
    assert n_pixels([]) is None and n_pixels(None) is None
    assert n_pixels([2, 3.0, 5]) is None


def test_memory_figures_of_a_gpu_encode():
    result = ChainResult(requested="auto", device="cuda:1", span=gpu_span())
    result.free_before_bytes, result.free_after_bytes = 8000, 6000
    result.attempts = [Attempt("direct", OOM, cleanup_reclaimed_bytes=100), Attempt("tiled", OK)]
    assert memory_figures(result) == {
        "peak_rss_bytes": 3000,
        "peak_rss_at_s": 0.5,
        "rss_peak_increase_bytes": 1000,
        "rss_change_bytes": 500,
        "rss_change_pct": 25.0,
        "peak_gpu_allocated_bytes": 600,
        "peak_gpu_allocated_at_s": 1.5,
        "gpu_allocated_peak_increase_bytes": 400,
        "gpu_allocated_change_bytes": -100,
        "gpu_allocated_change_pct": -50.0,
        "peak_gpu_reserved_bytes": 1000,
        "peak_gpu_reserved_at_s": 1.0,
        "gpu_reserved_peak_increase_bytes": None,
        "gpu_reserved_change_bytes": None,
        "gpu_reserved_change_pct": None,
        "gpu_allocated_reserved_ratio": 0.6,
        "gpu_driver_free_before_bytes": 6000,
        "gpu_driver_free_after_bytes": 3000,
        "gpu_driver_free_change_bytes": -3000,
        "free_memory_before_bytes": 8000,
        "free_memory_after_bytes": 6000,
        "free_memory_change_bytes": -2000,
        "free_memory_change_pct": -25.0,
        "cleanup_reclaimed_bytes": 100,
    }


def test_a_device_without_an_index_is_cuda_0():
    s = span(
        peaks={
            "cuda:0.allocated_bytes": Peak(5.0, 0.1, "torch"),
            "cuda:0.reserved_bytes": Peak(None, None, "x"),
        },
        baseline_gpus=[GpuReading(0, nvml_total_bytes=10, nvml_used_bytes=1)],
    )
    figures = memory_figures(ChainResult(requested="auto", device="cuda", span=s))
    assert figures["peak_gpu_allocated_bytes"] == 5
    assert figures["peak_gpu_reserved_bytes"] is None and figures["peak_gpu_reserved_at_s"] is None
    assert figures["gpu_allocated_reserved_ratio"] is None
    assert figures["gpu_driver_free_before_bytes"] == 9 and figures["gpu_driver_free_after_bytes"] is None
    assert figures["gpu_driver_free_change_bytes"] is None
    assert figures["free_memory_change_bytes"] is None and figures["free_memory_change_pct"] is None


def test_a_peak_not_read_leaves_its_figures_unknown():
    s = span(changes={"process_rss_bytes": Change.between(0, 10)})
    figures = memory_figures(ChainResult(requested="auto", device="mps", span=s))
    assert figures["peak_rss_bytes"] is None and figures["peak_rss_at_s"] is None
    assert figures["rss_peak_increase_bytes"] is None
    assert figures["rss_change_bytes"] == 10 and figures["rss_change_pct"] is None  # from 0
    assert "peak_gpu_allocated_bytes" not in figures and "gpu_allocated_reserved_ratio" not in figures


def test_free_memory_on_the_cpu_is_no_figure_of_the_encode():
    result = ChainResult(requested="auto", device="cpu", span=span())
    result.free_before_bytes, result.free_after_bytes = 8000, 6000
    figures = memory_figures(result)
    assert figures["free_memory_before_bytes"] is None and figures["free_memory_after_bytes"] is None
    assert figures["free_memory_change_bytes"] is None and figures["free_memory_change_pct"] is None
    assert figures["gpu_driver_free_before_bytes"] is None
    step = build_step("1", result)
    assert step.details["free_memory_unknown_reason"] == CPU_FREE_MEMORY_REASON
    assert step.details["system_available_memory"] == {
        "before_bytes": 8000,
        "after_bytes": 6000,
        "change_bytes": -2000,
        "note": "system-wide: includes every other process",
    }
    result.free_after_bytes = None
    assert build_step("1", result).details["system_available_memory"]["change_bytes"] is None


def test_no_span_no_memory_figures_and_free_change_needs_both_readings():
    assert memory_figures(ChainResult(requested="auto", device="cuda:0")) == {}
    result = ChainResult(
        requested="auto", device="cuda:0", span=span(), free_before_bytes=0, free_after_bytes=5
    )
    figures = memory_figures(result)
    assert figures["free_memory_change_bytes"] == 5 and figures["free_memory_change_pct"] is None
    result.free_before_bytes = None
    assert memory_figures(result)["free_memory_change_bytes"] is None
    details = build_step("1", ChainResult(requested="auto", device="cuda:0")).details
    assert details["span"] is None and details["memory"] is None
    assert "free_memory_unknown_reason" not in details


def test_driver_free_needs_both_nvml_figures_of_that_gpu():
    other = span(baseline_gpus=[GpuReading(0, nvml_total_bytes=10, nvml_used_bytes=1)])
    assert driver_free_figures(other, "cuda:1")["gpu_driver_free_before_bytes"] is None
    no_used = span(baseline_gpus=[GpuReading(1, nvml_total_bytes=10)])
    assert driver_free_figures(no_used, "cuda:1")["gpu_driver_free_before_bytes"] is None
    no_total = span(baseline_gpus=[GpuReading(1, nvml_used_bytes=1)])
    assert driver_free_figures(no_total, "cuda:1")["gpu_driver_free_before_bytes"] is None
    known = span(baseline_gpus=[GpuReading(1, nvml_total_bytes=10, nvml_used_bytes=1)])
    assert driver_free_figures(known, None)["gpu_driver_free_before_bytes"] is None
    assert driver_free_figures(known, "cuda:1")["gpu_driver_free_before_bytes"] == 9


def direct_prediction(fits=True):
    return Prediction(
        "direct",
        "cuda:0",
        100,
        20,
        150,
        400,
        fits,
        calibration_ratio=1.25,
        calibration_unknown_reason="none yet",
    )


def test_the_summary_of_an_encode_that_ran():
    result = ChainResult(requested="auto", device="cuda:0", span=span(duration_s=2.0), strategy_used="tiled")
    result.samples = torch.zeros(1, 4, 8, 8)
    result.pixels_info = {"shape": [4, 64, 64, 3], "bytes": 3_000_000}
    result.predictions["direct"] = direct_prediction()
    result.attempts = [
        Attempt("direct", OOM, duration_s=1.0, prediction_held=False),
        Attempt("tiled", OK, prediction_held=True),
        Attempt("cpu", SKIPPED),
    ]
    s = build_step("7", result, allow_dummy=True).summary
    assert (s["strategy_requested"], s["strategy_used"], s["dummy_used"]) == ("auto", "tiled", False)
    assert (s["n_attempts"], s["n_out_of_memory"], s["error"]) == (2, 1, None)
    assert (s["latent_dtype"], s["latent_device"], s["latent_bytes"], s["latent_n_elements"]) == (
        "float32",
        "cpu",
        1024,
        256,
    )
    assert (s["input_bytes"], s["input_n_pixels"]) == (3_000_000, 4 * 64 * 64)
    assert (s["duration_s"], s["frames_per_s"]) == (2.0, 2.0)
    assert s["input_mib_per_s"] == 3_000_000 / 1024**2 / 2.0  # MiB, as every other figure
    assert s["direct_needed_bytes"] == 150 and s["direct_estimate_bytes"] == 100
    assert s["direct_calibration_ratio"] == 1.25 and s["direct_calibration_source"] == "none yet"
    assert (s["direct_free_bytes"], s["direct_predicted_to_fit"]) == (400, True)
    assert (s["direct_prediction_held"], s["used_prediction_held"]) == (False, True)
    assert s["latent_type"] == "image" and s["spatial_compression_ratio"] == 64.0


def test_the_summary_without_a_latent_or_a_prediction():
    result = ChainResult(requested="direct", device="cuda:0", error="ran out", error_kind="out_of_memory")
    result.attempts = [Attempt("direct", OOM, duration_s=1.0)]
    step = build_step("7", result)
    s = step.summary
    assert s["strategy_used"] is None and s["n_out_of_memory"] == 1 and s["error"] == "ran out"
    assert s["latent_dtype"] is None and s["latent_bytes"] is None and s["latent_type"] is None
    assert s["duration_s"] is None and s["frames_per_s"] is None and s["input_mib_per_s"] is None
    assert s["direct_needed_bytes"] is None and s["direct_calibration_source"] is None
    assert s["direct_prediction_held"] is None and s["used_prediction_held"] is None
    assert s["input_n_pixels"] is None
    assert step.details["throughput_unknown_reason"] == "no latent was made"
    assert step.details["pixels"] is None and step.details["device"] == "cuda:0"


def test_a_dummy_latent_has_no_throughput_and_says_why():
    result = ChainResult(requested="auto", device="cuda:0", span=span(), strategy_used="dummy")
    result.samples = torch.zeros(1, 4, 8, 8)
    result.pixels_info = {"shape": [1, 64, 64, 3], "bytes": 1000}
    step = build_step("7", result, allow_dummy=True)
    assert step.summary["dummy_used"] is True and step.summary["frames_per_s"] is None
    assert step.summary["input_mib_per_s"] is None
    assert step.details["throughput_unknown_reason"].startswith("dummy latent: zeros made without encoding")
    assert step.details["allow_dummy"] is True


def test_the_calibration_source_is_preferred_to_the_reason_it_is_missing():
    result = ChainResult(requested="auto", device="cuda:0")
    result.predictions["direct"] = Prediction(
        "direct", "cuda:0", 1, 0, 1, 1, True, calibration_source="from 2", calibration_unknown_reason="x"
    )
    assert build_step("1", result).summary["direct_calibration_source"] == "from 2"


def test_build_vae_encode_step_describes_the_vae_only_when_given():
    result = ChainResult(requested="auto")
    assert build_vae_encode_step("1", result).details["vae"] is None
    assert build_vae_encode_step("1", result, vae=object()).details["vae"] is not None


def test_warnings_and_errors_go_to_the_log_and_infos_do_not(caplog):
    step = StepReport(
        kind="vae_encode",
        node_id="4",
        findings=(
            Finding("info", "fyi", "a"),
            Finding("warning", "careful", "b"),
            Finding("error", "bad", "c"),
        ),
    )
    with caplog.at_level(logging.DEBUG, logger="t"):
        log_findings(step, logging.getLogger("t"))
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "pipeline monitor: VAE encode node 4: careful"),
        (logging.ERROR, "pipeline monitor: VAE encode node 4: bad"),
    ]


@pytest.mark.parametrize("device", ["cuda:0", "cpu"])
def test_the_step_kind_and_errors(device):
    result = ChainResult(requested="auto", device=device, monitor_errors=["free memory: boom"])
    step = build_step("2", result)
    assert step.kind == "vae_encode" and step.node_id == "2" and step.monitor_errors == ("free memory: boom",)


def test_figures_of_an_input_missing_a_side_or_its_size_are_unknown_and_dummy_is_off_unless_asked():
    """Spatial compression needs both sides of the input; throughput in MB/s needs its size. A step
    built without `allow_dummy` says it was off."""
    latent = {"shape": [1, 4, 8, 8]}
    assert geometry([1, 64], latent)["spatial_compression_ratio"] is None  # no width
    assert geometry([1], latent)["spatial_compression_ratio"] is None
    result = ChainResult(requested="auto", device="cuda:0", span=span(duration_s=2.0), strategy_used="direct")
    result.samples = torch.zeros(1, 4, 8, 8)
    result.pixels_info = {"shape": [1, 64, 64, 3]}  # no byte count
    step = build_step("7", result)
    assert step.summary["input_mib_per_s"] is None and step.summary["frames_per_s"] == 0.5
    assert step.details["allow_dummy"] is False
    assert build_vae_encode_step("7", result).details["allow_dummy"] is False

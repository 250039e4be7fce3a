"""Node rows from a hand-made closed span: every figure in its place (per device, sorted), the
start offset against the run's start, whole bytes, and what a row says the node itself needed."""

from __future__ import annotations

import pytest

from monitors.engine.node_rows import node_memory_above_start, node_profile_from_span
from monitors.engine.span import Change, Peak, SpanResult
from monitors.node_fields import GpuPeak
from monitors.probes.fake import fake_probes


def span_result(peaks, changes, method="sampled"):
    snapshot = fake_probes().snapshot()
    return SpanResult(
        name="n",
        start_unix_s=1002.5,
        duration_s=1.25,
        baseline=snapshot,
        end=snapshot,
        peaks=peaks,
        changes=changes,
        peak_rss_method=method,
    )


UNREAD = dict.fromkeys(("process_used_unknown_reason", "aimdo_used_unknown_reason"), "not read while the node ran")


def test_a_row_holds_every_figure_of_its_span():
    result = span_result(
        peaks={
            "process_rss_bytes": Peak(900.0, 0.5, "sampled"),
            "cuda:1.allocated_bytes": Peak(700.0, 0.25, "allocator"),
            "cuda:1.reserved_bytes": Peak(800.0, 0.75, "allocator"),
            "cuda:0.allocated_bytes": Peak(70.0, 0.1, "allocator"),
            "ram_used_bytes": Peak(5.0, 0.0, "sampled"),
        },
        changes={
            "process_rss_bytes": Change.between(600.0, 650.0),
            "cuda:1.allocated_bytes": Change.between(100.0, 300.0),
            "cuda:1.reserved_bytes": Change.between(200.0, 150.0),
        },
    )
    row = node_profile_from_span("3", "KSampler", "Sampler", "success", result, 1000.0, "why no GPU time")
    assert (row.node_id, row.class_type, row.title, row.status, row.cached) == (
        "3",
        "KSampler",
        "Sampler",
        "success",
        False,
    )
    assert row.start_offset_s == pytest.approx(2.5) and row.duration_s == pytest.approx(1.25)
    assert row.peak_rss_bytes == 900 and row.peak_rss_method == "sampled"
    assert row.rss_change_bytes == 50.0
    assert (row.peak_rss_above_start_bytes, row.rss_start_bytes, row.rss_end_bytes) == (300, 600, 650)
    assert type(row.rss_start_bytes) is int and type(row.peak_rss_above_start_bytes) is int
    assert row.peak_rss_at_s == pytest.approx(0.5)
    assert row.gpu_time_unknown_reason == "why no GPU time"
    assert row.gpu_peaks == (
        GpuPeak("cuda:0", 70, None, None, None, peak_allocated_at_s=0.1, **UNREAD),
        GpuPeak(
            "cuda:1",
            700,
            800,
            600,
            600,
            allocated_start_bytes=100,
            allocated_end_bytes=300,
            allocated_change_bytes=200,
            reserved_start_bytes=200,
            reserved_end_bytes=150,
            reserved_change_bytes=-50,
            peak_allocated_at_s=0.25,
            peak_reserved_at_s=0.75,
            **UNREAD,
        ),
    )
    assert all(
        type(v) is int
        for v in (row.gpu_peaks[1].allocated_start_bytes, row.gpu_peaks[1].reserved_change_bytes)
    )


def test_a_span_without_readings_gives_a_row_of_unknowns():
    row = node_profile_from_span("4", None, None, "error", span_result({}, {}, method=None), 1002.5)
    assert row.start_offset_s == 0.0 and row.gpu_peaks == ()
    assert row.peak_rss_bytes is None and row.rss_change_bytes is None and row.peak_rss_at_s is None
    assert (row.peak_rss_above_start_bytes, row.rss_start_bytes, row.rss_end_bytes) == (None, None, None)
    assert row.gpu_time_unknown_reason is None


def test_a_change_with_an_unknown_end_keeps_its_start():
    result = span_result(
        peaks={"cuda:0.allocated_bytes": Peak(None, None, "allocator")},
        changes={
            "process_rss_bytes": Change.between(10.0, None),
            "cuda:0.allocated_bytes": Change.between(4.0, None),
        },
    )
    row = node_profile_from_span("5", "X", None, "success", result, 1000.0)
    assert (row.rss_start_bytes, row.rss_end_bytes, row.rss_change_bytes) == (10, None, None)
    peak = row.gpu_peaks[0]
    assert (peak.peak_allocated_bytes, peak.allocated_start_bytes, peak.allocated_end_bytes) == (
        None,
        4,
        None,
    )
    assert peak.peak_allocated_above_start_bytes is None and peak.peak_allocated_at_s is None


def test_what_a_node_needed_is_its_largest_gpu_rise_else_its_rss_rise():
    assert (
        node_memory_above_start(
            {
                "gpu_peaks": [
                    {"peak_allocated_above_start_bytes": 5},
                    {"peak_allocated_above_start_bytes": 9.5},
                    {"peak_allocated_above_start_bytes": None},
                    "junk",
                ],
                "peak_rss_above_start_bytes": 100,
            }
        )
        == 9.5
    )
    assert node_memory_above_start({"gpu_peaks": [{"peak_allocated_above_start_bytes": 0}]}) == 0
    assert node_memory_above_start({"gpu_peaks": [{"x": 1}], "peak_rss_above_start_bytes": 7}) == 7
    assert node_memory_above_start({"gpu_peaks": None, "peak_rss_above_start_bytes": 2.5}) == 2.5
    assert node_memory_above_start({"peak_rss_above_start_bytes": "7"}) is None
    assert node_memory_above_start({"gpu_peaks": [{"peak_allocated_above_start_bytes": "3"}]}) is None
    assert node_memory_above_start({}) is None


def test_a_row_holds_the_process_device_memory_beside_torchs_and_says_why_one_is_unknown():
    """The driver's per-process figure and dynamic VRAM's own, each its highest reading; where one
    was never read, the probes' reason for that device."""
    result = span_result(
        peaks={
            "cuda:0.allocated_bytes": Peak(100.0, 0.1, "allocator"),
            "cuda:0.process_used_bytes": Peak(900.0, 0.2, "sampled"),
            "cuda:1.allocated_bytes": Peak(5.0, 0.1, "allocator"),
            "cuda:1.aimdo_used_bytes": Peak(300.0, 0.3, "sampled"),
        },
        changes={},
    )
    asked = []

    def reasons(index):
        asked.append(index)
        return {"process_used_bytes": f"not in NVML's list on {index}", "aimdo_used_bytes": "dynamic VRAM is off"}

    row = node_profile_from_span("7", "VAEDecode", None, "executed", result, 1000.0, None, reasons)
    first, second = row.gpu_peaks
    assert (first.peak_process_used_bytes, first.process_used_unknown_reason) == (900, None)
    assert (first.peak_aimdo_used_bytes, first.aimdo_used_unknown_reason) == (None, "dynamic VRAM is off")
    assert (second.peak_process_used_bytes, second.process_used_unknown_reason) == (None, "not in NVML's list on 1")
    assert (second.peak_aimdo_used_bytes, second.aimdo_used_unknown_reason) == (300, None)
    assert type(first.peak_process_used_bytes) is int and asked == [0, 1]

    def broken(index):
        raise RuntimeError("no probes")

    row = node_profile_from_span("7", "VAEDecode", None, "executed", result, 1000.0, None, broken)
    assert row.gpu_peaks[0].aimdo_used_unknown_reason == "RuntimeError: no probes"

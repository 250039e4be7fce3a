"""monitors/engine/span.py with exact numbers from a fake clock and fake probes: durations, the time a
peak (or low) was first reached, changes with one side missing or a zero baseline, what a span
added above its start, nesting (scripts/mutate.py survivors of the first tests)."""

from __future__ import annotations

import dataclasses

import pytest

from monitors.engine import span as span_module
from monitors.engine.span import METHOD_KERNEL_HWM, METHOD_SAMPLED, Change, Span, SpanResult, memory_picture
from monitors.probes.fake import GiB, fake_probes
from tests.unit.fake_clock import FakeClock, install

MiB = 1024**2


@pytest.fixture
def clock(monkeypatch):
    return install(FakeClock(start_s=1000.0, unix_start_s=1_700_000_000.0), monkeypatch)


def test_change_between_known_values():
    assert Change.between(200, 150) == Change(200, 150, -50, -25.0)
    assert Change.between(4, 5) == Change(4, 5, 1, 25.0)
    assert Change.between(0, 5) == Change(0, 5, 5, None)  # no percentage of zero
    assert Change.between(None, 5) == Change(None, 5, None, None)
    assert Change.between(5, None) == Change(5, None, None, None)
    assert Change.between(3, 3).to_dict() == {"before": 3, "after": 3, "delta": 0, "delta_pct": 0.0}


def test_duration_and_start_are_exact(clock):
    probes = fake_probes("no GPU")
    span = Span("work", probes=probes).start()
    clock.advance(2.5)
    result = span.stop()
    assert result.duration_s == 2.5
    assert result.start_unix_s == 1_700_000_000.0
    assert result.to_dict()["duration_s"] == 2.5 and result.to_dict()["start_unix_s"] == 1_700_000_000.0


@pytest.mark.parametrize("scenario", ["no clear_refs", "no GPU"])
def test_a_repeated_peak_keeps_the_time_it_was_first_reached(clock, scenario):
    probes = fake_probes(scenario)
    span = Span("s", probes=probes).start()
    clock.advance(1.0)
    probes.host.set_rss(2 * GiB)
    span.observe(probes.snapshot())
    clock.advance(1.0)
    span.observe(probes.snapshot())  # the same value again, later
    probes.host.set_rss(1 * GiB)
    clock.advance(1.0)
    peak = span.stop().peaks["process_rss_bytes"]
    assert (peak.value, peak.at_s, peak.method) == (2 * GiB, 1.0, METHOD_SAMPLED)


def test_a_higher_peak_replaces_the_earlier_one_with_its_own_time(clock):
    probes = fake_probes("no clear_refs")
    span = Span("s", probes=probes).start()
    for at_s, rss in ((0.5, 1 * GiB), (1.5, 3 * GiB), (2.5, 2 * GiB)):
        clock.move_to(1000.0 + at_s)
        probes.host.set_rss(rss)
        span.observe(probes.snapshot())
    result = span.stop()
    assert result.peaks["process_rss_bytes"].at_s == 1.5
    assert result.peak("process_rss_bytes") == 3 * GiB and result.peak_rss_bytes == 3 * GiB


def test_the_low_of_available_memory_keeps_its_first_time(clock):
    probes = fake_probes("no GPU")
    total = probes.host.ram_total_bytes
    span = Span("s", probes=probes).start()  # baseline: 4 GiB used
    for at_s, used in ((1.0, 6 * GiB), (2.0, 6 * GiB), (3.0, 5 * GiB)):
        clock.move_to(1000.0 + at_s)
        probes.host.ram_used_bytes = used
        span.observe(probes.snapshot())
    result = span.stop()
    low = result.lows["ram_available_bytes"]
    assert (low.value, low.at_s) == (total - 6 * GiB, 1.0)
    assert "ram_available_bytes" not in result.peaks
    assert result.peaks["ram_used_bytes"].value == 6 * GiB and result.peaks["ram_used_bytes"].at_s == 1.0


def test_a_reading_from_before_the_start_counts_at_zero_seconds(clock):
    probes = fake_probes("no clear_refs")
    early = probes.snapshot()
    clock.advance(3.0)
    span = Span("s", probes=probes).start()
    span.observe(early.__class__(**{**early.__dict__, "process_rss_bytes": 8 * GiB}))
    clock.advance(1.0)
    peak = span.stop().peaks["process_rss_bytes"]
    assert (peak.value, peak.at_s) == (8 * GiB, 0.0)


def test_above_start_is_the_peak_minus_the_baseline(clock):
    probes = fake_probes("no GPU")  # RSS starts at 512 MiB
    with Span("s", probes=probes) as span:
        probes.host.set_rss(2 * GiB)
        probes.host.set_rss(1 * GiB)
    result = span.result
    assert result.above_start("process_rss_bytes") == 2 * GiB - 512 * MiB
    assert result.above_start("cuda:0.allocated_bytes") is None  # never measured
    assert result.peaks["process_rss_bytes"].method == METHOD_KERNEL_HWM


def test_above_start_without_a_baseline_value_is_none(clock):
    probes = fake_probes("no GPU")
    probes.host.fail.add("process_rss_bytes")
    span = Span("s", probes=probes).start()
    probes.host.fail.clear()
    span.observe(probes.snapshot())
    result = span.stop()
    assert result.peak("process_rss_bytes") == 512 * MiB
    assert result.changes["process_rss_bytes"] == Change(None, 512 * MiB, None, None)
    assert result.above_start("process_rss_bytes") is None


def test_peak_rss_bytes_is_an_int_or_none():
    probes = fake_probes("no GPU")
    with Span("s", probes=probes) as span:
        pass
    assert span.result.peak_rss_bytes == 512 * MiB and isinstance(span.result.peak_rss_bytes, int)
    empty = SpanResult("x", 0.0, 0.0, span.result.baseline, span.result.end)
    assert empty.peak_rss_bytes is None and empty.peak("process_rss_bytes") is None


def test_gpu_peaks_of_two_devices_reach_an_enclosing_span(clock):
    probes = fake_probes("2 GPUs")
    outer = Span("prompt", probes=probes).start()
    probes.torch.allocate(1, 3 * GiB)
    probes.torch.allocate(1, -3 * GiB)
    clock.advance(1.0)
    inner = Span("node", probes=probes).start()  # resets the counters: hands 3 GiB to the outer span
    probes.torch.allocate(0, 1 * GiB)
    clock.advance(1.0)
    inner_result = inner.stop()
    outer_result = outer.stop()
    assert inner_result.peak("cuda:1.allocated_bytes") == 0
    assert outer_result.peak("cuda:1.allocated_bytes") == 3 * GiB
    assert outer_result.peaks["cuda:1.allocated_bytes"].at_s == 1.0
    assert outer_result.peaks["cuda:1.allocated_bytes"].method == "allocator_peak"
    assert inner_result.peak("cuda:0.allocated_bytes") == 1 * GiB
    assert outer_result.peak("cuda:0.allocated_bytes") == 1 * GiB


def test_a_span_cannot_start_twice_or_stop_unstarted():
    probes = fake_probes("no GPU")
    span = Span("s", probes=probes)
    assert span.is_open is False
    with pytest.raises(RuntimeError, match="never started"):
        span.stop()
    span.start()
    assert span.is_open is True
    with pytest.raises(RuntimeError, match="already started"):
        span.start()
    span.stop()
    assert span.is_open is False


def test_results_are_frozen():
    probes = fake_probes("no GPU")
    with Span("s", probes=probes) as span:
        pass
    result = span.result
    for value, name in (
        (result, "duration_s"),
        (result.peaks["process_rss_bytes"], "value"),
        (Change(1, 2, 1, 100.0), "delta"),
    ):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, 0)


def test_memory_picture_changes_and_reasons(clock):
    probes = fake_probes("no GPU")
    probes.host.fail.add("system_memory")  # no RAM reading at the start ...
    span = Span("s", probes=probes).start()
    probes.host.fail.clear()  # ... but one at the end
    probes.host.set_rss(1 * GiB)
    clock.advance(2.0)
    picture = memory_picture(span.stop())
    assert picture["process_rss_bytes"] == {
        "baseline": 512 * MiB,
        "end": 1 * GiB,
        "change": 512 * MiB,
        "change_pct": 100.0,
        "peak": 1 * GiB,
        "peak_at_s": 2.0,
    }
    assert picture["system_ram"]["used_bytes"]["end"] == 4 * GiB
    assert picture["system_ram"]["used_bytes"]["baseline"] is None
    assert "system_ram" not in picture["unknown_reasons"]
    assert picture["unknown_reasons"]["gpus"] == "no GPU seen by torch or NVML"
    assert picture["duration_s"] == 2.0


def test_device_index_of_names_without_a_number_is_zero():
    assert [span_module._device_index(name) for name in ("cuda:3", "cuda:12", "cuda", "cuda:x")] == [
        3,
        12,
        0,
        0,
    ]

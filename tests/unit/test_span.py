import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest

from monitors.engine.span import (
    METHOD_KERNEL_HWM,
    METHOD_SAMPLED,
    Change,
    Span,
    SpanResult,
    memory_picture,
    open_span_count,
)
from monitors.probes.fake import GiB, fake_probes
from tests.unit.fake_clock import FakeClock, install

MiB = 1024**2


# The kernel's high-water mark is one per process: any thread of the test session that resets it
# (a ComfyUI executor thread left by an in-process test, whose pack copy has its own span
# registry) would erase the spike, so the spike runs in a fresh interpreter of its own.
SPIKE_SCRIPT = """
import json, time
import numpy as np
from monitors.probes import Probes
from monitors.probes.fake import fake_probes
from monitors.engine.span import Span
spike_bytes = 300 * 1024**2
probes = Probes(nvml=fake_probes().nvml)
with Span("spike", probes=probes) as span:
    before = probes.process_rss_bytes()
    block = np.ones(spike_bytes, dtype=np.uint8)  # touched, so resident
    time.sleep(0.05)
    del block
    after = probes.process_rss_bytes()
result = span.result
json.dump({"method": result.peak_rss_method, "peak": result.peak_rss_bytes, "before": before,
           "after": after, "spike": spike_bytes}, sys.stdout)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="exact peaks use Linux's VmHWM")
def test_short_300mb_spike_is_caught_within_2_percent():
    repo = pathlib.Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + SPIKE_SCRIPT],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    r = json.loads(done.stdout)
    assert r["method"] == METHOD_KERNEL_HWM
    assert r["after"] < r["before"] + r["spike"] / 2, "the spike must be gone by the end of the span"
    measured = r["peak"] - r["before"]
    assert abs(measured - r["spike"]) / r["spike"] < 0.02, (measured, r["spike"])


def test_baseline_end_changes_and_duration(monkeypatch):
    clock = install(FakeClock(), monkeypatch)
    probes = fake_probes("no GPU")
    span = Span("work", probes=probes).start()
    probes.host.set_rss(1 * GiB)
    clock.advance(0.01)
    result = span.stop()
    change = result.changes["process_rss_bytes"]
    assert change.before == 512 * MiB and change.after == 1 * GiB
    assert change.delta == 512 * MiB and change.delta_pct == pytest.approx(100.0)
    assert result.duration_s == pytest.approx(0.01)
    assert result.baseline.process_rss_bytes == 512 * MiB and result.end.process_rss_bytes == 1 * GiB
    assert span.stop() is result  # idempotent


def test_peak_between_samples_comes_from_high_water_mark():
    probes = fake_probes("no GPU")
    with Span("s", probes=probes) as span:
        probes.host.set_rss(3 * GiB)  # spike never seen by a snapshot
        probes.host.set_rss(600 * MiB)
    peak = span.result.peaks["process_rss_bytes"]
    assert peak.value == 3 * GiB and peak.method == METHOD_KERNEL_HWM
    assert span.result.peak_rss_method == METHOD_KERNEL_HWM


def test_refused_reset_falls_back_to_sampling_and_says_so():
    probes = fake_probes("no clear_refs")
    span = Span("s", probes=probes).start()
    probes.host.set_rss(3 * GiB)
    span.observe(probes.snapshot())  # a sampler tick
    probes.host.set_rss(600 * MiB)
    result = span.stop()
    assert result.peak_rss_method == METHOD_SAMPLED
    assert result.peaks["process_rss_bytes"].value == 3 * GiB
    assert result.peaks["process_rss_bytes"].method == METHOD_SAMPLED


def test_peak_time_is_seconds_since_span_start(monkeypatch):
    clock = install(FakeClock(), monkeypatch)
    probes = fake_probes("no clear_refs")
    span = Span("s", probes=probes).start()
    clock.advance(0.05)
    probes.host.set_rss(2 * GiB)
    span.observe(probes.snapshot())
    probes.host.set_rss(1 * GiB)
    clock.advance(0.02)
    result = span.stop()
    assert result.peaks["process_rss_bytes"].at_s == pytest.approx(0.05)
    assert result.duration_s == pytest.approx(0.07)


def test_nested_spans_lose_no_peak():
    probes = fake_probes("1 GPU")
    outer = Span("prompt", probes=probes).start()
    probes.host.set_rss(4 * GiB)  # outer-only spike, before the inner span resets the counter
    probes.host.set_rss(1 * GiB)
    probes.torch.allocate(0, 2 * GiB)
    probes.torch.allocate(0, -2 * GiB)
    inner = Span("node", probes=probes).start()
    probes.host.set_rss(2 * GiB)
    probes.host.set_rss(1 * GiB)
    probes.torch.allocate(0, 1 * GiB)
    inner_result = inner.stop()
    outer_result = outer.stop()
    assert inner_result.peak_rss_bytes == 2 * GiB
    assert outer_result.peak_rss_bytes == 4 * GiB
    assert inner_result.peak("cuda:0.allocated_bytes") == 1 * GiB
    assert outer_result.peak("cuda:0.allocated_bytes") == 2 * GiB
    assert open_span_count() == 0


def test_inner_peak_reaches_outer_span():
    probes = fake_probes("no GPU")
    with Span("outer", probes=probes) as outer:
        with Span("inner", probes=probes):
            probes.host.set_rss(5 * GiB)
            probes.host.set_rss(1 * GiB)
    assert outer.result.peak_rss_bytes == 5 * GiB


def test_cuda_malloc_async_peaks_come_from_samples():
    probes = fake_probes("cudaMallocAsync")
    span = Span("s", probes=probes).start()
    probes.torch.allocate(0, 1 * GiB)
    span.observe(probes.snapshot())
    result = span.stop()
    peak = result.peaks["cuda:0.allocated_bytes"]
    assert peak.value == 1 * GiB and peak.method == METHOD_SAMPLED


def test_every_probe_failing_still_gives_a_result():
    probes = fake_probes("1 GPU")
    probes.host.fail.add("*")
    probes.torch.fail.add("*")
    with Span("s", probes=probes) as span:
        pass
    result = span.result
    assert result.peak_rss_bytes is None and result.duration_s >= 0
    assert result.changes["process_rss_bytes"].delta is None
    assert result.to_dict()["peak_rss_method"] == METHOD_SAMPLED


def test_span_closed_on_exception():
    probes = fake_probes()
    with pytest.raises(ValueError), Span("s", probes=probes) as span:
        raise ValueError("boom")
    assert span.result is not None and open_span_count() == 0


# Exact figures from a fake clock and fake probes: durations, the time a peak (or low) was first
# reached, changes with one side missing or a zero baseline, what a span added above its start.


@pytest.fixture
def clock(monkeypatch):
    return install(FakeClock(start_s=1000.0, unix_start_s=1_700_000_000.0), monkeypatch)


def test_a_change_has_its_delta_and_a_percentage_only_of_a_nonzero_before():
    assert Change.between(200, 150) == Change(200, 150, -50, -25.0)
    assert Change.between(4, 5) == Change(4, 5, 1, 25.0)
    assert Change.between(0, 5) == Change(0, 5, 5, None)  # no percentage of zero
    assert Change.between(None, 5) == Change(None, 5, None, None)
    assert Change.between(5, None) == Change(5, None, None, None)
    assert Change.between(3, 3).to_dict() == {"before": 3, "after": 3, "delta": 0, "delta_pct": 0.0}


def test_a_span_lasts_from_its_start_to_its_stop_on_the_clock(clock):
    probes = fake_probes("no GPU")
    span = Span("work", probes=probes).start()
    clock.advance(2.5)
    result = span.stop()
    assert result.duration_s == pytest.approx(2.5) and result.start_unix_s == pytest.approx(1_700_000_000.0)
    assert result.to_dict()["duration_s"] == pytest.approx(2.5)
    assert result.to_dict()["start_unix_s"] == pytest.approx(1_700_000_000.0)


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
    assert (peak.value, peak.at_s, peak.method) == (2 * GiB, pytest.approx(1.0), METHOD_SAMPLED)


def test_a_higher_peak_replaces_the_earlier_one_with_its_own_time(clock):
    probes = fake_probes("no clear_refs")
    span = Span("s", probes=probes).start()
    for at_s, rss in ((0.5, 1 * GiB), (1.5, 3 * GiB), (2.5, 2 * GiB)):
        clock.move_to(1000.0 + at_s)
        probes.host.set_rss(rss)
        span.observe(probes.snapshot())
    result = span.stop()
    assert result.peaks["process_rss_bytes"].at_s == pytest.approx(1.5)
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
    assert (low.value, low.at_s) == (total - 6 * GiB, pytest.approx(1.0))
    assert "ram_available_bytes" not in result.peaks
    assert result.peaks["ram_used_bytes"].value == 6 * GiB and result.peaks["ram_used_bytes"].at_s == pytest.approx(1.0)


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
    assert outer_result.peaks["cuda:1.allocated_bytes"].at_s == pytest.approx(1.0)
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


def test_memory_picture_gives_each_figure_and_says_why_one_is_unknown(clock):
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
        "peak_at_s": pytest.approx(2.0),
    }
    assert picture["system_ram"]["used_bytes"]["end"] == 4 * GiB
    assert picture["system_ram"]["used_bytes"]["baseline"] is None
    assert "system_ram" not in picture["unknown_reasons"]
    assert picture["unknown_reasons"]["gpus"] == "no GPU seen by torch or NVML"
    assert picture["duration_s"] == pytest.approx(2.0)


def test_memory_picture_lists_devices_in_number_order_and_a_nameless_one_first():
    probes = fake_probes("no GPU")
    with Span("s", probes=probes) as span:
        pass
    changes = {f"{d}.allocated_bytes": Change.between(1, 2) for d in ("cuda:12", "cuda:3", "cuda:x")}
    result = dataclasses.replace(span.result, changes=changes)
    assert [g["device"] for g in memory_picture(result)["gpus"]] == ["cuda:x", "cuda:3", "cuda:12"]

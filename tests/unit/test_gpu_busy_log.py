"""The NVML sample log and the busy-time arithmetic on their own, with a stand-in NVML read and
the module's clock: when samples are fetched, which are kept, and each bound of the figure."""

from __future__ import annotations

import dataclasses

import pytest

from monitors.engine import gpu_busy
from monitors.engine.gpu_busy import (
    COLLECT_EVERY_S,
    SampleLog,
    busy_time,
    resolve_busy,
    sampling_period_s,
)
from tests.unit.fake_clock import FakeClock, install


class Samples:
    """probes.gpu_utilization_samples: answers from a list per device, records each call."""

    def __init__(self, per_device=None):
        self.per_device = per_device if per_device is not None else {}
        self.calls = []

    def gpu_utilization_samples(self, index, since_unix_s):
        self.calls.append((index, since_unix_s))
        samples = self.per_device.get(index)
        return None if samples is None else [s for s in samples if s[0] >= since_unix_s]


@pytest.fixture
def clock(monkeypatch):
    return install(FakeClock(), monkeypatch)


def test_collect_fetches_once_per_interval_per_device_unless_forced(clock):
    probes = Samples({0: [], 1: []})
    log = SampleLog(100.0)
    log.collect(probes, 0)
    log.collect(probes, 1)  # another device: its own interval
    clock.advance(COLLECT_EVERY_S - 0.001)
    log.collect(probes, 0)
    assert len(probes.calls) == 2
    log.collect(probes, 0, force=True)
    assert len(probes.calls) == 3
    clock.advance(COLLECT_EVERY_S - 0.001)
    log.collect(probes, 0)  # the forced read restarted the interval
    assert len(probes.calls) == 3
    clock.advance(0.001)
    log.collect(probes, 0)  # exactly COLLECT_EVERY_S after the last read
    assert len(probes.calls) == 4


def test_collect_asks_from_the_newest_kept_sample_and_keeps_only_newer_ones(clock):
    probes = Samples({0: [(99.0, 5.0), (100.0, 10.0), (101.0, 20.0), (102.0, 30.0)]})
    log = SampleLog(100.0)
    log.collect(probes, 0)
    assert probes.calls == [(0, 100.0)]
    assert log.samples[0] == [(101.0, 20.0), (102.0, 30.0)]  # the one at `since` is not new
    probes.per_device[0].append((103.0, 40.0))
    log.collect(probes, 0, force=True)
    assert probes.calls[-1] == (0, 102.0)
    assert log.samples[0] == [(101.0, 20.0), (102.0, 30.0), (103.0, 40.0)]


def test_the_log_keeps_the_newest_samples_up_to_its_bound(clock, monkeypatch):
    monkeypatch.setattr(gpu_busy, "MAX_KEPT_SAMPLES", 3)
    probes = Samples({0: [(float(t), 1.0) for t in range(1, 6)]})
    log = SampleLog(0.0)
    log.collect(probes, 0)
    assert [s[0] for s in log.samples[0]] == [3.0, 4.0, 5.0]


def test_without_samples_the_first_reason_stays_and_samples_still_count(clock):
    probes = Samples()
    log = SampleLog(0.0)
    log.collect(probes, 2)
    assert log.unknown_reason == {2: "NVML gave no utilization samples for this device"}
    assert log.samples == {2: []}
    assert log.busy_s(2, 0.0, 1.0) == (None, "NVML gave no utilization samples for this device")
    log.unknown_reason[2] = "the first reason"
    log.collect(probes, 2, force=True)
    assert log.unknown_reason[2] == "the first reason"
    probes.per_device[2] = [(1.0, 0.0), (2.0, 50.0), (3.0, 100.0)]
    log.collect(probes, 2, force=True)
    assert log.busy_s(2, 1.0, 3.0) == (pytest.approx(1.5), None)  # samples came later: they count


def test_a_device_never_read_has_fewer_than_two_samples():
    assert SampleLog(0.0).busy_s(5, 0.0, 1.0) == (None, "NVML gave fewer than two utilization samples")


def test_the_sampling_period_is_the_median_gap_over_distinct_times():
    assert sampling_period_s([]) is None and sampling_period_s([(1.0, 0.0)]) is None
    assert sampling_period_s([(1.0, 0.0), (1.0, 5.0)]) is None  # a repeated time is no period
    assert sampling_period_s([(0.0, 0), (1.0, 0), (1.0, 0), (3.0, 0), (6.0, 0)]) == 2.0
    assert sampling_period_s([(0.0, 0), (0.5, 0), (2.5, 0)]) == 1.25


def test_the_bounds_of_the_window_are_inclusive():
    samples = [(0.0, 0.0), (1.0, 40.0), (2.0, 80.0)]
    assert busy_time(samples, 0.0, 1.0) == (pytest.approx(0.4), None)  # exactly one period, first sample
    assert busy_time(samples, 1.0, 2.0) == (pytest.approx(0.8), None)  # ends on the last sample
    assert busy_time(samples, 0.0, 2.0) == (pytest.approx(1.2), None)
    assert busy_time(samples, 0.25, 1.5) == (pytest.approx(0.75 * 0.4 + 0.5 * 0.8), None)
    short = busy_time(samples, 0.0, 0.999)
    assert short == (None, "the node (0.999 s) is shorter than NVML's sampling period (1.000 s)")
    assert busy_time(samples, -0.001, 1.5)[1] == "NVML's samples no longer reach back to the node's start"
    assert busy_time(samples, 0.5, 2.001)[1] == "NVML had no sample after the node's end when it was read"


def test_a_period_outside_the_window_adds_nothing():
    samples = [(0.0, 0.0), (1.0, 100.0), (2.0, 100.0), (3.0, 100.0), (4.0, 100.0)]
    assert busy_time(samples, 2.0, 3.0) == (pytest.approx(1.0), None)
    assert busy_time(samples, 1.5, 2.5) == (pytest.approx(1.0), None)


@dataclasses.dataclass(frozen=True)
class Row:
    start_offset_s: float | None
    duration_s: float | None
    gpu_busy_s: float | None = None
    gpu_busy_unknown_reason: str | None = None


class FixedLog:
    """A SampleLog whose busy_s reports its arguments; records the forced collections."""

    def __init__(self):
        self.collected = []

    def collect(self, probes, index, force=False):
        self.collected.append((index, force))

    def busy_s(self, index, start, end):
        return (index * 100 + start, end), None


def test_resolve_gives_each_row_its_window_on_its_device():
    rows = [Row(1.0, 2.0), Row(None, 1.0), Row(4.0, None), Row(0.5, 0.25)]
    pending = [(0, (3, "s"), (1, "e")), (1, (0, "s"), (0, "e")), (2, (0, "s"), None), (3, (2, "s"), None)]
    log = FixedLog()
    resolve_busy(rows, pending, log, probes=None, run_started_unix_s=1000.0)
    assert sorted(log.collected) == [(0, True), (1, True), (2, True)]  # the end's device, else the start's
    assert rows[0].gpu_busy_s == pytest.approx((100 + 1001.0, 1003.0)) and rows[0].gpu_busy_unknown_reason is None
    assert rows[1] == Row(None, 1.0, None, "the node's window is unknown")
    assert rows[2] == Row(4.0, None, None, "the node's window is unknown")
    assert rows[3].gpu_busy_s == pytest.approx((200 + 1000.5, 1000.75))


def test_resolve_without_a_log_leaves_the_rows():
    rows = [Row(1.0, 2.0)]
    resolve_busy(rows, [(0, (0, "s"), (0, "e"))], None, probes=None, run_started_unix_s=0.0)
    assert rows == [Row(1.0, 2.0)]


def test_the_documented_interval_and_bound(clock):
    """NVML is asked at most every 5 s as nodes finish; 20,000 samples are kept per device."""
    probes = Samples({0: [(float(t), 1.0) for t in range(1, 20_002)]})
    log = SampleLog(0.0)
    log.collect(probes, 0)
    assert len(log.samples[0]) == 20_000 and log.samples[0][0][0] == 2.0
    clock.advance(4.999)
    log.collect(probes, 0)
    assert len(probes.calls) == 1
    clock.advance(0.001)
    log.collect(probes, 0)
    assert len(probes.calls) == 2

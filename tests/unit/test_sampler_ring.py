"""The sampler's contract on its own: bounds and their validation, the ring keeping the newest
points, sinks added once and called in order (a failing one kept and logged once), the thread's
first tick at once and its wake-up on a new interval or a stop. Waits are hang watchdogs only."""

from __future__ import annotations

import logging
import threading
import time
import types

import pytest

from monitors.engine.sampler import DEFAULT_INTERVAL_S, DEFAULT_MAX_POINTS, Sampler
from monitors.probes import set_probes
from monitors.probes.fake import fake_probes


def wait_for(predicate, timeout_s=60.0):  # a hang watchdog, never a speed check
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return False


def test_defaults_two_hertz_ten_minutes():
    assert (DEFAULT_INTERVAL_S, DEFAULT_MAX_POINTS) == (0.5, 1200)
    sampler = Sampler(probes=fake_probes())
    for _ in range(DEFAULT_MAX_POINTS + 1):
        sampler.sample_once()
    assert len(sampler.points()) == DEFAULT_MAX_POINTS


@pytest.mark.parametrize("interval_s", [0, -1.0])
def test_an_interval_must_be_positive(interval_s):
    with pytest.raises(ValueError, match=f"interval_s must be positive, got {interval_s}"):
        Sampler(interval_s=interval_s)
    sampler = Sampler(interval_s=2, probes=fake_probes())
    with pytest.raises(ValueError, match="interval_s must be positive"):
        sampler.configure(interval_s=interval_s)
    assert sampler.interval_s == 2.0 and isinstance(sampler.interval_s, float)


def test_at_least_one_point_is_kept():
    with pytest.raises(ValueError, match="max_points must be at least 1, got 0"):
        Sampler(max_points=0)
    sampler = Sampler(max_points=1, probes=fake_probes())
    sampler.sample_once()
    last = sampler.sample_once()
    assert sampler.points() == [last]
    with pytest.raises(ValueError, match="max_points must be at least 1, got 0"):
        sampler.configure(max_points=0)
    sampler.configure(max_points=1)  # unchanged: nothing to do
    assert sampler.points() == [last]


def test_shrinking_the_ring_keeps_the_newest_points_and_growing_keeps_them_all():
    sampler = Sampler(max_points=4, probes=fake_probes())
    taken = [sampler.sample_once() for _ in range(4)]
    sampler.configure(max_points=2)
    assert sampler.points() == taken[2:]
    sampler.configure(max_points=5)
    more = [sampler.sample_once() for _ in range(3)]
    assert sampler.points() == taken[2:] + more
    sampler.configure(max_points=1)  # the least a ring holds
    assert sampler.points() == more[-1:]


def test_each_tick_is_counted_stored_and_given_to_every_sink_in_order():
    sampler = Sampler(probes=fake_probes())
    sampler.ensure_started = lambda: None
    calls = []
    first = lambda s: calls.append(("first", s))  # noqa: E731
    second = lambda s: calls.append(("second", s))  # noqa: E731
    sampler.add_sink(first)
    sampler.add_sink(second)
    sampler.add_sink(first)  # already there: once
    assert sampler.sink_count() == 2
    snapshot = sampler.sample_once()
    assert calls == [("first", snapshot), ("second", snapshot)]
    assert sampler.tick_count == 1 and sampler.points() == [snapshot]
    sampler.remove_sink(first)
    sampler.remove_sink(first)  # not there any more: nothing
    sampler.sample_once()
    assert [name for name, _ in calls] == ["first", "second", "second"] and sampler.tick_count == 2


def test_a_failing_sink_is_kept_called_and_logged_once_per_sink(caplog):
    caplog.set_level(logging.ERROR)
    sampler = Sampler(probes=fake_probes())
    sampler.ensure_started = lambda: None
    calls = []

    def broken(snapshot):
        calls.append("broken")
        raise RuntimeError("down")

    def also_broken(snapshot):
        calls.append("also")
        raise RuntimeError("down too")

    sampler.add_sink(broken)
    sampler.add_sink(also_broken)
    sampler.add_sink(lambda s: calls.append("fine"))
    for _ in range(3):
        sampler.sample_once()
    assert calls == ["broken", "also", "fine"] * 3
    failures = [r for r in caplog.records if "sink" in r.getMessage()]
    assert len(failures) == 2  # one per failing sink, not one per tick


def test_points_since_are_strictly_newer(monkeypatch):
    import monitors.probes as probes_module

    clock = iter([100.0, 101.0, 101.0, 102.0])  # two samples at the same second
    fake_time = types.SimpleNamespace(time=lambda: next(clock), monotonic=time.monotonic)
    monkeypatch.setattr(probes_module, "time", fake_time)  # the probes' own clock only
    sampler = Sampler(probes=fake_probes())
    taken = [sampler.sample_once() for _ in range(4)]
    assert sampler.points(since_unix_s=101.0) == [taken[3]]
    assert sampler.points(since_unix_s=100.5) == taken[1:]
    assert sampler.points(since_unix_s=102.0) == []
    assert sampler.points(since_unix_s=99.0) == taken


def test_without_probes_of_its_own_it_reads_the_process_wide_ones():
    probes = fake_probes()
    previous = set_probes(probes)
    try:
        assert Sampler().probes is probes
    finally:
        set_probes(previous)
    own = fake_probes()
    assert Sampler(probes=own).probes is own


def test_the_thread_ticks_at_once_then_waits_for_its_interval_or_a_wake():
    sampler = Sampler(interval_s=3600.0, probes=fake_probes())
    assert not sampler.running
    sampler.ensure_started()
    try:
        thread = sampler._thread
        assert thread.name == "pipeline-monitor-sampler" and thread.daemon
        assert wait_for(lambda: sampler.tick_count >= 1)  # the first tick does not wait an hour
        assert sampler.running
        sampler.ensure_started()  # running: the same thread
        assert sampler._thread is thread
        sampler.configure(interval_s=0.001)  # wakes the thread from its hour's wait
        assert wait_for(lambda: sampler.tick_count >= 3)
    finally:
        sampler.stop(timeout_s=60.0)
    assert not thread.is_alive() and sampler._thread is None and not sampler.running


def test_stop_wakes_a_long_wait_and_the_sampler_starts_again():
    sampler = Sampler(interval_s=3600.0, probes=fake_probes())
    sampler.ensure_started()
    assert wait_for(lambda: sampler.tick_count >= 1)
    first = sampler._thread
    sampler.stop(timeout_s=60.0)
    assert not first.is_alive()
    sampler.stop()  # stopped already: nothing
    sampler.ensure_started()
    try:
        assert wait_for(lambda: sampler.tick_count >= 2) and sampler._thread is not first
    finally:
        sampler.stop(timeout_s=60.0)


def test_a_sink_that_stops_the_sampler_from_its_thread_does_not_join_itself():
    sampler = Sampler(interval_s=3600.0, probes=fake_probes())
    stopped = threading.Event()

    def stop_from_inside(snapshot):
        sampler.stop(timeout_s=60.0)
        stopped.set()

    sampler.add_sink(stop_from_inside)
    assert stopped.wait(60.0)
    assert wait_for(lambda: not sampler.running)

import logging
import threading
import time

import pytest

from monitors.engine.sampler import Sampler
from monitors.engine.span import METHOD_SAMPLED, Span
from monitors.probes.fake import GiB, fake_probes


def wait_for(predicate, timeout_s=60.0):  # a hang watchdog, never a speed check
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def sampler_threads():
    return [t for t in threading.enumerate() if t.name == "pipeline-monitor-sampler"]


def test_thread_starts_lazily_and_stop_joins_it():
    before = set(sampler_threads())
    sampler = Sampler(interval_s=0.01, probes=fake_probes())
    assert not sampler.running and set(sampler_threads()) == before
    sampler.ensure_started()
    thread = sampler._thread
    assert wait_for(lambda: sampler.tick_count >= 3)
    sampler.stop()
    assert not sampler.running and not thread.is_alive()
    assert set(sampler_threads()) == before


def test_ring_buffer_is_bounded():
    sampler = Sampler(interval_s=0.01, max_points=5, probes=fake_probes())
    for _ in range(20):
        sampler.sample_once()
    assert len(sampler.points()) == 5
    sampler.configure(max_points=3)
    assert len(sampler.points()) == 3


def test_sinks_receive_snapshots_and_a_failing_sink_is_logged_once(caplog):
    caplog.set_level(logging.ERROR)
    sampler = Sampler(interval_s=0.01, probes=fake_probes())
    received = []

    def broken(snapshot):
        raise RuntimeError("sink down")

    sampler.add_sink(received.append)  # first use starts the thread
    sampler.add_sink(broken)
    try:
        assert wait_for(lambda: len(received) >= 5)
    finally:
        sampler.stop()
    assert received[0].process_rss_bytes == 512 * 1024**2
    assert len([r for r in caplog.records if "sink" in r.getMessage()]) == 1
    sampler.remove_sink(broken)
    assert sampler.sink_count() == 1


def test_open_spans_see_sampled_peaks():
    probes = fake_probes("cudaMallocAsync")
    sampler = Sampler(interval_s=0.01, probes=probes)
    span = Span("s", probes=probes).start()
    probes.torch.allocate(0, 2 * GiB)
    sampler.sample_once()
    probes.torch.allocate(0, -2 * GiB)
    result = span.stop()
    assert result.peaks["cuda:0.allocated_bytes"].value == 2 * GiB
    assert result.peaks["cuda:0.allocated_bytes"].method == METHOD_SAMPLED


def test_interval_is_configurable_and_validated():
    sampler = Sampler(probes=fake_probes())
    assert sampler.interval_s == 0.5  # 2 Hz by default
    sampler.configure(interval_s=0.05)
    assert sampler.interval_s == 0.05
    with pytest.raises(ValueError):
        sampler.configure(interval_s=0)
    with pytest.raises(ValueError):
        Sampler(max_points=0)


def test_points_since_filters_by_time():
    sampler = Sampler(probes=fake_probes())
    first = sampler.sample_once()
    time.sleep(0.01)
    sampler.sample_once()
    assert len(sampler.points(since_unix_s=first.unix_time_s)) == 1

"""One deep-profiled prompt (monitors/deep_profile/session.py) with a fake profiler and a fake
clock: the bounds on open ranges and node rows, the times it reports, the trace counts, and what
the step says when the profiler gave nothing usable."""

from __future__ import annotations

import types

import pytest
import torch

from monitors.deep_profile import session
from monitors.deep_profile.session import DeepProfiler, build_step, range_name, torch_profiler

from .test_deep_profile import cuda_prompt, ev


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def monotonic(self):
        return self.now


class FakeProfiler:
    def __init__(self, clock, events=()):
        self.clock, self._events = clock, list(events)

    def start(self):
        self.clock.now += 0.25

    def stop(self):
        self.clock.now += 0.5

    def events(self):
        return self._events


class Ranges:
    def __init__(self):
        self.opened = []

    def __call__(self, name):
        self.opened.append(name)
        return types.SimpleNamespace(__exit__=lambda *a: None)


def test_range_names():
    assert range_name("3", "KSampler") == "node 3 KSampler"
    assert range_name("3", None) == "node 3 unknown class"


def test_the_torch_profiler_records_no_shapes_stacks_or_memory():
    profiler = torch_profiler(False)
    assert (profiler.record_shapes, profiler.with_stack, profiler.profile_memory) == (False, False, False)
    assert len(torch_profiler(True).activities) == 2


def test_cuda_in_use_is_torchs_flag(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert session.torch_cuda_in_use() is True
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert session.torch_cuda_in_use() is False


def test_cuda_profiled_only_where_torch_itself_uses_it(monkeypatch):
    monkeypatch.setattr(session, "torch_cuda_in_use", lambda: False)
    asked = []
    custom = DeepProfiler(
        "p", cuda=True, profiler_factory=lambda cuda: asked.append(cuda) or FakeProfiler(Clock())
    )
    assert custom.start().cuda is True and asked == [True] and custom.running
    plain = DeepProfiler("p", cuda=True).start()  # torch's profiler: CPU activity only
    assert plain.cuda is False
    plain.stop()
    assert not plain.running


def test_times_from_the_clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(session, "time", types.SimpleNamespace(monotonic=clock.monotonic, time=lambda: 0.0))
    profiler = DeepProfiler("p", cuda=False, profiler_factory=lambda cuda: FakeProfiler(clock))
    profiler.start()
    assert profiler.started_monotonic_s == 1000.0 and profiler.start_s == pytest.approx(0.25)
    clock.now = 1002.0
    events = profiler.stop()
    assert profiler.wall_s == pytest.approx(2.0)

    class Slow(list):
        def __iter__(self):
            clock.now += 1.0
            return super().__iter__()

    step = build_step(profiler, Slow(events), {"prompt_id": "p0", "duration_s": 2.0})
    assert step.summary["prompt_wall_s"] == pytest.approx(clock.now - 1000.0)
    assert step.summary["overhead_ratio"] == pytest.approx((clock.now - 1000.0) / 2.0)
    assert step.details["analysis_s"] == pytest.approx(clock.now - 1002.5)


def test_no_range_opened_before_the_profiler_runs_or_beyond_the_bound():
    ranges = Ranges()
    idle = DeepProfiler(
        "p", cuda=False, profiler_factory=lambda cuda: FakeProfiler(Clock()), range_factory=ranges
    )
    idle.node_started("1", "A")
    assert ranges.opened == [] and idle.ranges == {}
    running = idle.start()
    for i in range(session.MAX_OPEN_RANGES + 1):
        running.node_started(str(i), "A")
    assert len(ranges.opened) == session.MAX_OPEN_RANGES == 1000


def many_nodes(n):
    events, ranges = [], {}
    for i in range(n):
        name = range_name(str(i), "A")
        events.append(ev(name, 1000 * i, 1000 * i + 1 + i, eid=i))
        ranges[name] = (str(i), "A")
    return events, ranges


def test_node_rows_bounded_the_longest_kept():
    profiler = DeepProfiler("p", cuda=False)
    events, profiler.ranges = many_nodes(session.MAX_NODE_ROWS)
    step = build_step(profiler, events)
    assert len(step.details["nodes"]) == 200 and "nodes_left_out" not in step.details["unknown_reasons"]
    events, profiler.ranges = many_nodes(session.MAX_NODE_ROWS + 1)
    step = build_step(profiler, events)
    assert [r["node_id"] for r in step.details["nodes"]] == [str(i) for i in range(1, 201)]
    assert step.details["unknown_reasons"]["nodes_left_out"] == "1 nodes with the shortest wall times"


def test_trace_counts_host_and_device_events(tmp_path):
    events, ranges = cuda_prompt()
    profiler = DeepProfiler("p1", cuda=True)
    profiler.ranges = ranges
    step = build_step(profiler, events, None, str(tmp_path))
    trace = step.details["trace"]
    assert trace["n_host_events"] > 0 and trace["n_device_events"] > 0
    assert step.summary["n_trace_events"] == trace["n_host_events"] + trace["n_device_events"]
    assert trace["file"] == "p1.ops.json"


def empty_trace(step):
    return {k: step.details["trace"][k] for k in ("file", "n_host_events", "n_device_events", "n_dropped")}


def test_nothing_recorded_or_unreadable_events_leave_an_empty_trace():
    profiler = DeepProfiler("p", cuda=False)
    nothing = build_step(profiler, None)
    assert empty_trace(nothing) == {"file": None, "n_host_events": 0, "n_device_events": 0, "n_dropped": 0}
    assert nothing.summary["n_trace_events"] == 0 and nothing.summary["n_trace_events_dropped"] == 0
    assert nothing.details["unknown_reasons"]["nodes"] == "the profiler recorded nothing"
    unreadable = build_step(profiler, [object()])
    assert empty_trace(unreadable) == {"file": None, "n_host_events": 0, "n_device_events": 0, "n_dropped": 0}
    assert unreadable.details["unknown_reasons"]["trace"].startswith("the ops for the trace were not written")


def test_a_baseline_of_no_time_gives_no_overhead():
    profiler = DeepProfiler("p", cuda=False, profiler_factory=lambda cuda: FakeProfiler(Clock())).start()
    step = build_step(profiler, [], {"prompt_id": "p0", "duration_s": 0})
    assert step.summary["overhead_ratio"] is None and step.summary["baseline_wall_s"] is None
    assert (
        step.details["unknown_reasons"]["overhead"] == "no earlier plain run of this workflow to compare with"
    )
    assert step.findings == ()

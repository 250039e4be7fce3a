"""A run's GPU figures resolved at its end, on a stand-in probe: each node row's stream time from
its own pair of CUDA events, or the reason it has none; each pending row read once."""

from __future__ import annotations

import time

from monitors.engine.gpu_busy import SampleLog
from monitors.engine.run_record import RunRecord, resolve_gpu_times
from monitors.node_fields import NodeProfile


class Probes:
    def __init__(self, elapsed=None):
        self.elapsed = elapsed if elapsed is not None else {}
        self.asked = []

    def gpu_elapsed_s(self, start, end):
        self.asked.append((start, end))
        return self.elapsed.get((start, end))

    def gpu_utilization_samples(self, index, since_unix_s):
        return None


def row(node_id):
    return NodeProfile(
        node_id=node_id,
        class_type="N",
        title=None,
        status="success",
        cached=False,
        start_offset_s=0.0,
        duration_s=1.0,
        peak_rss_bytes=None,
        peak_rss_method=None,
        rss_change_bytes=None,
        gpu_peaks=(),
    )


def record(n_rows, pending, busy_log=None):
    run = RunRecord("p", 1000.0, 0.0, {}, None, busy_log=busy_log)
    run.nodes = [row(str(i)) for i in range(n_rows)]
    run.gpu_pending = list(pending)
    return run


def test_each_row_gets_its_own_events_elapsed_time_or_the_reason():
    ok, failed = ((0, "a"), (0, "b")), ((1, "c"), (1, "d"))
    probes = Probes({ok: 0.25})
    run = record(
        5,
        [
            (0, *ok),
            (1, None, (0, "x")),
            (2, (0, "y"), None),
            (3, (0, "y"), (1, "z")),
            (4, *failed),
        ],
    )
    resolve_gpu_times(run, probes)
    figures = [(n.gpu_time_s, n.gpu_time_unknown_reason) for n in run.nodes]
    assert figures == [
        (0.25, None),
        (None, "CUDA was initialised while this node ran: no event at its start"),
        (None, "the current CUDA device changed while this node ran"),
        (None, "the current CUDA device changed while this node ran"),
        (None, "reading the CUDA events failed (see the probe failures)"),
    ]
    assert probes.asked == [ok, failed]  # events of one device only, each pair once
    assert run.gpu_pending == []
    resolve_gpu_times(run, probes)  # nothing pending any more: nothing read again
    assert probes.asked == [ok, failed]


def test_rows_not_pending_are_left_as_they_are():
    run = record(2, [(1, (0, "a"), (0, "b"))])
    resolve_gpu_times(run, Probes({((0, "a"), (0, "b")): 0.5}))
    assert run.nodes[0] == row("0") and run.nodes[1].gpu_time_s == 0.5


def test_busy_time_is_resolved_with_the_stream_time():
    run = record(1, [(0, (0, "a"), (0, "b"))], busy_log=SampleLog(time.time()))
    resolve_gpu_times(run, Probes({((0, "a"), (0, "b")): 0.5}))
    assert run.nodes[0].gpu_time_s == 0.5
    assert run.nodes[0].gpu_busy_unknown_reason == "NVML gave no utilization samples for this device"


def test_a_new_record_holds_nothing_yet():
    run = RunRecord("p", 1000.0, 5.0, {"1": ("N", None)}, None)
    assert (run.open_nodes, run.nodes, run.steps, run.monitor_errors) == ({}, [], [], [])
    assert run.profile_enabled is True and run.busy_log is None and run.inputs is None
    assert (run.gpu_marks, run.gpu_pending, run.upstream_plan, run.full_results) == ({}, [], {}, {})
    assert run.watched == frozenset()

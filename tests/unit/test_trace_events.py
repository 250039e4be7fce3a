"""The trace export's events one by one (monitors/exporters/trace.py): exact times in microseconds,
lanes, thread and process names, counters from samples, snapshots or the report itself, instants,
ranks and the deep ops nested under node spans. Hand-made reports; no clock, no GPU."""

from __future__ import annotations

import json

from monitors.exporters import trace
from monitors.exporters.trace import report_to_trace, reports_to_trace, write_trace


def row(node_id, start, duration, **extra):
    return {"node_id": node_id, "class_type": f"Class{node_id}", "start_offset_s": start, "duration_s": duration, **extra}


def run(nodes=(), **extra):
    return {"prompt_id": "p", "status": "success", "started_unix_s": 100.0, "duration_s": 4.0, "nodes": list(nodes), **extra}


def of(trace_dict, ph, **match):
    return [e for e in trace_dict["traceEvents"] if e["ph"] == ph and all(e.get(k) == v for k, v in match.items())]


def spans(trace_dict):
    return {e["name"]: e for e in of(trace_dict, "X")}


def thread_names(trace_dict, pid=1):
    return {e["tid"]: e["args"]["name"] for e in of(trace_dict, "M", name="thread_name", pid=pid)}


class Snap:
    def __init__(self, unix_time_s, **metrics):
        self.unix_time_s = unix_time_s
        self._metrics = metrics

    def metrics(self):
        return dict(self._metrics)


def profiling(details):
    return {"kind": "profiling", "node_id": None, "summary": {}, "details": details}


# -- times and names ---------------------------------------------------------------------------


def test_microseconds_rounded_to_the_nanosecond():
    t = reports_to_trace([run([row("1", 0.1234567891, 0.0000012345)], duration_s=1.0000004)])
    node = spans(t)["Class1"]
    assert node["ts"] == 123456.789 and node["dur"] == 1.234 and spans(t)["p"]["dur"] == 1000000.4


def test_the_run_span_and_the_process_names():
    t = reports_to_trace([run(span={"peak_rss_bytes": 77}, status="error")])
    (whole,) = of(t, "X", cat="run")
    assert whole == {
        "name": "p", "cat": "run", "ph": "X", "ts": 0.0, "dur": 4000000.0, "pid": 1, "tid": 0,
        "args": {"status": "error", "peak_rss_bytes": 77},
    }
    meta = of(t, "M", pid=1, tid=0)
    assert meta == [
        {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "p"}},
        {"name": "process_sort_index", "ph": "M", "pid": 1, "tid": 0, "args": {"sort_index": 1}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "run"}},
    ]


def test_a_run_without_duration_or_prompt_id():
    t = reports_to_trace([run(duration_s=None, prompt_id=None)])
    assert of(t, "X") == []
    assert of(t, "M", name="process_name")[0]["args"]["name"] == "run"
    t = reports_to_trace([run(prompt_id=None, system={"rank": 0})])
    assert spans(t)["run"]["pid"] == 1
    assert of(t, "M", name="process_name")[0]["args"]["name"] == "run (rank 0)"


def test_node_spans_labels_and_args():
    peaks = [{"device": "cuda:0", "peak_allocated_bytes": 9}]
    nodes = [
        row("1", 0.0, 1.0, title="Load", status="executed", peak_rss_bytes=5, rss_change_bytes=-2, gpu_peaks=peaks),
        row("2", 1.0, 1.0),
        {"node_id": "3", "start_offset_s": 2.0, "duration_s": 0.5},
        {"node_id": "4", "class_type": "Cached", "start_offset_s": None, "duration_s": None},
        {"node_id": "5", "class_type": "Half", "start_offset_s": 1.0, "duration_s": None},
        "not a row",
    ]
    t = reports_to_trace([run(nodes)])
    assert set(spans(t)) == {"p", "Load", "Class2", "node 3"}
    assert spans(t)["Load"] == {
        "name": "Load", "cat": "Class1", "ph": "X", "ts": 0.0, "dur": 1000000.0, "pid": 1, "tid": 1,
        "args": {"node_id": "1", "status": "executed", "peak_rss_bytes": 5, "rss_change_bytes": -2, "gpu_peaks": peaks},
    }
    assert spans(t)["node 3"]["cat"] == "node" and spans(t)["node 3"]["args"]["gpu_peaks"] == []
    assert spans(t)["Class2"]["ts"] == 1000000.0


# -- lanes and threads -------------------------------------------------------------------------


def lanes_of(*nodes):
    """Node ids by lane (trace thread) of one run's trace, each lane in the order of its spans."""
    t = reports_to_trace([run([row(node_id, start, duration) for start, duration, node_id in nodes])])
    names = thread_names(t)
    by_lane: dict = {}
    node_spans = [e for e in of(t, "X") if "node_id" in e["args"]]
    for e in sorted(node_spans, key=lambda e: (e["ts"], -e["dur"])):
        by_lane.setdefault(names[e["tid"]], []).append(e["args"]["node_id"])
    return list(by_lane.values())


def test_lanes_nest_or_follow_and_half_overlaps_go_to_another_lane():
    rows = [
        (0.0, 1.0, "b"),  # same start as a, shorter: inside a, whatever the order given
        (0.0, 2.0, "a"),
        (1.0, 1.0, "c"),  # starts where b ends, ends where a ends: inside a
        (1.5, 1.0, "d"),  # half-overlaps a and c
        (2.0, 0.5, "e"),  # after a
        (1.6, 0.5, "g"),  # half-overlaps c, inside d: d's lane
        (2.5, 0.5, "f"),  # starts where e ends
    ]
    assert lanes_of(*rows) == [["a", "b", "c", "e", "f"], ["d", "g"]]
    assert lanes_of() == []
    # a row inside the outer interval but past the inner one's end half-overlaps the inner one
    assert lanes_of((0.0, 3.0, "x"), (0.0, 1.5, "y"), (1.2, 0.8, "z")) == [["x", "y"], ["z"]]


def test_overlapping_nodes_get_numbered_lanes_per_thread_main_first():
    nodes = [row("1", 0.0, 2.0), row("2", 1.0, 2.0), row("3", 0.0, 1.0), row("4", 0.5, 1.0), row("5", 0.0, 1.0)]
    threads = {"3": "worker", "4": "worker", "5": "alpha"}
    t = reports_to_trace([run(nodes, steps=[profiling({"stage_threads": threads})])])
    assert thread_names(t) == {0: "run", 1: "main", 2: "main (2)", 3: "alpha", 4: "worker", 5: "worker (2)"}
    tids = {name: e["tid"] for name, e in spans(t).items()}
    assert tids == {"p": 0, "Class1": 1, "Class2": 2, "Class5": 3, "Class3": 4, "Class4": 5}


def test_stage_threads_that_are_not_a_mapping_are_ignored():
    report = run([row("1", 0.0, 1.0)], steps=["not a step", profiling({"stage_threads": ["x"]})])
    assert thread_names(reports_to_trace([report])) == {0: "run", 1: "main"}
    assert trace._thread_of(run(steps=[profiling({"stage_threads": {1: 2}})])) == {"1": "2"}
    assert trace._thread_of(run()) == {}


# -- counters ----------------------------------------------------------------------------------


def test_stored_samples_become_counters_at_their_times():
    samples = {
        "t_s": [0.0, 0.5, 1.0000000004],
        "process_rss_bytes": [10, None, 30],
        "cuda:0.utilization_pct": [1.5, 2.5],  # shorter: the rest unknown
        "note": 5,
        "flags": ["a", "b", "c"],
    }
    t = reports_to_trace([run(steps=[profiling({"samples": samples})], started_unix_s=100.5)])
    counters = [(e["name"], e["ts"], e["args"]["value"]) for e in of(t, "C")]
    assert counters == [
        ("process_rss_bytes", 0.0, 10),
        ("process_rss_bytes", 1000000.0, 30),
        ("cuda:0.utilization_pct", 0.0, 1.5),
        ("cuda:0.utilization_pct", 500000.0, 2.5),
    ]
    assert all(e["pid"] == 1 and e["tid"] == 0 and e["ph"] == "C" for e in of(t, "C"))


def test_counter_times_are_offset_by_the_run_start():
    samples = {"t_s": [0.25, "x"], "process_rss_bytes": [1, 2]}
    first = run(prompt_id="a", started_unix_s=100.0, duration_s=None)
    second = run(prompt_id="b", started_unix_s=101.5, duration_s=None, steps=[profiling({"samples": samples})])
    t = reports_to_trace([first, second])
    assert [(e["pid"], e["ts"]) for e in of(t, "C")] == [(2, 1750000.0)]  # "x" is no time


def test_snapshots_become_columns_padded_where_a_metric_is_missing():
    snaps = [Snap(10.0, rss=1), Snap(10.5, rss=2, gpu=7), Snap(11.0, gpu=8)]
    assert trace._samples_from_snapshots(snaps, 10.0) == {
        "t_s": [0.0, 0.5, 1.0],
        "rss": [1, 2, None],
        "gpu": [None, 7, 8],
    }
    assert trace._samples_from_snapshots([], 10.0) == {"t_s": []}


def test_snapshots_replace_stored_samples_of_a_single_report_only():
    stored = profiling({"samples": {"t_s": [0.0], "stored": [1]}})
    snaps = [Snap(100.25, live=5)]
    t = reports_to_trace([run(steps=[stored])], snaps)
    assert [(e["name"], e["ts"]) for e in of(t, "C")] == [("live", 250000.0)]
    t = reports_to_trace([run(steps=[stored]), run(prompt_id="q", steps=[stored])], snaps)
    assert [e["name"] for e in of(t, "C")] == ["stored", "stored"]


def test_without_samples_the_counters_come_from_the_span_and_the_node_rows():
    span = {
        "baseline": {"process_rss_bytes": 100, "gpus": [{"device": "cuda:0", "allocated_bytes": 1, "reserved_bytes": 2,
                                                          "utilization_pct": 3.0}, "not a gpu"]},
        "end": {"process_rss_bytes": 110, "gpus": []},
        "peaks": {
            "process_rss_bytes": {"at_s": 1.5, "value": 150},
            "cuda:0.reserved_bytes": {"at_s": 2.5, "value": 40},
            "ram_used_bytes": {"at_s": 1.0, "value": 999},  # not a counter of the trace
            "cuda:0.allocated_bytes": "not a peak",
        },
    }
    node = row(
        "1", 1.0, 2.0, rss_start_bytes=101, peak_rss_at_s=0.25, peak_rss_bytes=140, rss_end_bytes=105,
        gpu_peaks=[
            {"device": "cuda:0", "allocated_start_bytes": 11, "peak_allocated_at_s": 0.5, "peak_allocated_bytes": 31,
             "allocated_end_bytes": 21, "reserved_start_bytes": True, "reserved_end_bytes": 22},
            "not a peak",
        ],
    )
    timeless = row("2", None, 1.0, rss_start_bytes=5)
    t = reports_to_trace([run([node, timeless, "not a row"], span=span, duration_s=4.0, steps=[profiling({"samples": {"t_s": []}})])])
    got = [(e["ts"] / 1e6, e["name"], e["args"]["value"]) for e in of(t, "C")]
    assert sorted(got) == sorted([
        (0.0, "process_rss_bytes", 100),
        (1.0, "process_rss_bytes", 101),
        (1.25, "process_rss_bytes", 140),
        (1.5, "process_rss_bytes", 150),
        (3.0, "process_rss_bytes", 105),
        (4.0, "process_rss_bytes", 110),
        (0.0, "cuda:0.allocated_bytes", 1),
        (1.0, "cuda:0.allocated_bytes", 11),
        (1.5, "cuda:0.allocated_bytes", 31),
        (3.0, "cuda:0.allocated_bytes", 21),
        (0.0, "cuda:0.reserved_bytes", 2),
        (2.5, "cuda:0.reserved_bytes", 40),
        (3.0, "cuda:0.reserved_bytes", 22),  # a boolean is no reading
        (0.0, "cuda:0.utilization_pct", 3.0),
    ])


def test_report_counter_columns_in_time_order_padded():
    span = {"baseline": {"process_rss_bytes": 1}, "end": {"process_rss_bytes": 3}, "peaks": {}}
    node = row("1", 0.5, 0.25, rss_start_bytes=2, gpu_peaks=[{"device": "d", "allocated_end_bytes": 9}])
    columns = trace._report_counter_columns(run([node], span=span, duration_s=1.0))
    assert columns == {
        "t_s": [0.0, 0.5, 0.75, 1.0],
        "process_rss_bytes": [1, 2, None, 3],
        "d.allocated_bytes": [None, None, 9, None],
    }
    no_end = trace._report_counter_columns(run(span=span, duration_s=None))
    assert no_end == {"t_s": [0.0], "process_rss_bytes": [1]}
    assert trace._report_counter_columns({"span": "broken"}) == {"t_s": []}


# -- instants, ranks and deep ops --------------------------------------------------------------


def test_recorded_events_become_instants_on_the_run_lane():
    recorded = [
        {"name": "checkpoint", "t_s": 0.5000000004, "thread": "main", "data": {"i": 1}},
        {"name": 7, "t_s": 1},
        {"name": "no time"},
        "not an event",
    ]
    t = reports_to_trace([run(steps=[profiling({"events": recorded})])])
    assert of(t, "i") == [
        {"name": "checkpoint", "cat": "event", "ph": "i", "s": "p", "ts": 500000.0, "pid": 1, "tid": 0,
         "args": {"thread": "main", "data": {"i": 1}}},
        {"name": "7", "cat": "event", "ph": "i", "s": "p", "ts": 1000000.0, "pid": 1, "tid": 0,
         "args": {"thread": None, "data": None}},
    ]


def test_ranks_pids_origin_and_runs():
    reports = [
        run(prompt_id="r2", system={"rank": 2}, started_unix_s=50.5),
        run(prompt_id="x", system={"rank": -1}, started_unix_s=None),
        run(prompt_id="y", system={"rank": 0}, started_unix_s=50.0),
        run(prompt_id="z", system={"rank": "1"}, started_unix_s=50.0000000004),
    ]
    t = reports_to_trace(reports)
    pids = {e["name"]: e["pid"] for e in of(t, "X", cat="run")}
    assert pids == {"r2": 3, "x": 2, "y": 1, "z": 4}  # rank + 1, else the report's place + 1
    starts = {e["name"]: e["ts"] for e in of(t, "X", cat="run")}
    assert starts == {"r2": 500000.0, "x": 0.0, "y": 0.0, "z": 0.0}  # no start: at the origin; ns rounding
    assert t["displayTimeUnit"] == "ms"
    assert t["otherData"] == {"source": "pipeline_monitor", "origin_unix_s": 50.0, "runs": ["r2", "x", "y", "z"]}
    assert reports_to_trace([run(started_unix_s=None)])["otherData"]["origin_unix_s"] == 0.0


def test_deep_ops_nest_under_the_node_span_of_their_prompt():
    ops = {"host": [["1", "aten::mm", 10.0, 5.0, 0], ["9", "elsewhere", 0.0, 1.0, 0]], "device": []}
    report = run([row("1", 1.0, 1.0)])
    t = report_to_trace(report, deep_ops=ops)
    (op,) = [e for e in of(t, "X") if e.get("cat") == "op"]
    node = spans(t)["Class1"]
    assert (op["name"], op["tid"], op["ts"], op["dur"]) == ("aten::mm", node["tid"], 1000010.0, 5.0)
    assert [e for e in of(reports_to_trace([report], deep_ops={"other": ops}), "X") if e.get("cat") == "op"] == []
    assert [e for e in of(report_to_trace(report), "X") if e.get("cat") == "op"] == []
    first = trace._node_events(run([row("1", 1.0, 1.0), row("1", 2.0, 1.0)]), 1, 0.0)[1]
    assert first == {"1": (1, 1000000.0, 2000000.0, "Class1")}  # a node's first span


def test_write_trace_takes_one_report_or_several(tmp_path):
    one = write_trace(str(tmp_path / "one.json"), run())
    assert one == str(tmp_path / "one.json")
    assert json.loads((tmp_path / "one.json").read_text())["otherData"]["runs"] == ["p"]
    write_trace(str(tmp_path / "two.json"), [run(), run(prompt_id="q")])
    assert json.loads((tmp_path / "two.json").read_text())["otherData"]["runs"] == ["p", "q"]

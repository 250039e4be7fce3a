"""Chrome/Perfetto trace export: complete, counter, instant and metadata events in microseconds."""

import json

import pytest

from monitors import pipeline_profiler as pm
from monitors.engine.sampler import Sampler
from monitors.exporters.trace import reports_to_trace, write_trace
from monitors.probes.fake import fake_probes


def node(node_id, class_type, start, duration, **extra):
    return {
        "node_id": node_id,
        "class_type": class_type,
        "title": None,
        "status": "executed",
        "cached": False,
        "start_offset_s": start,
        "duration_s": duration,
        "peak_rss_bytes": 100,
        "gpu_peaks": [],
        **extra,
    }


def comfy_report(**extra):
    return {
        "schema_version": 1,
        "prompt_id": "p1",
        "status": "success",
        "started_unix_s": 1000.0,
        "duration_s": 2.0,
        "span": {"peak_rss_bytes": 5},
        "system": {},
        "steps": [],
        "nodes": [
            node("1", "CheckpointLoader", 0.0, 0.5),
            node("2", "KSampler", 0.5, 1.0),
            node("3", "VAEDecode", 1.2, 0.6),  # overlaps KSampler without nesting: another lane
            {
                "node_id": "4",
                "class_type": "Cached",
                "cached": True,
                "start_offset_s": None,
                "duration_s": None,
            },
        ],
        **extra,
    }


def events(trace, ph):
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def check_lanes_nest(trace):
    """Within one (pid, tid) complete events nest or follow each other, as the format needs."""
    by_lane = {}
    for e in events(trace, "X"):
        by_lane.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_lane.values():
        stack = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-6, f"half-overlap in a lane: {spans}"
            stack.append(end)


def test_comfyui_report_timeline():
    trace = reports_to_trace([comfy_report()])
    json.dumps(trace, allow_nan=False)
    complete = {e["name"]: e for e in events(trace, "X")}
    assert set(complete) == {"p1", "CheckpointLoader", "KSampler", "VAEDecode"}  # cached node: no bar
    assert complete["KSampler"]["ts"] == 500_000 and complete["KSampler"]["dur"] == 1_000_000
    assert complete["p1"]["ts"] == 0 and complete["p1"]["dur"] == 2_000_000
    assert complete["VAEDecode"]["tid"] != complete["KSampler"]["tid"]
    check_lanes_nest(trace)
    meta = events(trace, "M")
    assert {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "p1"}} in meta
    thread_names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert thread_names[0] == "run" and thread_names[complete["KSampler"]["tid"]] == "main"
    for e in events(trace, "X"):
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e)


def test_profiling_session_trace_has_counters_events_and_threads(tmp_path):
    pm.configure(
        report={"output_dir": str(tmp_path), "format": "json", "trace": True},
        sampling={"gpu_interval_s": 0.01, "cpu_interval_s": 0.01},
        probes=fake_probes("1 GPU"),
    )
    try:
        import threading
        import time

        @pm.profile_method("work")
        def work():
            time.sleep(0.03)

        with pm.profile_session("traced") as session:
            with pm.profile_method("outer"):
                work()
            t = threading.Thread(target=work, name="helper")
            t.start()
            t.join()
            pm.record_event("checkpoint", lambda: {"i": 1})
    finally:
        pm.configure()
    trace = json.load(open(session.paths["trace"]))
    check_lanes_nest(trace)
    names = {e["args"]["name"] for e in events(trace, "M") if e["name"] == "thread_name"}
    assert {"run", "main", "helper"} <= names
    counters = {e["name"] for e in events(trace, "C")}
    assert {"process_rss_bytes", "cuda:0.allocated_bytes", "cuda:0.utilization_pct"} <= counters
    assert all(isinstance(e["args"]["value"], (int, float)) for e in events(trace, "C"))
    (instant,) = events(trace, "i")
    assert instant["name"] == "checkpoint" and instant["args"]["data"] == {"i": 1}
    outer = next(e for e in events(trace, "X") if e["name"] == "outer")
    inner = [e for e in events(trace, "X") if e["name"] == "work" and e["tid"] == outer["tid"]]
    assert (
        inner
        and outer["ts"] <= inner[0]["ts"]
        and inner[0]["ts"] + inner[0]["dur"] <= outer["ts"] + outer["dur"]
    )


def test_ranks_become_processes_on_a_common_time_axis(tmp_path):
    a = comfy_report(prompt_id="r0", system={"rank": 0})
    b = comfy_report(prompt_id="r1", system={"rank": 1}, started_unix_s=1000.25)
    path = write_trace(str(tmp_path / "job.trace.json"), [a, b])
    trace = json.load(open(path))
    runs = {e["name"]: e for e in events(trace, "X") if e.get("cat") == "run"}
    assert runs["r0"]["pid"] == 1 and runs["r1"]["pid"] == 2
    assert runs["r1"]["ts"] - runs["r0"]["ts"] == pytest.approx(250_000)
    labels = {e["pid"]: e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"}
    assert labels == {1: "r0 (rank 0)", 2: "r1 (rank 1)"}


def test_sampler_snapshots_become_counters():
    sampler = Sampler(probes=fake_probes("2 GPUs"))
    snapshots = [sampler.sample_once() for _ in range(3)]
    report = comfy_report(started_unix_s=snapshots[0].unix_time_s)
    trace = reports_to_trace([report], snapshots)
    rss = [e for e in events(trace, "C") if e["name"] == "process_rss_bytes"]
    assert len(rss) == 3 and rss[0]["ts"] == pytest.approx(0, abs=1)
    assert {e["name"] for e in events(trace, "C")} >= {"cuda:0.allocated_bytes", "cuda:1.allocated_bytes"}

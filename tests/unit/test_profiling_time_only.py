"""The profiling API's time-only stages: with no memory figure configured, a stage is two clock
reads (no span, no probe, no psutil call); rows keep their shape with memory figures None."""

import json
import os
import threading

import jsonschema
import pytest

from monitors import pipeline_profiler as pm
from monitors.engine import span as span_module
from monitors.pipeline_profiler import usage
from monitors.pipeline_profiler.session import measures_memory

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = json.load(open(os.path.join(REPO, "schemas", "run_report.schema.json")))
NO_MEMORY = {"system_memory": False, "gpu_memory": False}


@pytest.fixture
def time_only(tmp_path):
    usage.reset_usage_statistics()

    def configure(**keys):
        keys.setdefault("report", {"output_dir": str(tmp_path), "format": "json", "trace": True})
        keys.setdefault("sampling", {"gpu_interval_s": 60.0, "cpu_interval_s": 60.0})
        return pm.configure(metrics=NO_MEMORY, **keys)

    yield configure
    pm.configure()
    usage.reset_usage_statistics()


@pm.profile_method("outer")
def outer(n):
    return sum(step(i=i) for i in range(n))


@pm.profile_diffusion_step(lambda args, kwargs, result: {"step_index": kwargs["i"]})
def step(i):
    return i


@pytest.fixture
def no_spans(monkeypatch):
    """Fails any span opened after the session started: stages must not open one."""

    def refuse(self):
        raise AssertionError(f"span {self.name} opened by a time-only stage")

    return lambda: monkeypatch.setattr(span_module.Span, "start", refuse)


def test_only_a_memory_figure_asks_for_memory_readings():
    assert measures_memory(pm.configure())  # the defaults measure memory
    assert measures_memory(pm.configure(metrics={"system_memory": False}))  # GPU memory still on
    assert not measures_memory(pm.configure(metrics=NO_MEMORY))
    pm.configure()


def test_time_only_rows_and_phases(time_only, no_spans):
    time_only()
    with pm.profile_session("timed") as session:
        no_spans()
        assert outer(4) == 6
        with pm.profile_method("block"):
            step(i=9)
    report = json.load(open(session.paths["json"]))
    jsonschema.validate(report, SCHEMA)
    assert report["monitor_errors"] == []
    rows = [(n["class_type"], n["title"]) for n in report["nodes"]]
    assert rows == [("outer", "outer")] + [("inference_steps", f"step {i}") for i in range(4)] + [
        ("block", "block"),
        ("inference_steps", "step 9"),
    ]
    for node in report["nodes"]:
        assert node["peak_rss_bytes"] is None and node["gpu_peaks"] == [] and node["duration_s"] >= 0
        assert node["peak_rss_method"] is None and node["peak_rss_above_start_bytes"] is None
    first, steps = report["nodes"][0], report["nodes"][1:5]
    assert all(first["start_offset_s"] <= s["start_offset_s"] for s in steps)  # one clock: nested
    assert first["duration_s"] >= sum(s["duration_s"] for s in steps)  # one clock: contains its steps
    details = report["steps"][0]["details"]
    assert details["config"]["metrics"]["system_memory"] is False  # why the memory figures are None
    phases = {p["stage"]: p for p in details["phases"]}
    assert phases["inference_steps"]["n_calls"] == 5 and phases["inference_steps"]["depth"] == 1
    assert phases["outer"]["depth"] == 0 and phases["outer"]["peak_rss_bytes"] is None
    assert report["steps"][0]["summary"]["n_steps"] == 5


def test_time_only_errors_bounds_and_threads(time_only):
    time_only(max_data_points=10)

    @pm.profile_method("fails")
    def fails():
        raise ValueError("boom")

    with pytest.raises(ValueError), pm.profile_session("bounded") as session:
        workers = [threading.Thread(target=outer, args=(3,), name=f"w{i}") for i in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        for i in range(20):
            step(i=i)
        fails()
    report = session.report
    assert len(report.nodes) == 10 and report.status == "error"
    assert set(session.stage_threads.values()) == {"w0", "w1"}
    phases = {p["stage"]: p for p in report.steps[0].details["phases"]}
    assert phases["inference_steps"]["n_calls"] == 26 and phases["fails"]["n_errors"] == 1
    assert any("more than 10 stage calls" in m for m in report.monitor_errors)
    assert report.steps[0].summary["n_steps"] == 26


def test_a_stage_left_open_is_closed_as_interrupted_by_the_session(time_only):
    time_only()
    stage = pm.profile_method("left_open")
    with pm.profile_session("open") as session:
        stage.__enter__()
    (node,) = session.report.nodes
    assert node.status == "interrupted" and node.duration_s >= 0

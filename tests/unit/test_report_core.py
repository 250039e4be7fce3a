"""The run report's own code (monitors/report.py): values made plain for JSON, frozen reports and
their dicts, the run-list row, the atomic JSON file, unknown sums, a failed monitor's step, byte
sizes and the log line, each with exact values."""

from __future__ import annotations

import dataclasses
import enum
import fractions
import json
import math
import os
import types

import numpy as np
import pytest

from monitors import report as run_report
from monitors.cli.aggregate import ReportError, load_report
from monitors.node_fields import GpuPeak, NodeProfile
from monitors.report import (
    Finding,
    RunReport,
    StepReport,
    failed_step,
    format_bytes,
    format_run_summary,
    run_summary,
    sum_known,
    to_jsonable,
    write_json_atomic,
)


class Opaque:
    pass


class Named:
    def __str__(self):
        return "named thing"


class Wide(float):
    pass


class Word(enum.StrEnum):
    ODD = "object at 0x1"


@dataclasses.dataclass
class Plain:
    a: float
    b: tuple


# -- to_jsonable -------------------------------------------------------------------------------


def test_plain_values_and_floats():
    for value in ("text", 3, True, None):
        assert to_jsonable(value) is value
    assert to_jsonable(1.5) == 1.5
    assert to_jsonable(math.nan) is None and to_jsonable(math.inf) is None and to_jsonable(-math.inf) is None


def test_containers_mappings_and_dataclasses():
    assert to_jsonable({1: 2.5, "x": math.nan, "y": [math.inf, (1, 2)]}) == {"1": 2.5, "x": None, "y": [None, [1, 2]]}
    assert to_jsonable(types.MappingProxyType({2: math.nan, "k": "v"})) == {"2": None, "k": "v"}
    assert to_jsonable((1, "a")) == [1, "a"]
    assert to_jsonable({3}) == [3] and to_jsonable(frozenset({4})) == [4]
    assert to_jsonable(Plain(math.nan, (1,))) == {"a": None, "b": [1]}
    assert to_jsonable(Finding("warning", "m")) == {"level": "warning", "message": "m", "code": None}
    assert to_jsonable(Finding) == "<class 'monitors.report.Finding'>"  # a class is no record


def test_number_types_are_numbers_and_objects_are_named():
    assert to_jsonable(np.int64(7)) == 7 and type(to_jsonable(np.int64(7))) is int
    assert to_jsonable(np.float32(0.5)) == 0.5 and type(to_jsonable(np.float32(0.5))) is float
    assert to_jsonable(np.float32("nan")) is None
    assert to_jsonable(fractions.Fraction(1, 4)) == 0.25
    assert to_jsonable(Wide(1.5)) == 1.5 and to_jsonable(Wide("inf")) is None
    assert to_jsonable(Word.ODD) == "object at 0x1"  # a string is kept, whatever its text
    assert to_jsonable(Opaque()) == f"{__name__}.Opaque"
    assert to_jsonable(Named()) == "named thing"
    assert to_jsonable(object()) == "builtins.object"


# -- the records -------------------------------------------------------------------------------


def _node(**extra):
    return NodeProfile("5", "KSampler", "executed", False, **extra)


@pytest.mark.parametrize(
    "record",
    [
        Finding("info", "m"),
        GpuPeak("cuda:0", 1, 2),
        _node(),
        StepReport("lora", "1"),
        RunReport("p", "success", 1.0, 2.0, 1.0),
    ],
    ids=lambda r: type(r).__name__,
)
def test_records_are_frozen(record):
    name = dataclasses.fields(record)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, name, "changed")


def test_records_as_dicts():
    peak = GpuPeak("cuda:0", 10, 20, peak_allocated_at_s=math.nan)
    node = _node(gpu_peaks=(peak,), duration_s=1.5)
    as_dict = node.to_dict()
    assert as_dict["gpu_peaks"] == [peak.to_dict()] and peak.to_dict()["peak_allocated_at_s"] is None
    assert as_dict["duration_s"] == 1.5 and as_dict["cached"] is False
    step = StepReport("lora", "1", summary={"n": 1}, findings=(Finding("error", "x", "code"),))
    assert step.cached is False and step.monitor_errors == ()
    assert step.to_dict() == {
        "kind": "lora", "node_id": "1", "summary": {"n": 1}, "details": {},
        "findings": [{"level": "error", "message": "x", "code": "code"}], "monitor_errors": [],
        "created_unix_s": None, "cached": False, "pending": False, "unfinished_reason": None,
    }
    run = RunReport("p", "success", 1.0, 2.0, 1.0, nodes=(node,), steps=(step,))
    out = run.to_dict()
    assert out["profile_enabled"] is True and out["schema_version"] == run_report.SCHEMA_VERSION
    assert out["nodes"] == [as_dict] and out["steps"] == [step.to_dict()]
    assert run.summary_dict() == run_summary(out) and run.summary_dict()["n_nodes"] == 1


def test_the_run_peak_comes_from_its_span():
    assert RunReport("p", "success", 1.0, None, None).peak_rss_bytes is None
    assert RunReport("p", "success", 1.0, None, None, span={}).peak_rss_bytes is None
    assert RunReport("p", "success", 1.0, None, None, span={"peak_rss_bytes": 5}).peak_rss_bytes == 5


# -- the run-list row --------------------------------------------------------------------------


def test_run_summary_counts_and_peaks():
    nodes = [
        {"cached": True, "gpu_peaks": [{"peak_allocated_bytes": 30, "peak_process_used_bytes": 900}, {"peak_allocated_bytes": None}]},
        {"cached": False, "gpu_peaks": [{"peak_allocated_bytes": 70, "peak_process_used_bytes": 500}, "not a peak", {"peak_allocated_bytes": "9"}]},
        {"cached": False},
        "not a node",
    ]
    steps = [
        {"kind": "lora", "findings": [{"level": "warning"}, {"level": "error"}, "x"], "monitor_errors": ["a", "b"]},
        {"kind": "models", "findings": [{"level": "warning"}, {"level": "info"}]},
        {"kind": "lora"},
        "not a step",
    ]
    changes = {"first_run": False, "n_changes": 6, "changes": list("abcdef"), "unknown_reason": None, "other": 1}
    report = {
        "schema_version": 4, "prompt_id": "p", "status": "success", "started_unix_s": 10.0, "duration_s": 2.0,
        "span": {"peak_rss_bytes": 99}, "nodes": nodes, "steps": steps,
        "workflow": {"name": "wf", "id": "w1"}, "input_changes": changes,
    }
    assert run_summary(report) == {
        "schema_version": 4, "prompt_id": "p", "status": "success", "started_unix_s": 10.0, "duration_s": 2.0,
        "peak_rss_bytes": 99, "peak_gpu_allocated_bytes": 70, "n_nodes": 3, "n_cached": 1,
        # each peak its own highest, whichever node has it (not the node with the highest allocation)
        "peak_process_used_bytes": 900, "peak_aimdo_used_bytes": None,
        "step_kinds": ["lora", "models"], "workflow_name": "wf", "workflow_id": "w1",
        "n_errors": 1, "n_warnings": 4,  # two warnings and two monitoring problems
        "input_changes": {"first_run": False, "n_changes": 6, "changes": ["a", "b", "c", "d"], "unknown_reason": None},
        "complete": True,  # no step pending after the prompt (absent: an older report, complete)
    }


def test_run_summary_of_a_bare_report():
    row = run_summary({"span": "broken", "workflow": "broken", "input_changes": {"changes": "broken"}})
    assert row["peak_rss_bytes"] is None and row["peak_gpu_allocated_bytes"] is None
    assert row["n_nodes"] == 0 and row["n_cached"] == 0 and row["step_kinds"] == []
    assert row["workflow_name"] is None and row["n_errors"] == 0 and row["n_warnings"] == 0
    assert row["input_changes"] == {"first_run": None, "n_changes": None, "changes": None, "unknown_reason": None}
    assert run_summary({"input_changes": None})["input_changes"] is None


# -- the JSON file -----------------------------------------------------------------------------


def test_json_written_indented_or_compact_into_new_or_existing_folders(tmp_path):
    path = tmp_path / "a" / "b" / "r.json"
    write_json_atomic(str(path), {"x": [1, math.nan]})
    assert path.read_text() == '{\n "x": [\n  1,\n  null\n ]\n}'
    write_json_atomic(str(path), {"x": 2}, compact=True)
    assert path.read_text() == '{"x": 2}'
    assert sorted(os.listdir(path.parent)) == ["r.json"]  # no temporary file left


def test_json_is_flushed_to_the_disk_unless_not_durable(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    write_json_atomic(str(tmp_path / "d.json"), {"a": 1})
    assert len(synced) == 1
    write_json_atomic(str(tmp_path / "d.json"), {"a": 2}, durable=False)
    assert len(synced) == 1 and json.loads((tmp_path / "d.json").read_text()) == {"a": 2}


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    write_json_atomic(str(path), {"old": True})

    def fail(*_args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_json_atomic(str(path), {"new": True})
    assert json.loads(path.read_text()) == {"old": True} and os.listdir(tmp_path) == ["r.json"]


# -- small helpers -----------------------------------------------------------------------------


def test_sum_known():
    assert sum_known([None, 1, 2.5]) == 3.5
    assert sum_known([0, None]) == 0
    assert sum_known([None, None]) is None and sum_known([]) is None


def test_failed_step_keeps_the_error_and_the_traceback_tail():
    try:
        raise ValueError("x" * 9000 + "END")
    except ValueError as exc:
        step = failed_step("lora", 7, exc)
    assert step.kind == "lora" and step.node_id == "7" and step.summary == {}
    trace = step.details["traceback"]
    assert len(trace) == run_report.MAX_TRACEBACK_CHARS == 8000 and trace.endswith("xEND\n")
    assert step.monitor_errors == ("ValueError: " + "x" * 9000 + "END",)
    assert isinstance(step.created_unix_s, float)
    assert failed_step("vae_encode", None, RuntimeError("r")).node_id is None
    assert failed_step("vae_encode", None, RuntimeError("r")).details["traceback"].startswith("RuntimeError: r")


@pytest.mark.parametrize(
    "n,text",
    [
        (None, "unknown"),
        (0, "0 B"),
        (0.4, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (-1536, "-1.5 KiB"),
        (1024**2, "1.0 MiB"),
        (3 * 1024**3, "3.0 GiB"),
        (1024**4, "1.0 TiB"),
        (2048 * 1024**4, "2048.0 TiB"),  # no unit above TiB
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_the_log_line_of_a_run():
    nodes = (
        _node(duration_s=1.25),
        NodeProfile("6", "VAEDecode", "executed", False, duration_s=3.5),
        NodeProfile("7", "Loader", "executed", False),
        NodeProfile("8", "Slow", "cached", True, duration_s=9.0),
    )
    report = RunReport(
        "p1", "error", 1.0, 5.0, 4.0, nodes=nodes, steps=(StepReport("lora", "1"), StepReport("models", "2")),
        span={"peak_rss_bytes": 2048, "peak_rss_method": "kernel_hwm"},
        error={"node_id": "6", "exception_type": "RuntimeError"}, monitor_errors=("a", "b"),
    )
    assert format_run_summary(report) == (
        "Pipeline Monitor: prompt p1 error in 4.00 s; peak RSS 2.0 KiB (kernel_hwm); 4 nodes (1 cached); "
        "slowest #6 VAEDecode 3.50 s; steps: lora, models; error in node 6: RuntimeError; 2 monitoring problem(s)"
    )
    bare = RunReport("p2", "success", 1.0, None, None)
    assert format_run_summary(bare) == "Pipeline Monitor: prompt p2 success in unknown time; peak RSS unknown"


@pytest.mark.parametrize("version", [1, 2, 3])
def test_reports_of_each_readable_version_load(tmp_path, version):
    report = {"schema_version": version, "prompt_id": "p", "status": "success", "started_unix_s": 1.0,
              "duration_s": None, "nodes": [], "steps": [], "system": {}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    assert load_report(str(path))["prompt_id"] == "p"
    path.unlink()  # not a whole report: the session's schema check of written reports skips it


@pytest.mark.parametrize("version", [0, 5])
def test_reports_of_other_versions_are_refused_saying_which_are_read(tmp_path, version):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"schema_version": version}))
    with pytest.raises(ReportError, match=f"schema_version {version}; this tool reads 1, 2, 3 and 4$"):
        load_report(str(path))
    path.unlink()

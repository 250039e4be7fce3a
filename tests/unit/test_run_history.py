"""Runs a person can tell apart and find again: the workflow a prompt was queued from, warning and
error counts in the run list, and the history read back from disk after a restart."""

import dataclasses
import json
import os

import jsonschema

from monitors.engine.prompt_info import workflow_from_extra_data
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.report import Finding, RunReport, StepReport, run_summary

from .test_report_store import SCHEMA, make_report


def test_workflow_comes_from_the_graph_the_frontend_sends():
    extra = {"extra_pnginfo": {"workflow": {"id": "w-1", "nodes": [], "extra": {"pipeline_monitor_workflow_name": "lora test"}}}}
    assert workflow_from_extra_data(extra) == {"name": "lora test", "id": "w-1", "name_unknown_reason": None}
    unnamed = workflow_from_extra_data({"extra_pnginfo": {"workflow": {"id": "w-2", "extra": {}}}})
    assert unnamed["name"] is None and "no name" in unnamed["name_unknown_reason"]
    assert workflow_from_extra_data({}) is None
    assert workflow_from_extra_data({"extra_pnginfo": {"workflow": "junk"}}) is None
    assert workflow_from_extra_data(None) is None


def test_recorder_writes_the_workflow_into_the_report_and_the_summary(tmp_path):
    store = RunStore(str(tmp_path))
    recorder = RunRecorder(store)
    recorder.begin_run("p1", {})
    recorder.end_run("success", workflow={"name": "demo", "id": "w-1", "name_unknown_reason": None})
    data = store.get("p1")
    assert data["workflow"]["name"] == "demo"
    jsonschema.validate(data, SCHEMA)
    summary = store.summaries()[0]
    assert summary["workflow_name"] == "demo" and summary["workflow_id"] == "w-1"


def test_summary_counts_warnings_and_errors():
    step = StepReport(
        "lora",
        "3",
        findings=(Finding("warning", "3 keys unmatched"), Finding("info", "note"), Finding("error", "bad")),
        monitor_errors=("norm failed",),
    )
    report = dataclasses.replace(make_report(), steps=(step,))
    summary = report.summary_dict()
    assert (summary["n_warnings"], summary["n_errors"]) == (2, 1)
    assert summary == run_summary(json.loads(json.dumps(report.to_dict())))


def test_history_is_read_back_from_disk_newest_first_and_bounded(tmp_path):
    writer = RunStore(str(tmp_path))
    for i in range(5):
        report = dataclasses.replace(make_report(f"p{i}"), started_unix_s=100.0 + i, workflow={"name": f"w{i}", "id": None})
        writer.add(report)
        os.utime(tmp_path / f"p{i}.json", (1000 + i, 1000 + i))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "p9.json").write_text(json.dumps({"prompt_id": "other"}))  # a file under a wrong name
    restarted = RunStore(str(tmp_path), max_runs=3)
    assert restarted.load_from_disk() == 3
    assert [s["prompt_id"] for s in restarted.summaries()] == ["p4", "p3", "p2"]
    assert restarted.summaries()[0]["workflow_name"] == "w4"
    assert restarted.get("p4")["prompt_id"] == "p4"
    assert RunStore(None).load_from_disk() == 0
    assert RunStore(str(tmp_path / "missing")).load_from_disk() == 0


def test_reports_without_a_workflow_still_validate():
    data = make_report().to_dict()
    assert data["workflow"] is None
    jsonschema.validate(data, SCHEMA)
    del data["workflow"]
    jsonschema.validate(data, SCHEMA)  # reports written before the field existed
    assert isinstance(RunReport, type)


def test_html_report_title_names_the_workflow():
    from monitors.exporters.html import render_html

    data = dataclasses.replace(make_report(), workflow={"name": "日本 <flow>", "id": None}).to_dict()
    page = render_html(data)
    assert "<title>Pipeline Monitor · 日本 &lt;flow&gt; · p1</title>" in page
    assert "workflow <b>日本 &lt;flow&gt;</b>" in page
    assert "<title>Pipeline Monitor · p1</title>" in render_html(make_report().to_dict())


def test_html_report_reads_as_text_with_one_verdict_and_labelled_system_rows():
    from monitors.exporters.html import render_html

    verdict = "close: 1 tensors within rtol=1e-05 atol=1e-08"
    compare = StepReport(
        "tensor_compare",
        "7",
        summary={"status": "close", "verdict": verdict},
        details={"note": "日本の猫"},
        findings=(Finding("info", verdict, "close"),),
    )
    page = render_html(dataclasses.replace(make_report(), steps=(compare,), system={"ram_total_bytes": 2**30}).to_dict())
    assert page.count(verdict) == 1
    assert "日本の猫" in page and "\\u65e5" not in page
    assert "Tensor compare" in page
    assert "<th title=\"ram_total_bytes\">ram total</th>" in page

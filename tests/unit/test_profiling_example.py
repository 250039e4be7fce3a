"""example_pipelines/plain_pipeline.py: a plain torch pipeline on CPU gives JSON, HTML and trace reports."""

import importlib.util
import json
import os

import jsonschema

from monitors import pipeline_profiler as pm
from monitors.cli.aggregate import load_report
from monitors.pipeline_profiler import usage

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_example():
    spec = importlib.util.spec_from_file_location(
        "pm_plain_pipeline", os.path.join(REPO, "example_pipelines", "plain_pipeline.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_writes_json_html_and_trace(tmp_path):
    usage.reset_usage_statistics()
    try:
        sessions = load_example().run(["--output-dir", str(tmp_path), "--generations", "2", "--steps", "5"])
    finally:
        pm.configure()
    schema = json.load(open(os.path.join(REPO, "schemas", "run_report.schema.json")))
    assert len(sessions) == 2
    for session in sessions:
        assert set(session.paths) == {"json", "html", "trace"}
        report = load_report(session.paths["json"])
        jsonschema.validate(report, schema)
        summary = report["steps"][0]["summary"]
        assert summary["n_steps"] == 5 and summary["n_blocks"] == 4 and summary["n_frames"] == 8
        assert summary["n_model_parameters"] == 75387
        stages = {n["class_type"] for n in report["nodes"]}
        assert stages == {"text_encoding", "denoise", "inference_steps", "vae_decode", "block_computation"}
        html = open(session.paths["html"], encoding="utf-8").read()
        assert html.startswith("<!DOCTYPE html>") and session.run_id in html
        trace = json.load(open(session.paths["trace"]))
        assert {"X", "M", "i"} <= {e["ph"] for e in trace["traceEvents"]}
    stats = usage.get_usage_statistics()
    assert stats["n_generations"] == 2 and stats["n_models_initialised"] == 1
    usage.reset_usage_statistics()

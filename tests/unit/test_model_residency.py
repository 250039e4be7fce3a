"""The model-residency log (monitors/engine/model_residency.py) and its findings, through the
recorder: bounded, stamped with the running node, remembered across prompts, summed per node and
per prompt, declared in the schema; and every exporter's view of it (trace track, Prometheus
counters, CSV table, HTML section)."""

from __future__ import annotations

import csv
import io
import json
import types

import jsonschema
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitors.engine import model_residency as module
from monitors.engine.model_residency import ModelEvent, ResidencyLog, busy_seconds
from monitors.engine.recorder import RunRecorder
from monitors.engine.sampler import Sampler
from monitors.engine.store import RunStore
from monitors.exporters import prometheus
from monitors.exporters.csv_tables import model_events_csv, nodes_csv
from monitors.exporters.html import render_html
from monitors.exporters.trace import report_to_trace
from monitors.exporters.trace_models import MODELS_TID
from monitors.probes.fake import fake_probes
from tests.unit.test_report_store import SCHEMA

MiB = 1024 * 1024
PROMPT = {
    "3": {"class_type": "KSampler", "inputs": {}},
    "8": {"class_type": "VAEDecode", "inputs": {}},
    "12": {"class_type": "VAEDecode", "inputs": {}},
}


def load(model_id=1, size=100 * MiB, before=0, after=None, kind="load_full", duration=0.5, **extra):
    after = size if after is None else after
    return ModelEvent(
        kind=kind,
        model_class=extra.pop("model_class", "SDXL"),
        patcher_id=model_id,
        model_id=model_id,
        device="cuda:0",
        duration_s=duration,
        bytes_moved=abs(after - before),
        loaded_before_bytes=before,
        loaded_after_bytes=after,
        model_size_bytes=size,
        **extra,
    )


def unload(model_id=1, size=100 * MiB, reason="free_memory: memory for AutoencoderKL"):
    return load(model_id, size, before=size, after=0, kind="unload_full", duration=0.25, reason=reason)


@pytest.fixture
def recorder(tmp_path):
    return RunRecorder(RunStore(str(tmp_path)), probes=fake_probes("1 GPU"))


def run(recorder, prompt_id, work):
    """work: [(node id, [events])]: each node started, its events recorded, finished."""
    recorder.begin_run(prompt_id, PROMPT)
    for node_id, events in work:
        recorder.node_started(node_id)
        for event in events:
            recorder.model_event(event)
        recorder.node_finished(node_id)
    return recorder.end_run("success").to_dict()


def test_the_log_is_bounded_and_counts_what_it_drops(monkeypatch):
    monkeypatch.setattr(module, "MAX_EVENTS", 3)
    log = ResidencyLog()
    for _ in range(5):
        log.append(load())
    assert len(log.events) == 3 and log.n_dropped == 2
    report = module.residency_report(log, 1.0, None)
    assert report["n_events_dropped"] == 2 and report["n_loads"] == 3


def test_busy_seconds_counts_nested_events_once():
    outer = ModelEvent("load_full", "M", 1, 1, "cpu", 1.0, offset_s=0.0)
    inner = ModelEvent("unpatch", "M", 1, 1, "cpu", 0.5, offset_s=0.2)
    later = ModelEvent("unload_full", "M", 1, 1, "cpu", 0.5, offset_s=2.0)
    assert busy_seconds([outer, inner, later]) == pytest.approx(1.5)


def test_eviction_in_one_prompt_and_reload_in_the_next_name_node_and_cause(recorder, tmp_path):
    first = run(
        recorder, "p1", [("3", [load(1)]), ("8", [unload(1), load(2, 10 * MiB, model_class="AutoencoderKL")])]
    )
    assert [e["node_id"] for e in first["model_residency"]["events"]] == ["3", "8", "8"]
    assert first["model_residency"]["n_models_first_loaded"] == 2
    rows = {n["node_id"]: n for n in first["nodes"]}
    assert rows["3"]["weights_loaded_bytes"] == 100 * MiB and rows["3"]["weights_unloaded_bytes"] == 0
    assert rows["8"]["weights_unloaded_bytes"] == 100 * MiB and rows["8"]["weights_moved_s"] > 0
    second = run(recorder, "p2", [("3", [load(1)])])
    (event,) = second["model_residency"]["events"]
    assert event["first_load"] is False
    assert event["reloaded_after"] == {
        "prompt_id": "p1",
        "node_id": "8",
        "node_class": "VAEDecode",
        "reason": "free_memory: memory for AutoencoderKL",
    }
    assert second["model_residency"]["n_models_reloaded"] == 1
    (finding,) = second["model_residency"]["findings"]
    assert finding["code"] == "model_reloaded"
    assert "unloaded by node 8 (VAEDecode) in prompt p1" in finding["message"]
    assert "loaded again by node 3 (KSampler)" in finding["message"] and "100.0 MiB" in finding["message"]
    for name in ("p1", "p2"):
        jsonschema.validate(json.loads((tmp_path / f"{name}.json").read_text()), SCHEMA)


def test_lora_change_and_partial_load_findings(recorder):
    unpatch = ModelEvent("unpatch", "SDXL", 2, 1, "cuda:0", 0.1, n_weights=264)
    patch = ModelEvent("patch", "SDXL", 2, 1, "cuda:0", None, n_weights=264)
    partial = load(1, 100 * MiB, after=62 * MiB, kind="load_partial")
    report = run(recorder, "p", [("3", [unpatch, partial, patch])])
    codes = {f["code"]: f["message"] for f in report["model_residency"]["findings"]}
    assert "264 weights unpatched and 264 patched again" in codes["lora_repatched"]
    assert "partial load: 38 % of the SDXL" in codes["partial_load"]


def test_models_already_resident_and_none_moved(recorder):
    recorder.begin_run("p", PROMPT)
    recorder.node_started("3")
    recorder.model_resident(1, "SDXL")
    recorder.node_finished("3")
    recorder.set_resident_at_end([{"model_class": "SDXL", "loaded_bytes": 5, "model_size_bytes": 5}])
    residency = recorder.end_run("success").model_residency
    assert residency["n_loads"] == 0 and residency["n_models_already_resident"] == 1
    assert residency["events"] == [] and residency["resident_at_end"][0]["loaded_bytes"] == 5


def test_an_event_outside_a_prompt_is_remembered_only(recorder):
    recorder.model_event(load(1))
    recorder.model_event(unload(1, reason="free_memory: an explicit free"))
    report = run(recorder, "p", [("3", [load(1)])])
    (event,) = report["model_residency"]["events"]
    assert event["reloaded_after"]["prompt_id"] is None
    assert "between prompts" in report["model_residency"]["findings"][0]["message"]


def test_exporters_show_the_model_events(recorder):
    report = run(recorder, "p1", [("3", [load(1)]), ("8", [unload(1)])])
    trace = report_to_trace(report)["traceEvents"]
    track = [e for e in trace if e.get("tid") == MODELS_TID]
    assert track[0]["args"]["name"] == "models"
    assert [(e["name"], e["ph"]) for e in track[1:]] == [("load_full SDXL", "X"), ("unload_full SDXL", "X")]
    assert track[1]["args"]["bytes_moved"] == 100 * MiB

    rows = list(csv.DictReader(io.StringIO(model_events_csv(report))))
    assert [(r["kind"], r["node_id"], r["bytes_moved"]) for r in rows] == [
        ("load_full", "3", str(100 * MiB)),
        ("unload_full", "8", str(100 * MiB)),
    ]
    nodes = {r["node_id"]: r for r in csv.DictReader(io.StringIO(nodes_csv(report)))}
    assert nodes["3"]["weights_loaded_bytes"] == str(100 * MiB)

    page = render_html(report)
    assert "Model loads and unloads" in page and "weights moved" in page and "unload_full" in page

    runtime = types.SimpleNamespace(sampler=Sampler(probes=fake_probes()), recorder=recorder)
    metrics = prometheus.FleetMetrics(lambda: runtime)
    metrics.observe(report)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())
        for s in family.samples
    }
    label = (("model_class", "SDXL"),)
    assert samples[("pipeline_monitor_model_loads_total", label)] == 1
    assert samples[("pipeline_monitor_model_unloads_total", label)] == 1
    assert samples[("pipeline_monitor_weights_moved_bytes_total", label)] == 200 * MiB


def test_the_html_section_lists_the_models_kept_at_the_end_with_their_size_and_device():
    from monitors.exporters.html_models import model_residency_html

    kept = [{"model_class": "SDXL", "loaded_bytes": 2 * 1024**3, "device": "cuda:0"}]
    section = model_residency_html({"model_residency": {"events": [], "resident_at_end": kept}})
    assert "SDXL (2.0 GiB on cuda:0)</p>" in section

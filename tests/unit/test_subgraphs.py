"""Subgraph roll-ups (monitors/engine/subgraphs.py): membership by compound id prefix, wall-clock
time (not a sum), the sum, the cached count and the peaks over descendants, names from the UI
workflow's nested definitions, the declaration, and a recorder's report carrying them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.engine.subgraphs import (
    ALL_CACHED_REASON,
    NO_WORKFLOW_REASON,
    SubgraphGpuPeak,
    SubgraphRollup,
    subgraph_names,
    subgraph_prefixes,
    subgraph_rollups,
)
from monitors.node_fields import GpuPeak, NodeProfile
from monitors.probes.fake import GiB, fake_probes
from monitors.report import StepReport
from monitors.vocabulary.subgraph_fields import SUBGRAPH_GPU_PEAK, SUBGRAPH_ROW

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "run_report.schema.json").read_text())

OUTER, INNER = "0f0e0d0c-0000-4000-8000-000000000001", "0f0e0d0c-0000-4000-8000-000000000002"
# the UI workflow: instance 54 (titled) of OUTER at the root; OUTER holds instance 62 of INNER,
# whose definition is nested inside OUTER's own definitions
WORKFLOW = {
    "nodes": [{"id": 3, "type": "KSampler"}, {"id": 54, "type": OUTER, "title": "Upscale pass"}],
    "definitions": {
        "subgraphs": [
            {
                "id": OUTER,
                "name": "Outer",
                "nodes": [{"id": 73, "type": "VAEDecode"}, {"id": 62, "type": INNER}],
                "definitions": {"subgraphs": [{"id": INNER, "name": "Inner", "nodes": [{"id": 174}]}]},
            }
        ]
    },
}


def row(node_id, start=None, duration=None, rss=None, gpu=None, cached=False):
    peaks = () if gpu is None else (GpuPeak("cuda:0", gpu, gpu, gpu // 2, None),)
    return NodeProfile(
        node_id,
        "X",
        "cached" if cached else "executed",
        cached,
        start_offset_s=start,
        duration_s=duration,
        peak_rss_bytes=rss,
        peak_rss_above_start_bytes=None if rss is None else rss // 4,
        gpu_peaks=peaks,
    )


NODES = (
    row("3", 0.0, 1.0, rss=900),
    row("54:73", 1.0, 0.5, rss=100, gpu=10),
    row("54:62:174", 2.0, 0.25, rss=300, gpu=40),  # 0.5 s of node 3's neighbours in between
    row("54:62:175", cached=True),
    row("60:1", cached=True),
)


def by_id(rollups):
    return {r.id: r for r in rollups}


def test_prefixes_are_the_enclosing_instances_outermost_first():
    assert subgraph_prefixes("54:62:174") == ["54", "54:62"]
    assert subgraph_prefixes("54:73") == ["54"]
    assert subgraph_prefixes("3") == []
    assert subgraph_prefixes("54:3.0.0.1") == ["54"]  # a node the subgraph's node expanded into


def test_membership_nesting_wall_clock_sum_and_peaks():
    rollups = subgraph_rollups(NODES, WORKFLOW)
    assert [r.id for r in rollups] == ["54", "54:62", "60"]
    outer, inner, cached = by_id(rollups)["54"], by_id(rollups)["54:62"], by_id(rollups)["60"]
    assert outer.parent_id is None and inner.parent_id == "54"
    assert outer.node_ids == ("54:73", "54:62:174", "54:62:175")
    assert inner.node_ids == ("54:62:174", "54:62:175")
    assert outer.start_offset_s == pytest.approx(1.0)
    assert outer.wall_s == pytest.approx(1.25)  # 1.0 -> 2.25: wall-clock, not the 0.75 s sum
    assert outer.node_time_sum_s == pytest.approx(0.75)
    assert inner.wall_s == pytest.approx(0.25) and inner.n_cached == 1 and outer.n_cached == 1
    assert outer.peak_rss_bytes == 300 and outer.peak_rss_above_start_bytes == 75  # node 3's 900 is outside
    assert outer.gpu_peaks == (SubgraphGpuPeak("cuda:0", 40, 20),)
    assert cached.wall_s is None and cached.wall_unknown_reason == ALL_CACHED_REASON
    assert cached.node_time_sum_s is None and cached.gpu_peaks == ()


def test_names_title_first_then_definition_nested_definitions_found():
    names = by_id(subgraph_rollups(NODES, WORKFLOW))
    assert (names["54"].name, names["54"].name_unknown_reason) == ("Upscale pass", None)
    assert (names["54:62"].name, names["54:62"].name_unknown_reason) == ("Inner", None)
    assert names["60"].name is None and "node 60 is not in the workflow" in names["60"].name_unknown_reason


def test_names_unknown_each_with_its_reason():
    assert subgraph_names(None, ["54"]) == {"54": (None, NO_WORKFLOW_REASON)}
    workflow = {"nodes": [{"id": "54", "type": "no-such-uuid"}, {"id": 9, "type": OUTER}],
                "definitions": {"subgraphs": [{"id": OUTER, "name": " ", "nodes": []}]}}
    names = subgraph_names(workflow, ["54", "54:1", "9", "9:2"])
    assert "no subgraph definition no-such-uuid" in names["54"][1]
    assert "enclosing subgraph 54" in names["54:1"][1]
    assert names["9"] == (None, "neither the instance nor its definition has a name")
    assert names["9:2"][1] == "node 2 is not in the workflow's graph"


def test_a_prompt_without_subgraphs_has_none():
    assert subgraph_rollups((row("1", 0.0, 1.0), row("2", cached=True)), None) == ()


def test_declaration_schema_and_dataclasses_agree():
    assert [f.name for f in SUBGRAPH_ROW.fields] == [f.name for f in dataclasses.fields(SubgraphRollup)]
    assert [f.name for f in SUBGRAPH_GPU_PEAK.fields] == [f.name for f in dataclasses.fields(SubgraphGpuPeak)]
    assert list(SCHEMA["$defs"]["subgraph"]["properties"]) == [f.name for f in SUBGRAPH_ROW.fields]
    assert SCHEMA["properties"]["subgraphs"]["items"] == {"$ref": "#/$defs/subgraph"}


def test_recorder_report_carries_the_rollups_and_validates(tmp_path):
    probes = fake_probes("1 GPU")
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    prompt = {i: {"class_type": "VAEDecode", "inputs": {}} for i in ("3", "54:73", "54:62:174")}
    recorder.begin_run("p1", prompt)
    for node_id in ("3", "54:73", "54:62:174"):
        recorder.node_started(node_id)
        probes.torch.allocate(0, GiB)
        recorder.node_finished(node_id)
    report = recorder.end_run("success", workflow_graph=WORKFLOW).to_dict()
    jsonschema.validate(report, SCHEMA)
    outer, inner = report["subgraphs"]
    assert (outer["id"], outer["name"], inner["id"], inner["parent_id"]) == ("54", "Upscale pass", "54:62", "54")
    rows = {n["node_id"]: n for n in report["nodes"]}
    assert outer["node_time_sum_s"] == pytest.approx(rows["54:73"]["duration_s"] + rows["54:62:174"]["duration_s"])
    end = rows["54:62:174"]["start_offset_s"] + rows["54:62:174"]["duration_s"]
    assert outer["wall_s"] == pytest.approx(end - rows["54:73"]["start_offset_s"])
    assert outer["gpu_peaks"][0]["peak_allocated_bytes"] == max(
        n["gpu_peaks"][0]["peak_allocated_bytes"] for n in (rows["54:73"], rows["54:62:174"])
    )
    assert "subgraphs" not in json.dumps(report["nodes"])


def test_a_malformed_workflow_leaves_names_unknown_not_the_run(tmp_path):
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=fake_probes())
    recorder.begin_run("p2", {})
    recorder.node_started("5:1")
    recorder.node_finished("5:1")
    report = recorder.end_run("success", workflow_graph={"nodes": "not a list", "definitions": []})
    assert report.status == "success" and report.subgraphs[0].name is None


def test_a_monitor_moved_into_a_subgraph_and_cached_shows_its_step(tmp_path):
    """Converting nodes to a subgraph keeps their own ids after the last ":" and ComfyUI serves
    them from its cache: the cached monitor's card is its last step, under its new id."""
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=fake_probes())
    monitor = {"class_type": "PipelineMonitorLatent", "inputs": {}}
    recorder.begin_run("before", {"5": monitor, "7": monitor})
    recorder.node_started("5")
    assert recorder.add_step(StepReport("latent", "5", summary={"n_channels": 4}))
    recorder.node_finished("5")
    recorder.end_run("success")
    recorder.begin_run("after", {"9:5": monitor, "3": {"class_type": "EmptyImage", "inputs": {}}})
    recorder.node_finished("9:5")  # a finish without a start: cached
    recorder.node_finished("3")
    report = recorder.end_run("success")
    (step,) = report.steps
    assert (step.node_id, step.cached, step.summary) == ("9:5", True, {"n_channels": 4})


def test_the_process_device_memory_rolls_up_per_device_where_measured():
    """The driver's per-process figure and dynamic VRAM's own, each the highest over the
    descendants (not the node with the highest torch peak); null where no node measured them."""
    measured = (
        NodeProfile("54:73", "X", "executed", False, start_offset_s=1.0, duration_s=0.5,
                    gpu_peaks=(GpuPeak("cuda:0", 40, 40, peak_process_used_bytes=900, peak_aimdo_used_bytes=300),)),
        NodeProfile("54:62:174", "X", "executed", False, start_offset_s=2.0, duration_s=0.5,
                    gpu_peaks=(GpuPeak("cuda:0", 70, 70, peak_process_used_bytes=500),)),
    )
    outer = by_id(subgraph_rollups(measured, WORKFLOW))["54"]
    (peak,) = outer.gpu_peaks
    assert (peak.peak_allocated_bytes, peak.peak_process_used_bytes, peak.peak_aimdo_used_bytes) == (70, 900, 300)
    (plain,) = by_id(subgraph_rollups(NODES, WORKFLOW))["54"].gpu_peaks
    assert plain.peak_process_used_bytes is None and plain.peak_aimdo_used_bytes is None

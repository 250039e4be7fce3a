"""Subgraph roll-ups in the exports: the trace nests node spans inside subgraph spans (nested
subgraphs inside their parent), the HTML report has a subgraph table with declared labels and
escaped names, the CSV a subgraph table with per-GPU columns."""

from __future__ import annotations

import csv
import io

from monitors.engine.subgraphs import subgraph_rollups
from monitors.exporters.csv_tables import subgraphs_csv
from monitors.exporters.html import render_html
from monitors.exporters.trace import reports_to_trace
from monitors.report import RunReport
from tests.unit.test_subgraphs import NODES, WORKFLOW
from tests.unit.test_trace import check_lanes_nest, events


def report(workflow=WORKFLOW) -> dict:
    return RunReport(
        "p1", "success", 1000.0, 1003.0, 3.0, nodes=NODES, subgraphs=subgraph_rollups(NODES, workflow)
    ).to_dict()


def _contains(outer, inner) -> bool:
    return outer["tid"] == inner["tid"] and outer["ts"] <= inner["ts"] and (
        inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1e-3
    )


def test_trace_nests_node_spans_inside_subgraph_spans():
    trace = reports_to_trace([report()])
    check_lanes_nest(trace)
    spans = {e["args"].get("subgraph_id") or e["args"].get("node_id"): e for e in events(trace, "X") if e["cat"] != "run"}
    outer, inner = spans["54"], spans["54:62"]
    assert outer["cat"] == "subgraph" and outer["name"] == "Upscale pass" and inner["name"] == "Inner"
    assert outer["dur"] == 1_250_000 and outer["args"]["node_time_sum_s"] == 0.75
    assert _contains(outer, inner) and _contains(inner, spans["54:62:174"]) and _contains(outer, spans["54:73"])
    assert "60" not in spans  # all cached: no span


def test_a_subgraph_of_one_node_still_encloses_it():
    nodes = NODES[1:2]
    data = RunReport("p1", "success", 1000.0, 1001.0, 1.0, nodes=nodes, subgraphs=subgraph_rollups(nodes)).to_dict()
    trace = reports_to_trace([data])
    spans = [e for e in events(trace, "X") if e["cat"] != "run"]
    subgraph = next(e for e in spans if e["cat"] == "subgraph")
    node = next(e for e in spans if e["cat"] != "subgraph")
    assert subgraph["name"] == "subgraph 54" and _contains(subgraph, node)


def test_html_has_the_subgraph_table_with_names_escaped():
    workflow = {**WORKFLOW, "nodes": [{"id": 54, "type": WORKFLOW["definitions"]["subgraphs"][0]["id"], "title": "<b>x</b>"}]}
    page = render_html(report(workflow))
    assert "<h2>Subgraphs</h2>" in page and "subgraph wall time" in page and "&lt;b&gt;x&lt;/b&gt;" in page
    assert "<b>x</b>" not in page
    assert "1.25 s" in page  # the wall time of 54, formatted by its declared unit
    assert "Subgraphs" not in render_html(RunReport("p2", "success", 1.0, 2.0, 1.0, nodes=NODES[:1]).to_dict())


def test_csv_subgraph_table():
    rows = list(csv.DictReader(io.StringIO(subgraphs_csv(report()))))
    assert [r["id"] for r in rows] == ["54", "54:62", "60"]
    assert rows[0]["wall_s"] == "1.25" and rows[0]["cuda:0.peak_allocated_bytes"] == "40"
    assert rows[1]["parent_id"] == "54" and rows[2]["wall_s"] == "" and rows[2]["wall_unknown_reason"]
    assert rows[0]["node_ids"] == '["54:73","54:62:174","54:62:175"]'


def test_the_html_subgraph_row_shows_its_highest_device_peak():
    from monitors.exporters.html_subgraphs import subgraphs_html

    peaks = [{"device": "cuda:0", "peak_allocated_bytes": 3 * 1024**3}, {"device": "cuda:1", "peak_allocated_bytes": 1024**3}]
    section = subgraphs_html({"subgraphs": [{"id": "54", "name": "n", "node_ids": ["1"], "gpu_peaks": peaks}]})
    assert section.endswith("<td class=num>3.0 GiB</td></tr></table>")

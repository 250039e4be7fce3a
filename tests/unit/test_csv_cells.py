"""The CSV tables' cells and columns beyond the per-node figures: finding counts by level, the
union of summary keys, every device's columns, the usage totals, and the command line's output."""

from __future__ import annotations

import csv
import io
import json

from monitors.exporters.csv_tables import main, nodes_csv, steps_csv, usage_totals_csv


def table(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_steps_count_findings_by_level_and_take_the_union_of_summary_keys():
    report = {
        "steps": [
            {
                "kind": "lora",
                "node_id": "2",
                "cached": True,
                "summary": {"a": 1, "nested": {"x": [1, 2]}},
                "findings": [{"level": "error"}, {"level": "warning"}, {"level": "error"}, "odd"],
            },
            {"kind": "vae_encode", "node_id": "5", "summary": {"b": None, "a": 2.5}},
            "not a step",
        ]
    }
    text = steps_csv(report)
    assert (
        text.splitlines()[0] == "kind,node_id,cached,n_errors,n_warnings,summary.a,summary.nested,summary.b"
    )
    first, second = table(text)
    assert (first["n_errors"], first["n_warnings"], first["cached"]) == ("2", "1", "True")
    assert first["summary.nested"] == '{"x":[1,2]}' and first["summary.b"] == ""
    assert (second["n_errors"], second["summary.a"], second["summary.b"], second["cached"]) == (
        "0",
        "2.5",
        "",
        "",
    )
    assert steps_csv({}) == "kind,node_id,cached,n_errors,n_warnings\n"


def test_nodes_get_every_devices_columns_sorted():
    report = {
        "nodes": [
            {"node_id": "1", "gpu_peaks": [{"device": "cuda:1", "peak_allocated_bytes": 7}]},
            {"node_id": "2", "gpu_peaks": [{"device": "cuda:0", "peak_allocated_bytes": 3}, "odd"]},
            "not a node",
        ]
    }
    text = nodes_csv(report)
    header = text.splitlines()[0].split(",")
    assert header.index("cuda:0.peak_allocated_bytes") < header.index("cuda:1.peak_allocated_bytes")
    first, second = table(text)
    assert (first["cuda:1.peak_allocated_bytes"], first["cuda:0.peak_allocated_bytes"]) == ("7", "")
    assert (second["cuda:0.peak_allocated_bytes"], second["cuda:1.peak_allocated_bytes"]) == ("3", "")


def test_usage_totals_as_name_value_rows():
    stats = {
        "n_generations": 3,
        "total_s": 4.5,
        "generations": [{"index": 1}],
        "models": {"m": 1},
        "current_gpu_memory": [{"device": "cuda:0", "allocated_bytes": 10, "reserved_bytes": None}],
    }
    assert table(usage_totals_csv(stats)) == [
        {"name": "n_generations", "value": "3"},
        {"name": "total_s", "value": "4.5"},
        {"name": "current_cuda:0.allocated_bytes", "value": "10"},
        {"name": "current_cuda:0.reserved_bytes", "value": ""},
    ]
    assert usage_totals_csv({}) == "name,value\n"


def test_the_command_line_writes_the_nodes_table_to_standard_output(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"nodes": [{"node_id": "9", "duration_s": 0.5}]}))
    assert main([str(path)]) == 0
    rows = table(capsys.readouterr().out)
    assert [(r["node_id"], r["duration_s"]) for r in rows] == [("9", "0.5")]


def test_usage_without_generations_has_no_gpu_columns():
    from monitors.exporters.csv_tables import GENERATION_COLUMNS, usage_generations_csv

    assert usage_generations_csv({}) == ",".join(GENERATION_COLUMNS) + "\n"


def test_nodes_carry_the_processs_device_memory_per_device():
    report = {"nodes": [{"node_id": "1", "gpu_peaks": [{"device": "cuda:0", "peak_process_used_bytes": 9, "peak_aimdo_used_bytes": 4}]}]}
    (row,) = table(nodes_csv(report))
    assert (row["cuda:0.peak_process_used_bytes"], row["cuda:0.peak_aimdo_used_bytes"]) == ("9", "4")

"""CSV export of a run report's per-node and step tables (beside JSON)."""

import csv
import io
import json

from monitors.exporters.csv_tables import NODE_GPU_COLUMNS, main, nodes_csv, steps_csv, usage_generations_csv
from tests.unit.test_node_memory import _run_two_nodes

GiB = 1024**3
MiB = 1024**2


def test_nodes_table_has_one_row_per_node_with_gpu_columns_per_device(tmp_path):
    report = _run_two_nodes(tmp_path, 1 * GiB).to_dict()
    rows = list(csv.DictReader(io.StringIO(nodes_csv(report))))
    assert [r["node_id"] for r in rows] == ["1", "2"]
    assert int(rows[0]["rss_change_bytes"]) == 100 * MiB
    assert int(rows[0]["cuda:0.allocated_change_bytes"]) == 800 * MiB
    assert int(rows[0]["cuda:0.reserved_change_bytes"]) == 288 * MiB  # each column its own figure
    assert int(rows[1]["peak_rss_above_start_bytes"]) == 10 * MiB
    assert rows[0]["title"] == ""  # unknown: an empty cell, never -1


def test_steps_table_and_the_command_line(tmp_path):
    report = {
        "nodes": [],
        "steps": [
            {
                "kind": "vae_encode",
                "node_id": "5",
                "summary": {"duration_s": 1.5, "latent_shape": [1, 4, 8, 8]},
                "findings": [{"level": "warning", "message": "m"}],
            }
        ],
    }
    rows = list(csv.DictReader(io.StringIO(steps_csv(report))))
    assert rows[0]["kind"] == "vae_encode" and rows[0]["n_warnings"] == "1"
    assert json.loads(rows[0]["summary.latent_shape"]) == [1, 4, 8, 8]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    out = tmp_path / "steps.csv"
    assert main([str(path), "--table", "steps", "-o", str(out)]) == 0
    assert out.read_text().startswith("kind,node_id,cached,n_errors,n_warnings,summary.duration_s")


def test_cli_table_as_csv_and_json(tmp_path, capsys):
    from monitors.cli.commands import main as cli_main

    _run_two_nodes(tmp_path, 1 * GiB)  # the store writes p.json
    report_path = str(tmp_path / "p.json")
    out = tmp_path / "nodes.csv"
    assert cli_main(["table", report_path, "--format", "csv", "-o", str(out)]) == 0
    rows = list(csv.DictReader(open(out)))
    assert [r["node_id"] for r in rows] == ["1", "2"]
    assert cli_main(["table", report_path, "--table", "nodes", "--format", "json"]) == 0
    assert [n["node_id"] for n in json.loads(capsys.readouterr().out)] == ["1", "2"]
    assert cli_main(["table", str(tmp_path / "missing.json")]) == 1


def test_usage_generations_one_number_per_gpu_column_and_none_on_cpu():
    gpu_row = {
        "index": 1,
        "gpu_utilization_before_pct": [10.0, None],
        "gpu_utilization_after_pct": [80.0, 5.0],
    }
    cpu_row = {"index": 2, "gpu_utilization_before_pct": None, "gpu_utilization_after_pct": None}
    rows = list(csv.DictReader(io.StringIO(usage_generations_csv({"generations": [gpu_row, cpu_row]}))))
    assert rows[0]["cuda:0.gpu_utilization_before_pct"] == "10.0"
    assert rows[0]["cuda:1.gpu_utilization_before_pct"] == ""  # unknown: empty, never "[10.0, null]"
    assert rows[0]["cuda:1.gpu_utilization_after_pct"] == "5.0"
    assert rows[1]["cuda:0.gpu_utilization_after_pct"] == ""
    assert not any(v.startswith("[") for r in rows for v in r.values())
    header = usage_generations_csv({"generations": [cpu_row]}).splitlines()[0]
    assert "cuda:" not in header and "gpu_utilization" not in header  # no GPU: no per-GPU column


def test_every_gpu_figure_of_a_node_row_has_its_own_column_with_its_own_value(tmp_path):
    report = _run_two_nodes(tmp_path, 1 * GiB).to_dict()  # allocated and reserved rise apart
    reader = csv.DictReader(io.StringIO(nodes_csv(report)))
    assert len(reader.fieldnames) == len(set(reader.fieldnames))
    first = next(reader)
    peak = report["nodes"][0]["gpu_peaks"][0]
    for name in NODE_GPU_COLUMNS:
        cell = first[f"cuda:0.{name}"]
        assert cell == ("" if peak[name] is None else str(peak[name])), name


def test_a_generation_row_keeps_its_gpu_peak_in_its_column():
    generation = {"index": 0, "run_id": "r", "peak_rss_bytes": 300, "peak_gpu_allocated_bytes": 50}
    [row] = csv.DictReader(io.StringIO(usage_generations_csv({"generations": [generation]})))
    assert (row["peak_rss_bytes"], row["peak_gpu_allocated_bytes"]) == ("300", "50")

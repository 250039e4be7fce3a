"""CSV export of the tables a report holds, beside JSON: the per-node table of a run report and
the usage statistics (one row per generation, and the totals as name,value rows).

    python -m monitors.exporters.csv_tables report.json -o nodes.csv          # per-node table
    python -m monitors.exporters.csv_tables report.json --table steps -o s.csv
    python -m monitors.exporters.csv_tables report.json --table subgraphs   # per subgraph roll-up
    python -m monitors.exporters.csv_tables report.json --table models -o m.csv  # model loads/unloads

Values are written as they are in the JSON (bytes as integers, seconds as numbers); unknown is an
empty cell, never -1. Per-GPU figures get one column per GPU (`cuda:0.<name>`); any other nested
value (a list, a dict) is written as compact JSON in its cell.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..engine.residency_fields import EVENT
from ..node_fields import gpu_peak_key, node_key
from ..vocabulary.subgraph_fields import SUBGRAPH_GPU_PEAK, SUBGRAPH_ROW

# Each name read through the node rows' declaration (monitors/node_fields.py): a renamed figure
# fails at import instead of leaving an empty column.
NODE_COLUMNS = tuple(
    node_key(name)
    for name in (
        "node_id",
        "class_type",
        "title",
        "status",
        "cached",
        "start_offset_s",
        "duration_s",
        "rss_start_bytes",
        "rss_end_bytes",
        "rss_change_bytes",
        "peak_rss_bytes",
        "peak_rss_above_start_bytes",
        "peak_rss_at_s",
        "peak_rss_method",
        "weights_loaded_bytes",
        "weights_unloaded_bytes",
        "weights_moved_s",
    )
)
# Per GPU of a node row, prefixed with the device (`cuda:0.peak_allocated_bytes`).
NODE_GPU_COLUMNS = tuple(
    gpu_peak_key(name)
    for name in (
        "allocated_start_bytes",
        "allocated_end_bytes",
        "allocated_change_bytes",
        "peak_allocated_bytes",
        "peak_allocated_above_start_bytes",
        "peak_allocated_at_s",
        "reserved_start_bytes",
        "reserved_end_bytes",
        "reserved_change_bytes",
        "peak_reserved_bytes",
        "peak_reserved_above_start_bytes",
        "peak_reserved_at_s",
        "peak_process_used_bytes",
        "peak_aimdo_used_bytes",
    )
)
GENERATION_COLUMNS = (
    "index",
    "name",
    "run_id",
    "status",
    "duration_s",
    "peak_rss_bytes",
    "peak_gpu_allocated_bytes",
)
# Per-GPU lists of a generation row (index = device index), one column per GPU
# (`cuda:0.gpu_utilization_before_pct`): a cell holds a number, never a list's text.
GENERATION_GPU_COLUMNS = ("gpu_utilization_before_pct", "gpu_utilization_after_pct")
TABLES = ("nodes", "steps", "subgraphs", "models")
# The model events of a run (model_residency.events, monitors/engine/residency_fields.py).
MODEL_EVENT_COLUMNS = tuple(
    f.name for f in EVENT.fields if f.name != "reloaded_after"
)


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, tuple, Mapping)):
        return json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    return value


def _write(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    return out.getvalue()


def nodes_csv(report: Mapping[str, Any]) -> str:
    """The per-node table of a run report (dict): one row per node, GPU figures per device."""
    nodes = [n for n in report.get("nodes") or () if isinstance(n, Mapping)]
    devices = sorted(
        {p.get("device") for n in nodes for p in n.get("gpu_peaks") or () if isinstance(p, Mapping)},
        key=str,
    )
    columns = [*NODE_COLUMNS, *(f"{d}.{c}" for d in devices for c in NODE_GPU_COLUMNS)]
    rows = []
    for node in nodes:
        row = dict(node)
        for peak in node.get("gpu_peaks") or ():
            if isinstance(peak, Mapping):
                row.update({f"{peak.get('device')}.{c}": peak.get(c) for c in NODE_GPU_COLUMNS})
        rows.append(row)
    return _write(columns, rows)


def subgraphs_csv(report: Mapping[str, Any]) -> str:
    """One row per subgraph roll-up, its columns from the declaration, GPU figures per device."""
    subgraphs = [s for s in report.get("subgraphs") or () if isinstance(s, Mapping)]
    per_gpu = [f.name for f in SUBGRAPH_GPU_PEAK.fields if f.name != "device"]
    devices = sorted(
        {p.get("device") for s in subgraphs for p in s.get(SUBGRAPH_GPU_PEAK.name) or () if isinstance(p, Mapping)},
        key=str,
    )
    columns = [f.name for f in SUBGRAPH_ROW.fields if f is not SUBGRAPH_GPU_PEAK]
    rows = []
    for subgraph in subgraphs:
        row = dict(subgraph)
        for peak in subgraph.get(SUBGRAPH_GPU_PEAK.name) or ():
            if isinstance(peak, Mapping):
                row.update({f"{peak.get('device')}.{c}": peak.get(c) for c in per_gpu})
        rows.append(row)
    return _write([*columns, *(f"{d}.{c}" for d in devices for c in per_gpu)], rows)


def steps_csv(report: Mapping[str, Any]) -> str:
    """One row per monitor step: kind, node, finding counts, then every summary key (union)."""
    steps = [s for s in report.get("steps") or () if isinstance(s, Mapping)]
    keys = list(dict.fromkeys(k for s in steps for k in (s.get("summary") or {})))
    rows = []
    for step in steps:
        levels = [f.get("level") for f in step.get("findings") or () if isinstance(f, Mapping)]
        rows.append(
            {
                "kind": step.get("kind"),
                "node_id": step.get("node_id"),
                "cached": step.get("cached"),
                "n_errors": levels.count("error"),
                "n_warnings": levels.count("warning"),
                **{f"summary.{k}": v for k, v in (step.get("summary") or {}).items()},
            }
        )
    return _write(
        ["kind", "node_id", "cached", "n_errors", "n_warnings", *(f"summary.{k}" for k in keys)], rows
    )


def model_events_csv(report: Mapping[str, Any]) -> str:
    """One row per model load, unload or LoRA patch of the run (model_residency.events)."""
    residency = report.get("model_residency")
    events = residency.get("events") if isinstance(residency, Mapping) else None
    rows = [e for e in events or () if isinstance(e, Mapping)]
    return _write(MODEL_EVENT_COLUMNS, rows)


def usage_generations_csv(stats: Mapping[str, Any]) -> str:
    """The usage statistics' kept generations, one row each; per-GPU figures one column per GPU."""
    generations = [g for g in stats.get("generations") or () if isinstance(g, Mapping)]
    n_gpus = max((len(g.get(c) or ()) for g in generations for c in GENERATION_GPU_COLUMNS), default=0)
    gpu_columns = [f"cuda:{i}.{c}" for i in range(n_gpus) for c in GENERATION_GPU_COLUMNS]
    rows = []
    for generation in generations:
        row = {c: generation.get(c) for c in GENERATION_COLUMNS}
        for column in GENERATION_GPU_COLUMNS:
            for index, value in enumerate(generation.get(column) or ()):
                row[f"cuda:{index}.{column}"] = value
        rows.append(row)
    return _write([*GENERATION_COLUMNS, *gpu_columns], rows)


def usage_totals_csv(stats: Mapping[str, Any]) -> str:
    """The usage statistics' totals and current memory as name,value rows (no per-row lists)."""
    skip = {"generations", "models", "current_gpu_memory"}
    rows = [{"name": k, "value": v} for k, v in stats.items() if k not in skip]
    for device in stats.get("current_gpu_memory") or ():
        for key in ("allocated_bytes", "reserved_bytes"):
            rows.append({"name": f"current_{device.get('device')}.{key}", "value": device.get(key)})
    return _write(("name", "value"), rows)


def write_text(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m monitors.exporters.csv_tables", description="a run report's tables as CSV"
    )
    parser.add_argument("report", help="run report JSON file")
    parser.add_argument("--table", choices=TABLES, default="nodes", help="which table (default: nodes)")
    parser.add_argument("-o", "--output", help="CSV file to write (default: standard output)")
    args = parser.parse_args(argv)
    with open(args.report, encoding="utf-8") as f:
        report = json.load(f)
    text = {"nodes": nodes_csv, "steps": steps_csv, "subgraphs": subgraphs_csv, "models": model_events_csv}[
        args.table
    ](report)
    if args.output:
        write_text(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Command line: `python -m monitors aggregate|compare|trace` (run from the pack folder).

    python -m monitors aggregate rank0.json rank1.json -o job.json
    python -m monitors aggregate --reports_dir reports/ --output job.json   # every report in a folder
    python -m monitors compare before.json after.json --threshold-pct 10 [--history earlier_reports/]
    python -m monitors trace rank0.json rank1.json -o job.trace.json
    python -m monitors table run.json --table nodes --format csv -o nodes.csv   # or steps, subgraphs; or json

Exit codes:
    0  done, every input used, no regression
    1  no usable input (every report skipped, or a compared report unusable)
    2  bad command line
    3  aggregate/trace done, but some inputs were skipped (named on stderr)
    4  compare done and found regressions beyond the threshold
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from ..deep_profile.trace_ops import read_ops
from ..exporters.csv_tables import TABLES, nodes_csv, steps_csv, subgraphs_csv, write_text
from ..exporters.trace import reports_to_trace
from ..report import format_bytes, write_json_atomic
from .aggregate import (
    DEFAULT_MIN_BYTES,
    DEFAULT_MIN_SECONDS,
    DEFAULT_THRESHOLD_PCT,
    ReportError,
    aggregate,
    compare,
    load_report,
    load_reports,
)

EXIT_OK, EXIT_NO_INPUT, EXIT_USAGE, EXIT_SKIPPED, EXIT_REGRESSION = 0, 1, 2, 3, 4


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def _err(line: str) -> None:
    sys.stderr.write(line + "\n")


def _fmt(key: str, value) -> str:
    if value is None:
        return "-"
    if key.endswith("_bytes"):
        return format_bytes(value)
    if key.endswith("_per_s"):
        return f"{value:.3g}/s"
    if key.endswith("_s"):
        return f"{value:.3f} s"
    if key.endswith("_pct"):
        return f"{value:+.1f} %"
    return str(value)


def _report_skipped(skipped: list[dict]) -> None:
    for item in skipped:
        _err(f"skipped {item['path']}: {item['reason']}")


def reports_in(directory: str) -> list[str]:
    """Every run report file under `directory`, in sorted order: `*.json`, also in sub-folders
    (Inferix writes one `rank_<n>/` per rank), without this pack's `*.trace.json` exports and the
    hidden files of writes in progress."""
    if not os.path.isdir(directory):
        raise NotADirectoryError(f"--reports_dir {directory}: not a folder")
    found = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [
            os.path.join(root, f)
            for f in files
            if f.endswith(".json") and not f.endswith(".trace.json") and not f.startswith(".")
        ]
    return sorted(found)


def cmd_aggregate(args) -> int:
    paths = list(args.reports)
    for directory in args.reports_dir or ():
        paths += reports_in(directory)
    if not paths:
        _err("no report file in " + ", ".join(args.reports_dir))
        return EXIT_NO_INPUT
    loaded, skipped = load_reports(paths)
    _report_skipped(skipped)
    if not loaded:
        _err("no usable report")
        return EXIT_NO_INPUT
    result = aggregate(loaded, skipped)
    if args.output:
        write_json_atomic(args.output, result)
    _out(f"{result['n_reports']} report(s) aggregated, {len(skipped)} skipped")
    _out(f"ranks: {len({row['rank'] for row in result['ranks']})}")
    _out(f"{'metric':<28}{'min':>14}{'max':>14}{'mean':>14}{'std':>14}")
    for key, s in result["metrics"].items():
        _out(f"{key:<28}" + "".join(f"{_fmt(key, s[k]):>14}" for k in ("min", "max", "mean", "std")))
    _out()
    _out(f"{'rank':<6}{'duration':>12}{'vs mean':>10}{'peak RSS':>12}  slowest stage")
    for row in result["ranks"]:
        stage = (
            "-"
            if row["slowest_stage"] is None
            else f"{row['slowest_stage']} {_fmt('_s', row['slowest_stage_s'])}"
        )
        _out(
            f"{row['rank']:<6}{_fmt('_s', row['duration_s']):>12}{_fmt('_pct', row['duration_vs_mean_pct']):>10}"
            f"{_fmt('_bytes', row['peak_rss_bytes']):>12}  {stage}"
        )
    if result["slowest_rank"]:
        _out(
            f"slowest rank: {result['slowest_rank']['rank']} ({_fmt('_s', result['slowest_rank']['duration_s'])})"
        )
    if result["slowest_stage"]:
        s = result["slowest_stage"]
        _out(f"slowest stage: {s['stage']} on rank {s['rank']} ({_fmt('_s', s['total_s'])})")
    if args.output:
        _out(f"written: {args.output}")
    return EXIT_SKIPPED if skipped else EXIT_OK


def is_deep_profiled(report) -> bool:
    return any(isinstance(s, dict) and s.get("kind") == "deep_profile" for s in report.get("steps") or ())


def cmd_compare(args) -> int:
    reports = []
    for path in (args.a, args.b):
        try:
            reports.append(load_report(path))
        except ReportError as exc:
            _err(f"skipped {path}: {exc}")
    if len(reports) != 2:
        _err("compare needs two usable reports")
        return EXIT_NO_INPUT
    history = _history(args.history or (), reports[0], reports[1])
    result = compare(reports[0], reports[1], args.threshold_pct, args.min_seconds, args.min_bytes, history)
    result["deep_profiled"] = {"a": is_deep_profiled(reports[0]), "b": is_deep_profiled(reports[1])}
    if args.output:
        write_json_atomic(args.output, result)
    _out(
        f"A {result['a']['run_id']} ({result['a']['status']})  vs  B {result['b']['run_id']} ({result['b']['status']})"
    )
    deep = result["deep_profiled"]
    if deep["a"] != deep["b"]:
        _out(
            f"note: only {'A' if deep['a'] else 'B'} was deep-profiled: its timings include the profiler's "
            "overhead (compare deep-profiled runs with each other)"
        )
    _out(f"{'':<34}{'A':>12}{'B':>12}{'change':>10}")
    for key, d in result["run"].items():
        _out(_row(key, key, d))
    _out("stages:")
    for s in result["stages"]:
        _out(_row(f"  {s['stage']}", "total_s", s["total_s"], s["only_in"]))
    _out("nodes:")
    for n in result["nodes"]:
        _out(
            _row(
                f"  #{n['node_id']} {n['title'] or n['class_type'] or ''}",
                "duration_s",
                n["duration_s"],
                n["only_in"],
            )
        )
    n_runs = result["n_history_runs"]
    basis = (
        f"the spread of {n_runs} earlier runs"
        if n_runs > 1
        else "1 earlier run (no spread known: --history adds runs)"
    )
    if result["regressions"]:
        _out(f"{len(result['regressions'])} regression(s) beyond {args.threshold_pct:g} % and {basis}:")
        for line in result["regressions"]:
            _out(f"  {line}")
        return EXIT_REGRESSION
    _out(f"no regression beyond {args.threshold_pct:g} % and {basis}")
    return EXIT_OK


def _history(paths, a: dict, b: dict) -> list[dict]:
    """Earlier reports of A's workflow from --history files and folders (other workflows and
    runs that did not succeed are left out; unreadable files are named and skipped)."""
    files = [f for p in paths for f in (reports_in(p) if os.path.isdir(p) else [p])]
    workflow = (a.get("workflow") or {}).get("id") or (a.get("workflow") or {}).get("name")
    history = []
    for path in files:
        try:
            report = load_report(path)
        except ReportError as exc:
            _err(f"history: skipped {path}: {exc}")
            continue
        other = (report.get("workflow") or {}).get("id") or (report.get("workflow") or {}).get("name")
        if (
            report.get("status") == "success"
            and other == workflow
            and report.get("started_unix_s", 0) <= b.get("started_unix_s", 0)
        ):
            history.append(report)
    return history


def _row(name: str, key: str, d: dict, only_in: str | None = None) -> str:
    flag = "  REGRESSION" if d.get("regression") else ""
    note = f"  (only in {only_in.upper()})" if only_in else ""
    pct = d.get("delta_pct")
    return f"{name[:34]:<34}{_fmt(key, d.get('a')):>12}{_fmt(key, d.get('b')):>12}{_fmt('_pct', pct):>10}{flag}{note}"


def cmd_trace(args) -> int:
    loaded, skipped = load_reports(args.reports)
    _report_skipped(skipped)
    if not loaded:
        _err("no usable report")
        return EXIT_NO_INPUT
    # a deep-profiled run's ops and kernels, from the capped file beside its report
    deep_ops = {str(r.get("prompt_id")): read_ops(path, r.get("prompt_id")) for path, r in loaded}
    write_json_atomic(args.output, reports_to_trace([r for _, r in loaded], deep_ops=deep_ops))
    _out(
        f"written: {args.output} ({len(loaded)} report(s)); open it in Perfetto (ui.perfetto.dev) or chrome://tracing"
    )
    return EXIT_SKIPPED if skipped else EXIT_OK


def cmd_table(args) -> int:
    try:
        report = load_report(args.report)
    except ReportError as exc:
        _err(f"error: {exc}")
        return EXIT_NO_INPUT
    if args.format == "json":
        rows = report.get(args.table)
        text = json.dumps(rows or [], indent=1, allow_nan=False) + "\n"
    else:
        text = {"nodes": nodes_csv, "steps": steps_csv, "subgraphs": subgraphs_csv}[args.table](report)
    if args.output:
        write_text(args.output, text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m monitors",
        description="Aggregate, compare and export Pipeline Monitor run reports.",
        epilog="exit codes: 0 ok, 1 no usable input, 2 bad command line, 3 some inputs skipped, 4 regressions found",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("aggregate", help="merge reports of several ranks or runs")
    p.add_argument("reports", nargs="*", help="run report JSON files")
    p.add_argument(
        "--reports_dir",
        "--reports-dir",
        action="append",
        metavar="DIR",
        help="also every report in this folder and its sub-folders (repeatable)",
    )
    p.add_argument("-o", "--output", help="write the aggregate as JSON here")
    p.set_defaults(func=cmd_aggregate)
    p = sub.add_parser("compare", help="B against A: per-stage and per-node differences")
    p.add_argument("a", help="the baseline report")
    p.add_argument("b", help="the report to check")
    p.add_argument(
        "--threshold-pct", type=float, default=DEFAULT_THRESHOLD_PCT, help="flag worse by more than this (%%)"
    )
    p.add_argument(
        "--min-seconds", type=float, default=DEFAULT_MIN_SECONDS, help="and by more than this many seconds"
    )
    p.add_argument("--min-bytes", type=int, default=DEFAULT_MIN_BYTES, help="or, for memory, this many bytes")
    p.add_argument(
        "--history",
        nargs="*",
        metavar="PATH",
        help="earlier reports of the same workflow (files or folders): a node is flagged only beyond their spread",
    )
    p.add_argument("-o", "--output", help="write the comparison as JSON here")
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("table", help="a report's per-node, step or subgraph table as CSV (or JSON)")
    p.add_argument("report", help="run report JSON file")
    p.add_argument("--table", choices=TABLES, default="nodes", help="which table (default: nodes)")
    p.add_argument("--format", choices=("csv", "json"), default="csv", help="default: csv")
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.set_defaults(func=cmd_table)
    p = sub.add_parser("trace", help="export reports as one Chrome/Perfetto trace")
    p.add_argument("reports", nargs="+", help="run report JSON files (one process per report)")
    p.add_argument("-o", "--output", required=True, help="trace JSON file to write")
    p.set_defaults(func=cmd_trace)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits with 2 on a bad command line
    if args.command == "aggregate" and not args.reports and not args.reports_dir:
        parser.error("aggregate: name report files or a folder with --reports_dir")
    try:
        return args.func(args)
    except OSError as exc:
        _err(f"error: {exc}")
        return EXIT_NO_INPUT

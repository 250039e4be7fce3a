"""Merge and compare run reports: ranks of a distributed job, or runs before and after a change.

Inputs are report JSON files (schemas/run_report.schema.json). A file that is not valid JSON, not
a run report, or of a schema_version this tool cannot read is named with the reason and skipped:
reports are never silently merged across formats. Version 1 reports are read in version 2 names
(monitors.vocabulary.upgrade.upgrade_report), so old and new runs compare figure by figure. Works on
ComfyUI prompt reports and profiling API reports alike (stages are the profiling API's phases, or the node classes of a ComfyUI run).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence

from ..profiler_step.phases import node_gpu_above_start, node_gpu_peak, profiling_step, report_phases
from ..report import READABLE_SCHEMA_VERSIONS
from ..vocabulary.upgrade import upgrade_report

AGGREGATE_KIND = "pipeline_monitor.aggregate"
COMPARE_KIND = "pipeline_monitor.compare"
OUTPUT_VERSION = 1
THROUGHPUT_KEYS = ("steps_per_s", "blocks_per_s", "frames_per_s")
DEFAULT_THRESHOLD_PCT = 10.0
DEFAULT_MIN_SECONDS = 0.05
DEFAULT_MIN_BYTES = 64 * 1024**2


class ReportError(ValueError):
    """A file that cannot be used as a run report; the message says why."""


def load_report(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise ReportError(f"cannot read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReportError(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ReportError(f"not a run report: the top level is a {type(data).__name__}")
    if "schema_version" not in data:
        raise ReportError("not a run report: no schema_version")
    if data["schema_version"] not in READABLE_SCHEMA_VERSIONS:
        *first, last = (str(v) for v in READABLE_SCHEMA_VERSIONS)
        readable = f"{', '.join(first)} and {last}" if first else last
        raise ReportError(f"schema_version {data['schema_version']!r}; this tool reads {readable}")
    checks = {
        "prompt_id": lambda v: isinstance(v, str),
        "status": lambda v: isinstance(v, str),
        "started_unix_s": lambda v: isinstance(v, (int, float)),
        "duration_s": lambda v: v is None or isinstance(v, (int, float)),
        "nodes": lambda v: isinstance(v, list) and all(isinstance(n, dict) for n in v),
        "steps": lambda v: isinstance(v, list) and all(isinstance(s, dict) for s in v),
        "system": lambda v: isinstance(v, dict),
    }
    for key, ok in checks.items():
        if key not in data or not ok(data[key]):
            raise ReportError(f"malformed run report: {key!r} missing or of the wrong type")
    return upgrade_report(data)


def load_reports(paths: Sequence[str]) -> tuple[list[tuple[str, dict]], list[dict]]:
    """(path, report) for every usable file, and {"path", "reason"} for every skipped one."""
    loaded, skipped = [], []
    for path in paths:
        try:
            loaded.append((path, load_report(path)))
        except ReportError as exc:
            skipped.append({"path": path, "reason": str(exc)})
    return loaded, skipped


# -- figures of one report -------------------------------------------------------------------------


def peak_gpu(report: Mapping) -> int | None:
    values = [node_gpu_peak(n) for n in report.get("nodes") or []]
    summary = (profiling_step(report) or {}).get("summary") or {}
    values.append(summary.get("peak_gpu_allocated_bytes"))
    values = [v for v in values if isinstance(v, (int, float))]
    return max(values) if values else None


def run_figures(report: Mapping) -> dict[str, float | None]:
    summary = (profiling_step(report) or {}).get("summary") or {}
    figures = {
        "duration_s": report.get("duration_s"),
        "peak_rss_bytes": (report.get("span") or {}).get("peak_rss_bytes"),
        "peak_gpu_allocated_bytes": peak_gpu(report),
    }
    for key in THROUGHPUT_KEYS:
        figures[key] = summary.get(key)
    return {
        k: v if isinstance(v, (int, float)) and not isinstance(v, bool) else None for k, v in figures.items()
    }


def rank_of(report: Mapping, index: int) -> int:
    rank = (report.get("system") or {}).get("rank")
    return rank if isinstance(rank, int) and not isinstance(rank, bool) else index


def top_level(phases: list[dict]) -> list[dict]:
    """Top-level phases where nesting is known (so a parent and its children are not both 'slowest')."""
    tops = [p for p in phases if p.get("depth") in (0, None)]
    return tops or phases


def spread(values: Sequence[float]) -> dict:
    return {
        "n": len(values),
        "min": min(values),
        "max": max(values),
        "mean": statistics.fmean(values),
        "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
    }


# -- aggregate -------------------------------------------------------------------------------------


def aggregate(loaded: list[tuple[str, dict]], skipped: list[dict] | None = None) -> dict:
    """Per-metric min/max/mean/std across reports (ranks), per-rank rows, slowest rank and stage."""
    ranks, metrics, stages = [], {}, {}
    for index, (path, report) in enumerate(loaded):
        rank = rank_of(report, index)
        figures = run_figures(report)
        phases = report_phases(report)
        slowest = max(top_level(phases), key=lambda p: p.get("total_s") or 0.0, default=None)
        ranks.append(
            {
                "rank": rank,
                "path": path,
                "run_id": report.get("prompt_id"),
                "host": (report.get("system") or {}).get("host"),
                "status": report.get("status"),
                **figures,
                "slowest_stage": None if slowest is None else slowest["stage"],
                "slowest_stage_s": None if slowest is None else slowest.get("total_s"),
                "stages_s": {p["stage"]: p.get("total_s") for p in phases},
            }
        )
        for key, value in figures.items():
            if value is not None:
                metrics.setdefault(key, []).append((value, rank))
        for phase in phases:
            if isinstance(phase.get("total_s"), (int, float)):
                stages.setdefault(phase["stage"], []).append((phase["total_s"], rank, phase.get("depth")))
    metric_stats = {}
    for key, pairs in metrics.items():
        values = [v for v, _ in pairs]
        metric_stats[key] = {
            **spread(values),
            "min_rank": min(pairs, key=lambda p: p[0])[1],
            "max_rank": max(pairs, key=lambda p: p[0])[1],
        }
    stage_stats = {}
    for stage, triples in stages.items():
        values = [v for v, _, _ in triples]
        stats = spread(values)
        stage_stats[stage] = {
            **{f"{k}_s" if k != "n" else "n_ranks": v for k, v in stats.items()},
            "imbalance_pct": 100.0 * (stats["max"] - stats["min"]) / stats["mean"] if stats["mean"] else None,
            "slowest_rank": max(triples, key=lambda t: t[0])[1],
            "top_level": any(d in (0, None) for _, _, d in triples),
        }
    mean_duration = (metric_stats.get("duration_s") or {}).get("mean")
    for row in ranks:
        d = row["duration_s"]
        row["duration_vs_mean_pct"] = (
            100.0 * (d - mean_duration) / mean_duration if d is not None and mean_duration else None
        )
    timed = [r for r in ranks if r["duration_s"] is not None]
    slowest_rank = max(timed, key=lambda r: r["duration_s"], default=None)
    candidates = {s: v for s, v in stage_stats.items() if v["top_level"]} or stage_stats
    slowest_stage = max(candidates.items(), key=lambda kv: kv[1]["max_s"], default=None)
    versions = sorted({r.get("schema_version") for _, r in loaded})
    return {
        "kind": AGGREGATE_KIND,
        "version": OUTPUT_VERSION,
        "schema_version": versions[0] if len(versions) == 1 else versions,
        "n_reports": len(loaded),
        "skipped": list(skipped or []),
        "metrics": metric_stats,
        "stages": stage_stats,
        "ranks": ranks,
        "slowest_rank": None
        if slowest_rank is None
        else {k: slowest_rank[k] for k in ("rank", "path", "run_id", "duration_s", "duration_vs_mean_pct")},
        "slowest_stage": None
        if slowest_stage is None
        else {
            "stage": slowest_stage[0],
            "rank": slowest_stage[1]["slowest_rank"],
            "total_s": slowest_stage[1]["max_s"],
        },
    }


# -- compare ---------------------------------------------------------------------------------------


def _diff(a, b, threshold_pct: float, min_abs: float) -> dict:
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return {"a": a, "b": b, "delta": None, "delta_pct": None, "regression": False}
    delta = b - a
    pct = 100.0 * delta / a if a else (math.inf if delta > 0 else 0.0)
    regression = delta > min_abs and pct > threshold_pct
    return {
        "a": a,
        "b": b,
        "delta": delta,
        "delta_pct": pct if math.isfinite(pct) else None,
        "regression": regression,
    }


def history_limit(earlier: Sequence, threshold_pct: float, min_abs: float) -> dict:
    """The value above which a new run counts as a regression, from the same figure in earlier
    runs of the workflow: beyond their highest value by more than their spread (max - min), and
    above their median by more than `min_abs` and by more than `threshold_pct`. One earlier run
    has no spread: the limit is then the plain threshold. `n_runs` is how many runs it rests on.
    The panel applies the same rule (web/lib/regression.mjs)."""
    values = [float(v) for v in earlier if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not values:
        return {"limit": None, "n_runs": 0, "median": None, "spread": None}
    median = statistics.median(values)
    spread = max(values) - min(values)
    limit = max(max(values) + spread, median + min_abs, median * (1 + threshold_pct / 100.0))
    return {"limit": limit, "n_runs": len(values), "median": median, "spread": spread}


def _judge(d: dict, earlier: Sequence, threshold_pct: float, min_abs: float) -> dict:
    """A diff's regression verdict from the history: B above the history's limit."""
    verdict = history_limit(earlier, threshold_pct, min_abs)
    b = d.get("b")
    d["regression"] = bool(
        verdict["limit"] is not None and isinstance(b, (int, float)) and b > verdict["limit"]
    )
    d["limit"] = verdict["limit"]
    d["n_runs"] = verdict["n_runs"]
    return d


def _node_values(reports: Sequence[Mapping], key: tuple, figure) -> list:
    """One node's figure in each report where it ran (cached runs did no work and are left out)."""
    values = []
    for report in reports:
        for n in report.get("nodes") or ():
            if (str(n.get("node_id")), n.get("class_type")) == key and not n.get("cached"):
                values.append(figure(n))
    return values


def _compare_run(
    a: Mapping, b: Mapping, earlier: list, threshold_pct: float, min_seconds: float, min_bytes: int
) -> dict:
    """The run's figures: duration and peaks judged against the history, throughput against A."""

    def limit(key: str) -> float:
        return min_bytes if key.endswith("_bytes") else min_seconds

    fa, fb = run_figures(a), run_figures(b)
    run = {
        k: _judge(
            _diff(fa[k], fb[k], threshold_pct, limit(k)),
            [run_figures(r)[k] for r in earlier],
            threshold_pct,
            limit(k),
        )
        for k in ("duration_s", "peak_rss_bytes", "peak_gpu_allocated_bytes")
    }
    for key in THROUGHPUT_KEYS:  # higher is better: a drop is the regression
        d = _diff(fb[key], fa[key], threshold_pct, 0.0)
        run[key] = {
            "a": fa[key],
            "b": fb[key],
            "delta_pct": None if d["delta_pct"] is None else -d["delta_pct"],
            "regression": d["regression"],
        }
    return run


def _compare_stages(
    a: Mapping, b: Mapping, earlier: list, threshold_pct: float, min_seconds: float, min_bytes: int
) -> list[dict]:
    """Per stage (the profiling API's phases, or a ComfyUI run's node classes)."""
    pa = {p["stage"]: p for p in report_phases(a)}
    pb = {p["stage"]: p for p in report_phases(b)}
    earlier_phases = [{p["stage"]: p for p in report_phases(r)} for r in earlier]
    stages = []
    for stage in dict.fromkeys([*pa, *pb]):
        x, y = pa.get(stage) or {}, pb.get(stage) or {}
        row = {"stage": stage, "only_in": None if x and y else ("a" if x else "b")}
        for name, min_abs in (("total_s", min_seconds), ("peak_rss_above_start_bytes", min_bytes)):
            d = _diff(x.get(name), y.get(name), threshold_pct, min_abs)
            past = [phases[stage].get(name) for phases in earlier_phases if stage in phases]
            row[name] = _judge(d, past, threshold_pct, min_abs)
        stages.append(row)
    return stages


def _compare_nodes(
    a: Mapping, b: Mapping, earlier: list, threshold_pct: float, min_seconds: float, min_bytes: int
) -> list[dict]:
    """Per node (id and class): time and the memory it added, judged against its earlier runs."""
    na = {(str(n.get("node_id")), n.get("class_type")): n for n in a.get("nodes") or []}
    nb = {(str(n.get("node_id")), n.get("class_type")): n for n in b.get("nodes") or []}
    figures = {
        "duration_s": (lambda n: n.get("duration_s"), min_seconds),
        "peak_rss_above_start_bytes": (lambda n: n.get("peak_rss_above_start_bytes"), min_bytes),
        "peak_gpu_allocated_above_start_bytes": (node_gpu_above_start, min_bytes),
    }
    nodes = []
    for key in dict.fromkeys([*na, *nb]):
        x, y = na.get(key) or {}, nb.get(key) or {}
        row = {
            "node_id": key[0],
            "class_type": key[1],
            "title": y.get("title") or x.get("title"),
            "only_in": None if x and y else ("a" if x else "b"),
            "cached": [x.get("cached"), y.get("cached")],
        }
        for name, (figure, min_abs) in figures.items():
            d = _diff(figure(x) if x else None, figure(y) if y else None, threshold_pct, min_abs)
            # a node served from the cache in B did no work: nothing to judge
            judged = not y.get("cached")
            row[name] = _judge(d, _node_values(earlier, key, figure), threshold_pct, min_abs) if judged else d
        nodes.append(row)
    return nodes


def compare(
    a: Mapping,
    b: Mapping,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    min_seconds: float = DEFAULT_MIN_SECONDS,
    min_bytes: int = DEFAULT_MIN_BYTES,
    history: Sequence[Mapping] = (),
) -> dict:
    """B against A: run figures, per stage and per node; a regression is B worse by more than
    `threshold_pct` and by more than `min_seconds` (times) or `min_bytes` (memory).

    Stages and nodes compare the memory they added above their own start, not the process's peak
    while they ran: that peak mostly follows whatever ran before (a node is not a regression
    because the process was bigger when it started).

    With `history` (earlier reports of the same workflow), the run's duration and each node's
    figures are judged against A and that history (history_limit): a node is flagged only beyond
    the spread of its earlier runs; each verdict says how many runs it rests on (`n_runs`)."""
    earlier = [a, *[h for h in history if h.get("prompt_id") not in (a.get("prompt_id"), b.get("prompt_id"))]]
    limits = (threshold_pct, min_seconds, min_bytes)
    run = _compare_run(a, b, earlier, *limits)
    stages = _compare_stages(a, b, earlier, *limits)
    nodes = _compare_nodes(a, b, earlier, *limits)
    regressions = [f"run {k}" for k, v in run.items() if v["regression"]]
    regressions += [
        f"stage {s['stage']} {m}"
        for s in stages
        for m in ("total_s", "peak_rss_above_start_bytes")
        if s[m]["regression"]
    ]
    regressions += [
        f"node #{n['node_id']} {n['class_type']} {m}"
        for n in nodes
        for m in ("duration_s", "peak_rss_above_start_bytes", "peak_gpu_allocated_above_start_bytes")
        if n[m]["regression"]
    ]
    return {
        "kind": COMPARE_KIND,
        "version": OUTPUT_VERSION,
        "a": {"run_id": a.get("prompt_id"), "status": a.get("status")},
        "b": {"run_id": b.get("prompt_id"), "status": b.get("status")},
        "threshold_pct": threshold_pct,
        "min_seconds": min_seconds,
        "min_bytes": min_bytes,
        "n_history_runs": len(earlier),
        "run": run,
        "stages": stages,
        "nodes": nodes,
        "regressions": regressions,
    }

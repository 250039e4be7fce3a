"""A run report's timeline as a Chrome trace (trace event format JSON), which Perfetto opens.

- complete events (`"ph": "X"`, `ts`/`dur` in microseconds) for the run and every timed row (a
  ComfyUI node, or a stage of the profiling API); rows on one thread that overlap without nesting
  go to separate lanes, so every lane nests properly; a subgraph roll-up is a span on the main
  thread from its first node's start to its last node's end, so its nodes' spans nest inside it;
- counter events (`"ph": "C"`) for the sampled memory, CPU and GPU readings: the profiling API's
  samples stored in its report, or sampler snapshots passed in;
- instant events (`"ph": "i"`) for the profiling API's custom events;
- metadata events (`"ph": "M"`) naming the process (run, rank) and the threads.

Several reports (ranks) go into one trace with one process each, on a common time axis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..deep_profile.trace_ops import trace_events as deep_trace_events
from ..profiler_step.phases import profiling_step
from ..report import to_jsonable, write_json_atomic
from .trace_models import model_trace_events

US = 1_000_000.0


def _us(seconds: float) -> float:
    return round(seconds * US, 3)  # nanosecond resolution, without float noise in the file


MAIN_THREAD = "main"


def _process_label(report: Mapping) -> str:
    system = report.get("system") or {}
    label = str(report.get("prompt_id") or "run")
    if system.get("rank") is not None:
        label += f" (rank {system['rank']})"
    return label


# A subgraph's span ends at its last node's end, computed from other sums of the same floats: a
# nanosecond either way still nests.
NEST_SLACK_S = 1e-9


def _depth(row: Mapping) -> int:
    """An enclosing subgraph before the ones inside it, and every subgraph before its nodes, when
    they start and end together."""
    subgraph = row.get("subgraph") if isinstance(row, Mapping) else None
    return str(subgraph.get("id")).count(":") if isinstance(subgraph, Mapping) else 1_000_000


def _lanes(rows: list[tuple[float, float, Mapping]]) -> list[list[tuple[float, float, Mapping]]]:
    """Split intervals into lanes in which they nest or follow each other, never half-overlap."""
    lanes: list[list] = []
    stacks: list[list[float]] = []  # per lane: end times of the open enclosing intervals
    for row in sorted(rows, key=lambda r: (round(r[0], 9), -round(r[1], 9), _depth(r[2]))):
        start, end = row[0], row[0] + row[1]
        for lane, stack in zip(lanes, stacks, strict=True):
            while stack and stack[-1] <= start + NEST_SLACK_S:
                stack.pop()
            if not stack or end <= stack[-1] + NEST_SLACK_S:
                lane.append(row)
                stack.append(end)
                break
        else:
            lanes.append([row])
            stacks.append([end])
    return lanes


def _thread_of(report: Mapping) -> dict[str, str]:
    details = (profiling_step(report) or {}).get("details") or {}
    threads = details.get("stage_threads") or {}
    return {str(k): str(v) for k, v in threads.items()} if isinstance(threads, Mapping) else {}


def _samples_from_snapshots(snapshots: Iterable, start_unix_s: float) -> dict[str, list]:
    columns: dict[str, list] = {"t_s": []}
    for i, snap in enumerate(snapshots):
        columns["t_s"].append(snap.unix_time_s - start_unix_s)
        for name, value in snap.metrics().items():
            columns.setdefault(name, [None] * i).append(value)
        for values in columns.values():
            values.extend([None] * (i + 1 - len(values)))
    return columns


def _counter_events(columns: Mapping[str, Sequence], offset_us: float, pid: int) -> list[dict]:
    times = columns.get("t_s") or []
    events = []
    for name, values in columns.items():
        if name == "t_s" or not isinstance(values, Sequence):
            continue
        for t, value in zip(times, values, strict=False):
            if isinstance(value, (int, float)) and isinstance(t, (int, float)):
                events.append(
                    {
                        "name": name,
                        "ph": "C",
                        "ts": round(offset_us + t * US, 3),
                        "pid": pid,
                        "tid": 0,
                        "args": {"value": value},
                    }
                )
    return events


def _report_counter_columns(report: Mapping) -> dict[str, list]:
    """Counter points from what a report holds when it has no samples: the prompt's span
    (baseline and end readings, peaks at their times) and each node row (its start, end and peak
    readings): process RSS, GPU allocated and reserved, GPU utilisation."""
    points: list[tuple[float, str, float]] = []

    def add(t, name, value):
        if isinstance(t, (int, float)) and isinstance(value, (int, float)) and not isinstance(value, bool):
            points.append((float(t), name, value))

    span = report.get("span") if isinstance(report.get("span"), Mapping) else {}
    duration = report.get("duration_s")
    for key, t in (("baseline", 0.0), ("end", duration)):
        reading = span.get(key) if isinstance(span.get(key), Mapping) else {}
        add(t, "process_rss_bytes", reading.get("process_rss_bytes"))
        for gpu in reading.get("gpus") or []:
            if isinstance(gpu, Mapping):
                for name in ("allocated_bytes", "reserved_bytes", "utilization_pct"):
                    add(t, f"{gpu.get('device')}.{name}", gpu.get(name))
    for name, peak in (span.get("peaks") or {}).items():
        if isinstance(peak, Mapping) and (name in COUNTER_PEAKS or str(name).endswith(COUNTER_GPU_PEAKS)):
            add(peak.get("at_s"), name, peak.get("value"))
    for node in report.get("nodes") or []:
        if isinstance(node, Mapping):
            _node_points(node, add)
    points.sort(key=lambda p: p[0])
    columns: dict[str, list] = {"t_s": []}
    for i, (t, name, value) in enumerate(points):
        columns["t_s"].append(t)
        columns.setdefault(name, [None] * i).append(value)
        for values in columns.values():
            values.extend([None] * (i + 1 - len(values)))
    return columns


COUNTER_PEAKS = ("process_rss_bytes",)
COUNTER_GPU_PEAKS = (".allocated_bytes", ".reserved_bytes", ".utilization_pct")


def _node_points(node: Mapping, add) -> None:
    begin, duration = node.get("start_offset_s"), node.get("duration_s")
    if not isinstance(begin, (int, float)) or not isinstance(duration, (int, float)):
        return
    add(begin, "process_rss_bytes", node.get("rss_start_bytes"))
    if isinstance(node.get("peak_rss_at_s"), (int, float)):
        add(begin + node["peak_rss_at_s"], "process_rss_bytes", node.get("peak_rss_bytes"))
    add(begin + duration, "process_rss_bytes", node.get("rss_end_bytes"))
    for gpu in node.get("gpu_peaks") or []:
        if not isinstance(gpu, Mapping):
            continue
        for counter in ("allocated", "reserved"):
            name = f"{gpu.get('device')}.{counter}_bytes"
            add(begin, name, gpu.get(f"{counter}_start_bytes"))
            if isinstance(gpu.get(f"peak_{counter}_at_s"), (int, float)):
                add(begin + gpu[f"peak_{counter}_at_s"], name, gpu.get(f"peak_{counter}_bytes"))
            add(begin + duration, name, gpu.get(f"{counter}_end_bytes"))


def report_events(
    report: Mapping,
    pid: int,
    origin_unix_s: float,
    snapshots: Iterable | None = None,
    deep_ops: Mapping | None = None,
) -> list[dict]:
    """The trace events of one report as process `pid`; times relative to `origin_unix_s`.
    `deep_ops`: the ops file of a deep-profiled run (monitors/deep_profile/trace_ops.py), nested
    under the node spans."""
    start = report.get("started_unix_s") or origin_unix_s
    offset_us = (start - origin_unix_s) * US
    events = _run_events(report, pid, offset_us)
    node_events, node_spans = _node_events(report, pid, offset_us)
    events += node_events
    details = (profiling_step(report) or {}).get("details") or {}
    if deep_ops:
        events += deep_trace_events(deep_ops, node_spans, pid)
    columns = details.get("samples") if snapshots is None else _samples_from_snapshots(snapshots, start)
    if not isinstance(columns, Mapping) or len(columns.get("t_s") or ()) == 0:
        columns = _report_counter_columns(report)
    if isinstance(columns, Mapping):
        events += _counter_events(columns, offset_us, pid)
    events += _instant_events(details.get("events") or [], pid, offset_us)
    events += model_trace_events(report, pid, offset_us)  # loads, unloads, LoRA patches on their own track
    return events


def _run_events(report: Mapping, pid: int, offset_us: float) -> list[dict]:
    """The process's names and sort index, and the whole run as one span (when its duration is known)."""
    events: list[dict] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": _process_label(report)}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "run"}},
    ]
    if report.get("duration_s") is not None:
        events.append(
            {
                "name": str(report.get("prompt_id") or "run"),
                "cat": "run",
                "ph": "X",
                "ts": round(offset_us, 3),
                "dur": _us(report["duration_s"]),
                "pid": pid,
                "tid": 0,
                "args": {
                    "status": report.get("status"),
                    "peak_rss_bytes": (report.get("span") or {}).get("peak_rss_bytes"),
                },
            }
        )
    return events


def _node_events(report: Mapping, pid: int, offset_us: float) -> tuple[list[dict], dict]:
    """A named lane per thread (more where its nodes overlap) with the node spans on it, and
    node id -> (tid, start us, end us, name) for the deep ops nested under them."""
    threads = _thread_of(report)
    by_thread: dict[str, list] = {}
    for node in report.get("nodes") or []:
        if not isinstance(node, Mapping):
            continue
        begin, duration = node.get("start_offset_s"), node.get("duration_s")
        if isinstance(begin, (int, float)) and isinstance(duration, (int, float)):
            thread = threads.get(str(node.get("node_id")), MAIN_THREAD)
            by_thread.setdefault(thread, []).append((float(begin), float(duration), node))
    for subgraph in report.get("subgraphs") or []:
        begin, duration = subgraph.get("start_offset_s"), subgraph.get("wall_s")
        if isinstance(begin, (int, float)) and isinstance(duration, (int, float)):
            by_thread.setdefault(MAIN_THREAD, []).append((float(begin), float(duration), {"subgraph": subgraph}))
    events: list[dict] = []
    tid = 0
    node_spans: dict[str, tuple[int, float, float, str]] = {}
    for thread in sorted(by_thread, key=lambda t: (t != MAIN_THREAD, t)):
        for index, lane in enumerate(_lanes(by_thread[thread])):
            tid += 1
            name = thread if index == 0 else f"{thread} ({index + 1})"
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            for begin, duration, node in lane:
                ts = round(offset_us + begin * US, 3)
                if "subgraph" in node:
                    events.append(_subgraph_span(node["subgraph"], ts, _us(duration), pid, tid))
                    continue
                label = str(node.get("title") or node.get("class_type") or f"node {node.get('node_id')}")
                node_spans.setdefault(str(node.get("node_id")), (tid, ts, ts + _us(duration), label))
                events.append(_node_span(node, label, ts, _us(duration), pid, tid))
    return events, node_spans


def _node_span(node: Mapping, label: str, ts: float, dur: float, pid: int, tid: int) -> dict:
    return {
        "name": label,
        "cat": str(node.get("class_type") or "node"),
        "ph": "X",
        "ts": ts,
        "dur": dur,
        "pid": pid,
        "tid": tid,
        "args": {
            "node_id": node.get("node_id"),
            "status": node.get("status"),
            "peak_rss_bytes": node.get("peak_rss_bytes"),
            "rss_change_bytes": node.get("rss_change_bytes"),
            "gpu_peaks": node.get("gpu_peaks") or [],
        },
    }


def _subgraph_span(subgraph: Mapping, ts: float, dur: float, pid: int, tid: int) -> dict:
    name = subgraph.get("name") or f"subgraph {subgraph.get('id')}"
    return {
        "name": str(name),
        "cat": "subgraph",
        "ph": "X",
        "ts": ts,
        "dur": dur,
        "pid": pid,
        "tid": tid,
        "args": {
            "subgraph_id": subgraph.get("id"),
            "node_time_sum_s": subgraph.get("node_time_sum_s"),
            "n_nodes": len(subgraph.get("node_ids") or ()),
            "n_cached": subgraph.get("n_cached"),
            "peak_rss_bytes": subgraph.get("peak_rss_bytes"),
        },
    }


def _instant_events(recorded: list, pid: int, offset_us: float) -> list[dict]:
    """The profiling API's recorded events (record_event) as instants on the run's lane."""
    events = []
    for event in recorded:
        if isinstance(event, Mapping) and isinstance(event.get("t_s"), (int, float)):
            events.append(
                {
                    "name": str(event.get("name")),
                    "cat": "event",
                    "ph": "i",
                    "s": "p",
                    "ts": round(offset_us + event["t_s"] * US, 3),
                    "pid": pid,
                    "tid": 0,
                    "args": {"thread": event.get("thread"), "data": event.get("data")},
                }
            )
    return events


def reports_to_trace(
    reports: Sequence[Mapping], snapshots: Iterable | None = None, deep_ops: Mapping | None = None
) -> dict:
    """One trace for one or more reports (e.g. the ranks of a job), aligned on wall-clock time.

    `snapshots` (sampler Snapshots) replace the stored samples of a single report; `deep_ops`
    (prompt id -> ops file) nests a deep-profiled run's ops and kernels under its node spans."""
    starts = [r.get("started_unix_s") for r in reports if isinstance(r.get("started_unix_s"), (int, float))]
    origin = min(starts) if starts else 0.0
    events = []
    for index, report in enumerate(reports):
        pid = (report.get("system") or {}).get("rank")
        pid = pid + 1 if isinstance(pid, int) and pid >= 0 else index + 1
        ops = (deep_ops or {}).get(str(report.get("prompt_id")))
        events += report_events(report, pid, origin, snapshots if len(reports) == 1 else None, ops)
    return to_jsonable(
        {
            "traceEvents": events,
            "displayTimeUnit": "ms",
            "otherData": {
                "source": "pipeline_monitor",
                "origin_unix_s": origin,
                "runs": [r.get("prompt_id") for r in reports],
            },
        }
    )


def report_to_trace(report: Mapping, snapshots: Iterable | None = None, deep_ops: Mapping | None = None) -> dict:
    """`deep_ops`: the report's ops file (monitors/deep_profile/trace_ops.read_ops), or None."""
    return reports_to_trace([report], snapshots, {str(report.get("prompt_id")): deep_ops} if deep_ops else None)


def write_trace(path: str, reports: Sequence[Mapping] | Mapping, snapshots: Iterable | None = None) -> str:
    """Write the trace JSON atomically; returns the path."""
    reports = [reports] if isinstance(reports, Mapping) else list(reports)
    write_json_atomic(path, reports_to_trace(reports, snapshots))
    return path

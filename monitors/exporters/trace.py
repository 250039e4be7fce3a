"""A run report's timeline as a Chrome trace (trace event format JSON), which Perfetto opens.

- complete events (`"ph": "X"`, `ts`/`dur` in microseconds) for the run and every timed row (a
  ComfyUI node, or a stage of the profiling API); rows on one thread that overlap without nesting
  go to separate lanes, so every lane nests properly;
- counter events (`"ph": "C"`) for the sampled memory, CPU and GPU readings: the profiling API's
  samples stored in its report, or sampler snapshots passed in;
- instant events (`"ph": "i"`) for the profiling API's custom events;
- metadata events (`"ph": "M"`) naming the process (run, rank) and the threads.

Several reports (ranks) go into one trace with one process each, on a common time axis.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ..profiling.phases import profiling_step
from ..report import to_jsonable, write_json_atomic

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


def _lanes(rows: list[tuple[float, float, Mapping]]) -> list[list[tuple[float, float, Mapping]]]:
    """Split intervals into lanes in which they nest or follow each other, never half-overlap."""
    lanes: list[list] = []
    stacks: list[list[float]] = []  # per lane: end times of the open enclosing intervals
    for row in sorted(rows, key=lambda r: (r[0], -r[1])):
        start, end = row[0], row[0] + row[1]
        for lane, stack in zip(lanes, stacks, strict=True):
            while stack and stack[-1] <= start:
                stack.pop()
            if not stack or end <= stack[-1]:
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


def report_events(
    report: Mapping, pid: int, origin_unix_s: float, snapshots: Iterable | None = None
) -> list[dict]:
    """The trace events of one report as process `pid`; times relative to `origin_unix_s`."""
    start = report.get("started_unix_s") or origin_unix_s
    offset_us = (start - origin_unix_s) * US
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
    threads = _thread_of(report)
    by_thread: dict[str, list] = {}
    for node in report.get("nodes") or []:
        if not isinstance(node, Mapping):
            continue
        begin, duration = node.get("start_offset_s"), node.get("duration_s")
        if isinstance(begin, (int, float)) and isinstance(duration, (int, float)):
            thread = threads.get(str(node.get("node_id")), MAIN_THREAD)
            by_thread.setdefault(thread, []).append((float(begin), float(duration), node))
    tid = 0
    for thread in sorted(by_thread, key=lambda t: (t != MAIN_THREAD, t)):
        for index, lane in enumerate(_lanes(by_thread[thread])):
            tid += 1
            name = thread if index == 0 else f"{thread} ({index + 1})"
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
            for begin, duration, node in lane:
                events.append(
                    {
                        "name": str(
                            node.get("title") or node.get("class_type") or f"node {node.get('node_id')}"
                        ),
                        "cat": str(node.get("class_type") or "node"),
                        "ph": "X",
                        "ts": round(offset_us + begin * US, 3),
                        "dur": _us(duration),
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
                )
    details = (profiling_step(report) or {}).get("details") or {}
    columns = details.get("samples") if snapshots is None else _samples_from_snapshots(snapshots, start)
    if isinstance(columns, Mapping):
        events += _counter_events(columns, offset_us, pid)
    for event in details.get("events") or []:
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


def reports_to_trace(reports: Sequence[Mapping], snapshots: Iterable | None = None) -> dict:
    """One trace for one or more reports (e.g. the ranks of a job), aligned on wall-clock time.

    `snapshots` (sampler Snapshots) replace the stored samples of a single report."""
    starts = [r.get("started_unix_s") for r in reports if isinstance(r.get("started_unix_s"), (int, float))]
    origin = min(starts) if starts else 0.0
    events = []
    for index, report in enumerate(reports):
        pid = (report.get("system") or {}).get("rank")
        pid = pid + 1 if isinstance(pid, int) and pid >= 0 else index + 1
        events += report_events(report, pid, origin, snapshots if len(reports) == 1 else None)
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


def report_to_trace(report: Mapping, snapshots: Iterable | None = None) -> dict:
    return reports_to_trace([report], snapshots)


def write_trace(path: str, reports: Sequence[Mapping] | Mapping, snapshots: Iterable | None = None) -> str:
    """Write the trace JSON atomically; returns the path."""
    reports = [reports] if isinstance(reports, Mapping) else list(reports)
    write_json_atomic(path, reports_to_trace(reports, snapshots))
    return path

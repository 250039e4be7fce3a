"""The ops and kernels of a deep-profiled prompt for the Perfetto/Chrome trace: a capped file
beside the reports (`<reports>/.deep_profiles/<prompt id>.ops.json`) that the trace export
(monitors/exporters/trace.py) nests under the report's node spans.

Times are kept relative to the start of the node's `record_function` range that holds the op, so
the export places them inside the node's span of the report (which encloses that range: the span
opens before the range and closes after it) without mixing the profiler's clock with the report's.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping

from ..report import write_json_atomic
from .analysis import is_device_event

log = logging.getLogger(__name__)

FORMAT = "pipeline_monitor.deep_ops"
FORMAT_VERSION = 1
DIR_NAME = ".deep_profiles"  # hidden: the run store's listing and pruning skip it
SUFFIX = ".ops.json"
# The cap on what the trace keeps: the longest ops and kernels first. About 100 bytes each on
# disk, so a deep trace stays under ~20 MB whatever the prompt's length.
MAX_TRACE_EVENTS = 200_000
MAX_FILES = 20  # deep traces kept on disk, oldest removed first


def collect(events: Iterable, ranges: Mapping[str, tuple[str, str | None]]) -> tuple[list, list]:
    """(host, device) rows: [node id, name, start us after the node's range start, duration us,
    depth under the range (1: the node's own op)] and [node id, name, start, duration, stream]."""
    host, device = [], []
    info: dict[int, tuple | None] = {}  # id(event) -> (node id, range start, depth)
    by_correlation: dict[int, tuple] = {}

    def where(event):
        key = id(event)
        if key not in info:
            parent = getattr(event, "cpu_parent", None)
            if parent is None:
                info[key] = None
            elif parent.name in ranges:
                info[key] = (ranges[parent.name][0], float(parent.time_range.start), 1)
            else:
                above = where(parent)
                info[key] = None if above is None else (above[0], above[1], above[2] + 1)
        return info[key]

    kernels = []
    for event in events:
        if is_device_event(event):
            kernels.append(event)
            continue
        if event.name in ranges:  # kernels launched outside ops are linked to the range itself
            by_correlation[getattr(event, "id", -1)] = (
                ranges[event.name][0],
                float(event.time_range.start),
                0,
            )
            continue
        found = where(event)
        if found is None:
            continue
        node_id, origin, depth = found
        start, end = float(event.time_range.start), float(event.time_range.end)
        host.append([node_id, event.name, start - origin, end - start, depth])
        if not getattr(event, "linked_correlation_id", 0):
            by_correlation[getattr(event, "id", -1)] = found
    for kernel in kernels:
        found = by_correlation.get(getattr(kernel, "linked_correlation_id", 0))
        if found is None:
            continue
        start, end = float(kernel.time_range.start), float(kernel.time_range.end)
        stream = getattr(kernel, "device_resource_id", None) or getattr(kernel, "device_index", 0)
        device.append([found[0], kernel.name, start - found[1], end - start, int(stream or 0)])
    return host, device


def capped(host: list, device: list, max_events: int = MAX_TRACE_EVENTS) -> tuple[list, list, int]:
    """At most `max_events` rows, the longest kept; returns (host, device, n dropped)."""
    n = len(host) + len(device)
    if n <= max_events:
        return host, device, 0
    tagged = [(row[3], 0, row) for row in host] + [(row[3], 1, row) for row in device]
    tagged.sort(key=lambda t: -t[0])
    kept = tagged[:max_events]
    keep_host = sorted((r for _, side, r in kept if side == 0), key=lambda r: (r[0], r[2]))
    keep_device = sorted((r for _, side, r in kept if side == 1), key=lambda r: (r[0], r[2]))
    return keep_host, keep_device, n - max_events


def ops_path(reports_dir: str, prompt_id: str) -> str:
    return os.path.join(reports_dir, DIR_NAME, f"{prompt_id}{SUFFIX}")


def write_ops(reports_dir: str, prompt_id: str, host: list, device: list, n_dropped: int) -> str:
    path = ops_path(reports_dir, prompt_id)
    data = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "prompt_id": prompt_id,
        "host": host,
        "device": device,
        "n_dropped": n_dropped,
    }
    write_json_atomic(path, data, compact=True, durable=False)
    _prune(os.path.dirname(path))
    return path


def _prune(directory: str, keep: int = MAX_FILES) -> None:
    entries = []
    with os.scandir(directory) as it:
        for entry in it:
            if entry.is_file() and entry.name.endswith(SUFFIX):
                entries.append((entry.stat().st_mtime, entry.path))
    entries.sort()
    for _, path in entries[: max(0, len(entries) - keep)]:
        try:
            os.unlink(path)
        except OSError:
            pass


def read_ops(report_path: str, prompt_id: str) -> dict | None:
    """The ops file of a report read from `report_path` (beside it), or None."""
    path = ops_path(os.path.dirname(os.path.abspath(report_path)), str(prompt_id))
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == FORMAT else None


def _clamped(lo: float, hi: float, start: float, end: float) -> tuple[float, float]:
    start, end = min(max(start, lo), hi), min(max(end, lo), hi)
    return round(start, 3), round(end, 3)


def trace_events(
    ops: Mapping, node_spans: Mapping[str, tuple[int, float, float, str]], pid: int
) -> list[dict]:
    """Chrome trace events of an ops file: host ops on their node's lane, inside its span (`node
    id -> (tid, start us, end us, label)`), kernels on one lane per stream, each node's kernels
    under a span of that node. Ops of nodes without a span in the report are left out."""
    events: list[dict] = []
    for row in ops.get("host") or []:
        span = node_spans.get(str(row[0])) if isinstance(row, list) and len(row) >= 5 else None
        if span is None:
            continue
        tid, lo, hi, _ = span
        start, end = _clamped(lo, hi, lo + float(row[2]), lo + float(row[2]) + float(row[3]))
        events.append(
            {
                "name": str(row[1]),
                "cat": "op",
                "ph": "X",
                "ts": start,
                "dur": round(end - start, 3),
                "pid": pid,
                "tid": tid,
                "args": {"node_id": str(row[0]), "depth": row[4]},
            }
        )
    by_stream: dict[int, dict[str, list]] = {}
    for row in ops.get("device") or []:
        span = node_spans.get(str(row[0])) if isinstance(row, list) and len(row) >= 5 else None
        if span is not None:
            start = span[1] + float(row[2])
            by_stream.setdefault(int(row[4]), {}).setdefault(str(row[0]), []).append(
                (start, float(row[3]), row)
            )
    for index, (stream, nodes) in enumerate(sorted(by_stream.items())):
        tid = DEVICE_TID_BASE + index
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": pid,
                "tid": tid,
                "args": {"name": f"GPU stream {stream}"},
            }
        )
        for node_id, kernels in nodes.items():
            first = min(k[0] for k in kernels)
            last = max(k[0] + k[1] for k in kernels)
            events.append(
                {
                    "name": node_spans[node_id][3],
                    "cat": "node_kernels",
                    "ph": "X",
                    "ts": round(first, 3),
                    "dur": round(last - first, 3),
                    "pid": pid,
                    "tid": tid,
                    "args": {"node_id": node_id},
                }
            )
            for start, duration, row in kernels:
                events.append(
                    {
                        "name": str(row[1]),
                        "cat": "kernel",
                        "ph": "X",
                        "ts": round(start, 3),
                        "dur": round(duration, 3),
                        "pid": pid,
                        "tid": tid,
                        "args": {"node_id": node_id},
                    }
                )
    return events


DEVICE_TID_BASE = 10_000

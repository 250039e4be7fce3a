"""Phase analysis: time and memory per stage (profiling API) or per node class (ComfyUI runs).

A phase groups every timed row with the same name: calls, total/mean/min/max time, share of the
run, the highest peak RSS and GPU allocation seen in it, the most RSS one call added above its own
start (what the phase itself needed, unlike the peak which includes all that ran before), the
summed RSS change and the errors.
Nested stages are phases of their own and are also inside their parent's time, so shares can add
up to more than 100 %; `depth` (the shallowest nesting level seen) tells the top-level phases.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..node_fields import node_gpu_peak


@dataclass
class _Phase:
    n_calls: int = 0
    n_errors: int = 0
    total_s: float = 0.0
    min_s: float | None = None
    max_s: float | None = None
    peak_rss_bytes: int | None = None
    rss_change_bytes: float | None = None
    peak_gpu_allocated_bytes: int | None = None
    depth: int | None = None
    peak_rss_above_start_bytes: int | None = None


def _max(a, b):
    return b if a is None else a if b is None else max(a, b)


class PhaseAccumulator:
    """Exact per-phase totals, kept incrementally so that no bound on stored rows affects them."""

    def __init__(self):
        self._phases: dict[str, _Phase] = {}
        self._lock = threading.Lock()

    def add(
        self,
        name: str,
        duration_s: float | None,
        peak_rss_bytes: int | None = None,
        rss_change_bytes: float | None = None,
        peak_gpu_allocated_bytes: int | None = None,
        depth: int = 0,
        error: bool = False,
        peak_rss_above_start_bytes: int | None = None,
    ) -> None:
        with self._lock:
            phase = self._phases.setdefault(name, _Phase())
            phase.n_calls += 1
            phase.n_errors += int(error)
            if duration_s is not None:
                phase.total_s += duration_s
                phase.min_s = duration_s if phase.min_s is None else min(phase.min_s, duration_s)
                phase.max_s = _max(phase.max_s, duration_s)
            phase.peak_rss_bytes = _max(phase.peak_rss_bytes, peak_rss_bytes)
            if rss_change_bytes is not None:
                phase.rss_change_bytes = (phase.rss_change_bytes or 0) + rss_change_bytes
            phase.peak_gpu_allocated_bytes = _max(phase.peak_gpu_allocated_bytes, peak_gpu_allocated_bytes)
            phase.depth = depth if phase.depth is None else min(phase.depth, depth)
            phase.peak_rss_above_start_bytes = _max(
                phase.peak_rss_above_start_bytes, peak_rss_above_start_bytes
            )

    def add_timed(
        self, name: str, n_calls: int, n_errors: int, total_s: float, min_s: float, max_s: float, depth: int
    ) -> None:
        """Merge the totals of calls timed without memory figures (kept by the caller, summed)."""
        with self._lock:
            phase = self._phases.setdefault(name, _Phase())
            phase.n_calls += n_calls
            phase.n_errors += n_errors
            phase.total_s += total_s
            phase.min_s = min_s if phase.min_s is None else min(phase.min_s, min_s)
            phase.max_s = _max(phase.max_s, max_s)
            phase.depth = depth if phase.depth is None else min(phase.depth, depth)

    def rows(self, run_duration_s: float | None = None) -> list[dict]:
        """One dict per phase, slowest first."""
        with self._lock:
            items = list(self._phases.items())
        rows = []
        for name, p in items:
            timed = p.min_s is not None
            rows.append(
                {
                    "stage": name,
                    "n_calls": p.n_calls,
                    "n_errors": p.n_errors,
                    "total_s": p.total_s if timed else None,
                    "mean_s": p.total_s / p.n_calls if timed else None,
                    "min_s": p.min_s,
                    "max_s": p.max_s,
                    "share_pct": 100.0 * p.total_s / run_duration_s if timed and run_duration_s else None,
                    "peak_rss_bytes": p.peak_rss_bytes,
                    "peak_rss_above_start_bytes": p.peak_rss_above_start_bytes,
                    "rss_change_bytes": p.rss_change_bytes,
                    "peak_gpu_allocated_bytes": p.peak_gpu_allocated_bytes,
                    "depth": p.depth,
                }
            )
        rows.sort(key=lambda r: -(r["total_s"] or 0.0))
        return rows


def node_gpu_above_start(node: Mapping) -> int | None:
    """The most GPU memory the node allocated above its own start, over its devices."""
    values = [
        p.get("peak_allocated_above_start_bytes")
        for p in node.get("gpu_peaks") or []
        if isinstance(p, Mapping)
    ]
    values = [v for v in values if isinstance(v, (int, float))]
    return max(values) if values else None


def phases_from_nodes(nodes: Iterable[Mapping], run_duration_s: float | None = None) -> list[dict]:
    """Phases of report rows (dicts as in the JSON report); cached rows are not timed work."""
    acc = PhaseAccumulator()
    for node in nodes:
        if not isinstance(node, Mapping) or node.get("cached"):
            continue
        duration = node.get("duration_s")
        acc.add(
            str(node.get("class_type") or f"node {node.get('node_id')}"),
            duration if isinstance(duration, (int, float)) else None,
            node.get("peak_rss_bytes"),
            node.get("rss_change_bytes"),
            node_gpu_peak(node),
            error=node.get("status") in ("error", "interrupted"),
            peak_rss_above_start_bytes=node.get("peak_rss_above_start_bytes"),
        )
    return acc.rows(run_duration_s)


def profiling_step(report: Mapping) -> Mapping | None:
    """The step the profiling API adds to its reports, or None (ComfyUI runs have none)."""
    for step in report.get("steps") or []:
        if isinstance(step, Mapping) and step.get("kind") == "profiling":
            return step
    return None


def report_phases(report: Mapping) -> list[dict]:
    """The phases of any run report: the profiling API's exact ones when present, else per node class."""
    step = profiling_step(report)
    phases = ((step or {}).get("details") or {}).get("phases")
    if isinstance(phases, list) and all(isinstance(p, Mapping) and "stage" in p for p in phases):
        return [dict(p) for p in phases]
    return phases_from_nodes(report.get("nodes") or [], report.get("duration_s"))

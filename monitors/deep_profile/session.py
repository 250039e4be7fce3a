"""One deep-profiled prompt (or profiling session): `torch.profiler` around it, one
`record_function` range per node, and the `deep_profile` step built from what it recorded.

Nothing here raises into the caller: a profiler that is missing, fails to start or fails to stop
leaves `failed_reason`, and the step says why its figures are missing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from ..report import Finding, StepReport
from . import analysis, trace_ops
from .details import DEEP_PROFILE_DETAILS
from .links import restore_links
from .summary import DeepProfileSummary

log = logging.getLogger(__name__)

KIND = "deep_profile"
RANGE_PREFIX = "node "
MAX_OPEN_RANGES = 1000
# The step stays small whatever the prompt's length: at most this many node rows (the longest
# wall times), five top ops each; the ops themselves go to the capped trace file.
MAX_NODE_ROWS = 200


def range_name(node_id: str, class_type: str | None) -> str:
    return f"{RANGE_PREFIX}{node_id} {class_type or 'unknown class'}"


def torch_profiler(cuda: bool):
    """torch.profiler over CPU activity, plus CUDA activity when a CUDA device is in use; shapes,
    stacks and memory recording off."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(activities=activities, record_shapes=False, with_stack=False, profile_memory=False)


def torch_cuda_in_use() -> bool:
    """Whether CUDA is initialised in this process (a flag read: CUDA is never started here)."""
    import torch

    return bool(torch.cuda.is_initialized())


def torch_range(name: str):
    from torch.profiler import record_function

    handle = record_function(name)
    handle.__enter__()
    return handle


class DeepProfiler:
    """start(); node_started/node_finished around each node; stop() -> the step's parts."""

    def __init__(
        self,
        prompt_id: str,
        cuda: bool,
        profiler_factory: Callable = torch_profiler,
        range_factory: Callable = torch_range,
    ):
        self.prompt_id = str(prompt_id)
        self.cuda = bool(cuda)
        self._factory, self._range_factory = profiler_factory, range_factory
        self._profiler = None
        self.failed_reason: str | None = None
        self.unlinked_reason: str | None = None  # why kernels could not be tied to their ops
        self.ranges: dict[str, tuple[str, str | None]] = {}  # range name -> (node id, class)
        self._open: dict[str, list] = {}  # node id -> its open ranges
        self.started_monotonic_s: float | None = None
        self.wall_s: float | None = None
        self.start_s: float | None = (
            None  # what starting the profiler took (its first start imports torch._dynamo)
        )

    def _fail(self, what: str, exc: BaseException) -> None:
        if self.failed_reason is None:
            self.failed_reason = f"the profiler failed to {what}: {type(exc).__name__}: {exc}"
        log.warning("pipeline monitor: deep profile of %s: %s", self.prompt_id, self.failed_reason)

    def start(self) -> DeepProfiler:
        try:
            if self.cuda and self._factory is torch_profiler and not torch_cuda_in_use():
                self.cuda = False  # the probes' reading was not torch's own (fake probes)
            began = time.monotonic()
            self._profiler = self._factory(self.cuda)
            self._profiler.start()
            self.started_monotonic_s = began  # the prompt's wall under the profiler includes its start
            self.start_s = time.monotonic() - began
        except Exception as exc:
            self._profiler = None
            self._fail("start", exc)
        return self

    @property
    def running(self) -> bool:
        return self._profiler is not None

    def node_started(self, node_id: str, class_type: str | None) -> None:
        if self._profiler is None or sum(len(v) for v in self._open.values()) >= MAX_OPEN_RANGES:
            return
        name = range_name(str(node_id), class_type)
        self.ranges[name] = (str(node_id), class_type)
        try:
            self._open.setdefault(str(node_id), []).append(self._range_factory(name))
        except Exception as exc:
            self._fail("open a node range", exc)

    def node_finished(self, node_id: str) -> None:
        stack = self._open.get(str(node_id))
        if not stack:
            return
        handle = stack.pop()
        try:
            handle.__exit__(None, None, None)
        except Exception as exc:
            self._fail("close a node range", exc)

    def stop(self):
        """Close what is open, stop the profiler; returns its events (None when it failed)."""
        for node_id in list(self._open):
            while self._open.get(node_id):
                self.node_finished(node_id)
        if self.started_monotonic_s is not None:
            self.wall_s = time.monotonic() - self.started_monotonic_s
        profiler, self._profiler = self._profiler, None
        if profiler is None:
            return None
        try:
            profiler.stop()
            events, self.unlinked_reason = restore_links(profiler, profiler.events())
            return events
        except Exception as exc:
            self._fail("stop", exc)
            return None


def build_step(
    profiler: DeepProfiler,
    events,
    baseline: Mapping | None = None,
    reports_dir: str | None = None,
    max_trace_events: int = trace_ops.MAX_TRACE_EVENTS,
) -> StepReport:
    """The `deep_profile` step. `baseline`: {prompt_id, duration_s} of the workflow's last plain
    run, for the overhead; `reports_dir`: where the ops file for the trace goes (None: none)."""
    started = time.monotonic()
    reasons: dict[str, str] = {}
    errors: list[str] = []
    rows: list[dict] = []
    node_totals = analysis.totals(rows, profiler.cuda)
    trace: dict = {"file": None, "n_host_events": 0, "n_device_events": 0, "n_dropped": 0}
    if events is None:
        reasons["nodes"] = profiler.failed_reason or "the profiler recorded nothing"
    else:
        try:
            rows = analysis.node_rows(analysis.attribute(events, profiler.ranges), profiler.cuda)
            node_totals = analysis.totals(rows, profiler.cuda)
            if len(rows) > MAX_NODE_ROWS:
                kept = {id(r) for r in sorted(rows, key=lambda r: -r["wall_s"])[:MAX_NODE_ROWS]}
                reasons["nodes_left_out"] = f"{len(rows) - MAX_NODE_ROWS} nodes with the shortest wall times"
                rows = [r for r in rows if id(r) in kept]
        except Exception as exc:
            reasons["nodes"] = f"the profiler's events could not be read: {type(exc).__name__}: {exc}"
        trace = _trace_file(profiler, events, reports_dir, max_trace_events, reasons)
    if profiler.failed_reason:
        errors.append(profiler.failed_reason)
    if profiler.unlinked_reason:
        reasons["device"] = profiler.unlinked_reason
    summary = DeepProfileSummary(
        **node_totals,
        **_overhead(profiler, baseline, reasons),
        n_trace_events=trace["n_host_events"] + trace["n_device_events"],
        n_trace_events_dropped=trace["n_dropped"],
    )
    if not profiler.cuda:
        reasons["device"] = analysis.NO_CUDA_REASON
    details = {
        "activities": ["cpu", "cuda"] if profiler.cuda else ["cpu"],
        "nodes": rows,
        "baseline_prompt_id": None if not baseline else baseline.get("prompt_id"),
        "trace": {**trace, "max_events": max_trace_events},
        "unknown_reasons": reasons,
        "profiler_start_s": profiler.start_s,
        "analysis_s": time.monotonic() - started,
    }
    findings = ()
    if summary.overhead_ratio is not None:
        findings = (
            Finding(
                "info",
                f"timings of this prompt include the profiler's overhead: {summary.overhead_ratio:.2f}x "
                f"the wall time of the workflow's last plain run",
                "deep_profile_overhead",
            ),
        )
    return StepReport(
        kind=KIND,
        node_id=None,
        summary=summary.to_dict(),
        details=DEEP_PROFILE_DETAILS.build(**details),
        findings=findings,
        monitor_errors=tuple(errors),
        created_unix_s=time.time(),
    )


def _overhead(profiler: DeepProfiler, baseline: Mapping | None, reasons: dict) -> dict:
    """The prompt's wall time under the profiler, from its start to now: stopping the profiler,
    reading its events and writing the ops file are part of what the prompt paid."""
    base = None if not baseline else baseline.get("duration_s")
    wall = None if profiler.started_monotonic_s is None else time.monotonic() - profiler.started_monotonic_s
    ratio = None
    if wall is None:
        reasons["overhead"] = "the profiler did not run"
    elif not isinstance(base, (int, float)) or base <= 0:
        reasons["overhead"] = "no earlier plain run of this workflow to compare with"
        base = None
    else:
        ratio = wall / base
    return {"prompt_wall_s": wall, "baseline_wall_s": base, "overhead_ratio": ratio}


def _trace_file(profiler: DeepProfiler, events, reports_dir, max_events: int, reasons: dict) -> dict:
    trace = {"file": None, "n_host_events": 0, "n_device_events": 0, "n_dropped": 0}
    try:
        host, device = trace_ops.collect(events, profiler.ranges)
        host, device, dropped = trace_ops.capped(host, device, max_events)
        trace.update(n_host_events=len(host), n_device_events=len(device), n_dropped=dropped)
        if reports_dir is None:
            reasons["trace"] = "no reports folder: the ops are not kept for the trace"
        else:
            path = trace_ops.write_ops(reports_dir, profiler.prompt_id, host, device, dropped)
            trace["file"] = path.rsplit("/", 1)[-1].rsplit("\\", 1)[-1]
    except Exception as exc:
        reasons["trace"] = f"the ops for the trace were not written: {type(exc).__name__}: {exc}"
    return trace

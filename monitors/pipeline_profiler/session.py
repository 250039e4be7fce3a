"""One profiled generation: its stages, steps, blocks, events and samples, and its report files.

The profiling API (profiling.py) opens a ProfileSession per `profile_session(...)`; the session
measures each stage with a Span (exact peaks, nesting), keeps bounded lists, and at the end builds
the same RunReport as a ComfyUI prompt: one NodeProfile row per stage call (class_type = stage
name) and one step of kind `profiling` with throughput, phases, suggestions and the rest.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from collections import deque

from ..engine.node_rows import node_profile_from_span
from ..engine.sampler import Sampler
from ..engine.span import Span
from ..node_fields import NodeProfile
from ..probes import DETAIL_FULL, DETAIL_LIGHT, Probes, get_probes
from ..profiler_step.phases import PhaseAccumulator
from ..report import to_jsonable
from . import deep_session
from .config import ProfilingConfig
from .display import display_line
from .report import build_report, write_report_files
from .run_identity import distributed_info, make_run_id

log = logging.getLogger(__name__)

MAX_MONITOR_ERRORS = 50
MAX_EVENTS = 1000


class _OpenStage:
    __slots__ = ("node_id", "stage", "span", "depth", "thread", "started_s", "duration_s")

    def __init__(self, node_id, stage, span, depth, thread, started_s=None):
        self.node_id, self.stage, self.span, self.depth, self.thread = node_id, stage, span, depth, thread
        self.started_s, self.duration_s = started_s, None


def measures_memory(config: ProfilingConfig) -> bool:
    """Whether stages need memory readings: only when a memory figure is configured. Otherwise a
    stage is timed with two clock reads (no probe, no psutil call, no span) and its row's memory
    figures are None: the report's config (metrics.system_memory / gpu_memory off) says why."""
    return bool(config.metrics.system_memory or config.metrics.gpu_memory)


class ProfileSession:
    """Use through `profiling.profile_session`; every method is safe to call from the user's code:
    monitoring failures are recorded in `monitor_errors` and logged, never raised."""

    def __init__(
        self, name: str, tags: dict | None, config: ProfilingConfig, probes: Probes | None = None, deep: bool = False
    ):
        self.name = str(name)
        self.deep_requested, self.deep = bool(deep), None  # torch.profiler (monitors/deep_profile)
        self.config = config
        self.tags = {**config.tags, **(tags or {})}
        self.distributed = distributed_info()
        self.run_id = make_run_id(self.name, self.distributed["rank"])
        self._probes = probes
        self._lock = threading.Lock()
        self._local = threading.local()
        self._stacks: list[list[_OpenStage]] = []
        self._ids = itertools.count(1)
        self._limit = config.max_data_points
        self.rows: list[NodeProfile] = []
        # Time-only stages (no memory figure configured) keep a tuple per call in a list allocated
        # once; rows are built from them when the session finishes, off the decorated calls' path.
        self._timed_only = not measures_memory(config)
        self._timed: list[tuple | None] = [None] * self._limit if self._timed_only else []
        self._n_timed = 0
        self._timed_phases: dict[str, list] = {}
        self._perf_origin = time.perf_counter()
        self.stage_threads: dict[str, str] = {}
        self.phases = PhaseAccumulator()
        self.diffusion_steps: list[dict] = []
        self.blocks: list[dict] = []
        self.events: list[dict] = []
        self.totals = {"n_steps": 0, "steps_s": 0.0, "n_blocks": 0, "blocks_s": 0.0, "n_frames": 0}
        self.monitor_errors: list[str] = []
        self.samples: dict[str, deque] = {"t_s": deque(maxlen=self._limit)}
        self._last_sampled = {"gpu": None, "cpu": None}
        self._last_display = 0.0
        self.current_stage: str | None = None
        self.failed_stage: tuple[str, str] | None = None  # (row id, stage) where an exception began
        self.thread_name = threading.current_thread().name
        self.span: Span | None = None
        self.sampler: Sampler | None = None
        self.started_unix_s = time.time()
        self._started_monotonic = time.monotonic()
        self.report = None
        self.paths: dict[str, str] = {}

    @property
    def probes(self) -> Probes:
        return self._probes if self._probes is not None else get_probes()

    def note(self, message: str) -> None:
        log.warning("pipeline monitor: %s", message)
        with self._lock:
            if message not in self.monitor_errors and len(self.monitor_errors) < MAX_MONITOR_ERRORS:
                self.monitor_errors.append(message)

    def offset_s(self) -> float:
        return time.monotonic() - self._started_monotonic

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> ProfileSession:
        try:
            self.span = Span(f"session {self.name}", probes=self._probes, detail=DETAIL_FULL).start()
            self.started_unix_s = self.span._start_unix
            self._perf_origin = time.perf_counter()
        except Exception as exc:
            self.note(f"session span failed to start: {type(exc).__name__}: {exc}")
        try:
            gpu = self.probes.gpu_count() > 0
            s = self.config.sampling
            interval = min(s.gpu_interval_s, s.cpu_interval_s) if gpu else s.cpu_interval_s
            self.sampler = Sampler(interval_s=interval, max_points=self._limit, probes=self._probes)
            self.sampler.add_sink(self._on_sample)
        except Exception as exc:
            self.note(f"sampler failed to start: {type(exc).__name__}: {exc}")
        if self.deep_requested:
            self.deep = deep_session.start(self)
        return self

    def finish(self, status: str, error: dict | None = None):
        """Stop measuring, build the report, write the configured files; returns the RunReport."""
        if self.sampler is not None:
            try:
                self.sampler.stop()
            except Exception as exc:
                self.note(f"sampler failed to stop: {type(exc).__name__}: {exc}")
        with self._lock:
            stacks = list(self._stacks)
        for stack in stacks:
            for record in reversed(list(stack)):  # stages still open (e.g. in a thread still running)
                self.close_stage(record, "interrupted", stack=stack)
        self._build_timed_rows()
        span_result = None
        if self.span is not None:
            try:
                span_result = self.span.stop()
            except Exception as exc:
                self.note(f"session span failed to stop: {type(exc).__name__}: {exc}")
        self.report = build_report(
            self, status, error, span_result, time.monotonic() - self._started_monotonic
        )
        self.report = deep_session.finish(self, self.report)
        self.paths = write_report_files(self, self.report)
        return self.report

    # -- stages -------------------------------------------------------------------------------
    def _stack(self) -> list[_OpenStage]:
        """This thread's open stages, innermost last (stages nest per thread)."""
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
            with self._lock:
                self._stacks.append(stack)
        return stack

    def open_stage(self, stage: str) -> _OpenStage | None:
        stack = self._stack()
        node_id = str(next(self._ids))  # itertools.count: atomic under the GIL, no lock
        if self._timed_only:
            record = _OpenStage(node_id, stage, None, len(stack), threading.current_thread().name)
            stack.append(record)
            self.current_stage = stage
            if self.deep is not None:
                self.deep.node_started(node_id, stage)
            record.started_s = time.perf_counter()  # last: the stage's own time starts here
            return record
        try:
            span = Span(f"stage {stage}", probes=self._probes, detail=DETAIL_LIGHT).start()
        except Exception as exc:
            self.note(f"stage {stage}: span failed to start: {type(exc).__name__}: {exc}")
            return None
        record = _OpenStage(node_id, stage, span, len(stack), threading.current_thread().name)
        stack.append(record)
        self.current_stage = stage
        if self.deep is not None:
            self.deep.node_started(node_id, stage)
        return record

    def close_stage(
        self, record: _OpenStage | None, status: str = "executed", title: str | None = None, stack=None
    ):
        """Close a stage; returns its duration in seconds (None when it could not be measured)."""
        if record is None:
            return None
        if self.deep is not None:
            self.deep.node_finished(record.node_id)
        if record.span is None:
            return self._close_timed_stage(record, status, title, stack)
        stack = self._stack() if stack is None else stack
        if record in stack:
            stack.remove(record)
        elif record.span.result is not None:
            return record.span.result.duration_s  # already closed (by finish)
        self.current_stage = stack[-1].stage if stack else None
        if status == "error" and self.failed_stage is None:
            self.failed_stage = (record.node_id, record.stage)
        try:
            result = record.span.stop()
        except Exception as exc:
            self.note(f"stage {record.stage}: span failed to stop: {type(exc).__name__}: {exc}")
            return None
        row = node_profile_from_span(
            record.node_id,
            record.stage,
            title or record.stage,
            status,
            result,
            self.started_unix_s,
            device_memory_reasons=self.probes.device_memory_unknown_reasons,
        )
        gpu_values = [p.peak_allocated_bytes for p in row.gpu_peaks if p.peak_allocated_bytes is not None]
        self.phases.add(
            record.stage,
            row.duration_s,
            row.peak_rss_bytes,
            row.rss_change_bytes,
            max(gpu_values) if gpu_values else None,
            depth=record.depth,
            error=status != "executed",
            peak_rss_above_start_bytes=row.peak_rss_above_start_bytes,
        )
        with self._lock:
            if len(self.rows) < self._limit:
                self.rows.append(row)
                if record.thread != self.thread_name:
                    self.stage_threads[record.node_id] = record.thread
            elif len(self.rows) == self._limit:
                self._note_once_locked(
                    f"more than {self._limit} stage calls: later rows not kept (phases stay exact)"
                )
        return result.duration_s

    def _close_timed_stage(self, record: _OpenStage, status: str, title: str | None, stack) -> float | None:
        ended = time.perf_counter()
        if record.duration_s is not None:
            return record.duration_s  # already closed (by finish)
        stack = self._stack() if stack is None else stack
        if stack and stack[-1] is record:
            stack.pop()
        elif record in stack:
            stack.remove(record)
        self.current_stage = stack[-1].stage if stack else None
        if status == "error" and self.failed_stage is None:
            self.failed_stage = (record.node_id, record.stage)
        duration = record.duration_s = ended - record.started_s
        with self._lock:
            # [n_calls, n_errors, total_s, min_s, max_s, depth]: merged into phases at finish
            totals = self._timed_phases.get(record.stage)
            if totals is None:
                self._timed_phases[record.stage] = [
                    1,
                    int(status != "executed"),
                    duration,
                    duration,
                    duration,
                    record.depth,
                ]
            else:
                totals[0] += 1
                totals[1] += status != "executed"
                totals[2] += duration
                totals[3] = min(totals[3], duration)
                totals[4] = max(totals[4], duration)
                totals[5] = min(totals[5], record.depth)
            n = self._n_timed
            if n < self._limit:
                self._timed[n] = (record, status, title)
                self._n_timed = n + 1
            elif n == self._limit:
                self._n_timed = n + 1
                self._note_once_locked(
                    f"more than {self._limit} stage calls: later rows not kept (phases stay exact)"
                )
        return duration

    def _build_timed_rows(self) -> None:
        """NodeProfile rows of the time-only stages, built once at the end."""
        with self._lock:
            timed = self._timed[: min(self._n_timed, self._limit)]
            phase_totals, self._timed_phases = self._timed_phases, {}
        for stage, totals in phase_totals.items():
            self.phases.add_timed(stage, *totals)
        rows = []
        for record, status, title in timed:
            rows.append(
                NodeProfile(
                    node_id=record.node_id,
                    class_type=record.stage,
                    title=title or record.stage,
                    status=status,
                    cached=False,
                    start_offset_s=record.started_s - self._perf_origin,
                    duration_s=record.duration_s,
                )
            )
        with self._lock:
            self.rows.extend(rows)
            for record, _status, _title in timed:
                if record.thread != self.thread_name:
                    self.stage_threads[record.node_id] = record.thread

    def _note_once_locked(self, message: str) -> None:
        if message not in self.monitor_errors and len(self.monitor_errors) < MAX_MONITOR_ERRORS:
            self.monitor_errors.append(message)
            log.warning("pipeline monitor: %s", message)

    # -- steps, blocks, events ----------------------------------------------------------------
    def add_diffusion_step(self, duration_s: float | None, info: dict) -> None:
        with self._lock:
            self.totals["n_steps"] += 1
            self.totals["steps_s"] += duration_s or 0.0
            if len(self.diffusion_steps) < self._limit:
                self.diffusion_steps.append({"n": self.totals["n_steps"], "duration_s": duration_s, **info})

    def add_block(self, duration_s: float | None, info: dict) -> None:
        frames = info.get("n_frames")
        with self._lock:
            self.totals["n_blocks"] += 1
            self.totals["blocks_s"] += duration_s or 0.0
            if isinstance(frames, (int, float)) and not isinstance(frames, bool):
                self.totals["n_frames"] += frames
            if len(self.blocks) < self._limit:
                self.blocks.append({"n": self.totals["n_blocks"], "duration_s": duration_s, **info})

    def add_event(self, name: str, data) -> None:
        event = {"name": name, "t_s": self.offset_s(), "thread": threading.current_thread().name}
        event["data"] = to_jsonable(data)
        with self._lock:
            if len(self.events) < min(self._limit, MAX_EVENTS):
                self.events.append(event)

    # -- samples ------------------------------------------------------------------------------
    def _due(self, kind: str, t: float, interval: float) -> bool:
        last = self._last_sampled[kind]
        if last is None or t - last >= interval * 0.95:
            self._last_sampled[kind] = t
            return True
        return False

    def _on_sample(self, snapshot) -> None:
        """Sampler sink: keep the configured metrics, each at its own interval; live lines."""
        m, s = self.config.metrics, self.config.sampling
        t = snapshot.unix_time_s - self.started_unix_s
        row = {}
        if self._due("cpu", t, s.cpu_interval_s):
            if m.system_memory:
                row.update(
                    process_rss_bytes=snapshot.process_rss_bytes, ram_used_bytes=snapshot.ram_used_bytes
                )
            if m.cpu:
                row["cpu_pct"] = snapshot.cpu_pct
        if snapshot.gpus and self._due("gpu", t, s.gpu_interval_s):
            wanted = {
                "allocated_bytes": m.gpu_memory,
                "reserved_bytes": m.gpu_memory,
                "nvml_used_bytes": m.gpu_memory,
                "utilization_pct": m.gpu_utilization,
                "temperature_c": m.gpu_temperature,
                "power_w": m.gpu_power,
            }
            for gpu in snapshot.gpus:
                for name, on in wanted.items():
                    if on:
                        row[f"{gpu.device}.{name}"] = getattr(gpu, name)
        if row:
            with self._lock:
                n = len(self.samples["t_s"])
                self.samples["t_s"].append(t)
                for name, value in row.items():
                    if name not in self.samples:
                        self.samples[name] = deque([None] * n, maxlen=self._limit)
                    self.samples[name].append(value)
                for column in self.samples.values():
                    if len(column) < len(self.samples["t_s"]):
                        column.append(None)
        if self.config.display.realtime and t - self._last_display >= self.config.display.interval_s:
            self._last_display = t
            log.info("%s", display_line(self.name, t, self.current_stage, snapshot))

    def host_name(self) -> str:
        return socket.gethostname()

"""Per-prompt run records: a span around the prompt, one around each node, monitor steps.

Framework-neutral: the ComfyUI adapter (nodes/profile_hook.py) calls begin_run, node_started,
node_finished and end_run; monitor nodes call add_step (replace_step: step_updates.py). Nothing
here raises into the caller's work: a failure is recorded on the run and logged."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping

from ..node_fields import GPU_TIME_NO_CUDA, NodeProfile
from ..probes import DETAIL_FULL, DETAIL_LIGHT, Probes, get_probes
from ..report import RunReport, StepReport
from .deferred_steps import store_run
from .gpu_busy import LOOKBACK_S, NOT_YET_REASON, SampleLog
from .input_changes import InputHistory, snapshot
from .model_residency import ResidencyHistory, with_node_figures
from .node_rows import node_profile_from_span
from .prompt_info import node_info_from_prompt
from .residency_findings import residency_of_run
from .residency_recording import ResidencyRecording
from .run_reads import RunReads
from .run_record import RunRecord, resolve_gpu_times
from .span import Span
from .step_updates import StepUpdates
from .store import RunStore
from .subgraphs import subgraph_rollups
from .upstream_memory import UpstreamWalk, watch_plan, watched_nodes

log = logging.getLogger(__name__)

MAX_NODES_PER_RUN = 5000
MAX_STEPS_PER_RUN = 500
MAX_MONITOR_ERRORS = 50
MAX_REMEMBERED_STEPS = 200  # steps kept to show again when their monitor node is cached


class RunRecorder(ResidencyRecording, StepUpdates, RunReads):
    def __init__(self, store: RunStore, probes: Probes | None = None, profile_enabled: bool = True):
        self.store = store
        self._probes = probes
        self.profile_enabled = profile_enabled
        self._run: RunRecord | None = None
        self._lock = threading.RLock()
        self._last_steps: OrderedDict[tuple, StepReport] = OrderedDict()
        # on disk beside the reports, so the first run after a restart still shows its changes
        self._input_history = InputHistory(files=store.input_files() if hasattr(store, "input_files") else None)
        self.system_info: dict | None = None
        # set by the framework adapter's start-up self-check; copied into every report
        self.missing_seams: tuple[str, ...] = ()
        self._residency_history = ResidencyHistory()  # loads and unloads across prompts

    @property
    def probes(self) -> Probes:
        return self._probes if self._probes is not None else get_probes()

    @property
    def active_prompt_id(self) -> str | None:
        with self._lock:
            return None if self._run is None else self._run.prompt_id

    def _note(self, run: RunRecord | None, message: str) -> None:
        log.warning("pipeline monitor: %s", message)
        if run is not None and len(run.monitor_errors) < MAX_MONITOR_ERRORS:
            run.monitor_errors.append(message)

    # -- runs ---------------------------------------------------------------------------------
    def begin_run(
        self,
        prompt_id: str,
        prompt: Mapping | None = None,
        node_lookup=None,
        upstream_walks: Mapping[str, UpstreamWalk] | None = None,
    ) -> None:
        """Open a run. `node_lookup(node_id)` -> (class_type, title) names nodes not in `prompt` (nodes
        a node expanded into; dropped at end_run). `upstream_walks` (monitor class_type -> its stage's
        graph walk) names the monitors whose upstream nodes get a full-detail span (upstream_memory.py)."""
        with self._lock:
            if self._run is not None:
                self.end_run("interrupted", reason="a new prompt started before this one finished")
            self._run = RunRecord(
                prompt_id=str(prompt_id),
                started_unix_s=time.time(),
                started_monotonic_s=time.monotonic(),
                node_info=node_info_from_prompt(prompt),
                node_lookup=node_lookup,
                span=None,
                profile_enabled=self.profile_enabled,
            )
            try:
                self._run.inputs = snapshot(prompt)
            except Exception as exc:
                self._note(self._run, f"prompt inputs not recorded: {type(exc).__name__}: {exc}")
            if upstream_walks and self.profile_enabled:
                try:
                    self._run.upstream_plan = watch_plan(prompt, upstream_walks)
                    self._run.watched = watched_nodes(self._run.upstream_plan)
                except Exception as exc:
                    reason = f"upstream nodes of monitors not found: {type(exc).__name__}: {exc}"
                    self._note(self._run, reason)
            try:
                self._run.span = Span(f"prompt {prompt_id}", probes=self._probes, detail=DETAIL_FULL).start()
            except Exception as exc:
                self._note(self._run, f"prompt span failed to start: {type(exc).__name__}: {exc}")

    @staticmethod
    def _node_info(run: RunRecord, node_id: str) -> tuple[str | None, str | None]:
        info = run.node_info.get(node_id)
        if info is None and run.node_lookup is not None:
            try:
                info = run.node_lookup(node_id)
            except Exception as exc:
                info = None
                RunRecorder._note_once(
                    run, f"node {node_id}: class and title unknown: {type(exc).__name__}: {exc}"
                )
            info = info or (None, None)
            if len(run.node_info) < MAX_NODES_PER_RUN:
                run.node_info[node_id] = info
        return info or (None, None)

    def end_run(
        self,
        status: str,
        error: Mapping | None = None,
        reason: str | None = None,
        cached_node_ids=(),
        workflow: Mapping | None = None,
        workflow_graph: Mapping | None = None,
    ) -> RunReport | None:
        """Close the run; `cached_node_ids` adds cached rows for nodes the handler never saw; `workflow`
        ({name, id, ...}, workflow_from_extra_data) names what was queued; `workflow_graph` (the UI
        workflow, read here and not kept) its subgraphs. Steps pending after it: deferred_steps.py."""
        with self._lock:
            run, self._run = self._run, None
        if run is None:
            return None
        if reason:
            run.monitor_errors.append(reason)
        if run.profile_enabled:
            seen = {profile.node_id for profile in run.nodes} | set(run.open_nodes)
            for node_id in cached_node_ids:
                if str(node_id) not in seen:
                    self._append_node(run, self._profile(run, str(node_id), "cached", None))
                    self._repeat_cached_step(run, str(node_id))
        open_status = "interrupted" if status == "interrupted" else "error"
        for node_id in list(run.open_nodes):
            self._close_node(run, node_id, open_status)
        resolve_gpu_times(run, self.probes)
        run.nodes = with_node_figures(run.nodes, run.residency.events)
        span_dict = None
        if run.span is not None:
            try:
                span_dict = run.span.stop().to_dict()
            except Exception as exc:
                self._note(run, f"prompt span failed to stop: {type(exc).__name__}: {exc}")
        if self.system_info is None:
            try:
                self.system_info = self.probes.system_info()
            except Exception as exc:
                self._note(run, f"system info unavailable: {type(exc).__name__}: {exc}")
        for what, why in self.probes.failures().items():
            self._note_once(run, f"reading {what} unavailable: {why}")
        finished = time.time()
        duration_s = time.monotonic() - run.started_monotonic_s
        input_changes = self._input_changes(run, workflow)
        try:
            subgraphs = subgraph_rollups(run.nodes, workflow_graph)
        except Exception as exc:
            subgraphs = ()
            self._note(run, f"subgraphs not rolled up: {type(exc).__name__}: {exc}")
        report = RunReport(
            prompt_id=run.prompt_id,
            status=status,
            started_unix_s=run.started_unix_s,
            finished_unix_s=finished,
            duration_s=duration_s,
            nodes=tuple(run.nodes),
            steps=tuple(run.steps),
            span=span_dict,
            system=self.system_info or {},
            error=dict(error) if error else None,
            monitor_errors=tuple(run.monitor_errors),
            profile_enabled=run.profile_enabled,
            workflow=dict(workflow) if workflow else None,
            input_changes=input_changes,
            missing_seams=tuple(self.missing_seams),
            subgraphs=subgraphs,
            model_residency=residency_of_run(run, duration_s),
        )
        try:
            report = store_run(report, self.store)
        except Exception as exc:
            log.warning("pipeline monitor: storing report %s failed: %s", run.prompt_id, exc)
        return report

    def _input_changes(self, run: RunRecord, workflow: Mapping | None) -> dict | None:
        name = workflow.get("name") if isinstance(workflow, Mapping) else None
        try:
            earlier = self.store.latest_run_of_workflow(name, other_than=run.prompt_id) if name else None
            with self._lock:
                return self._input_history.compare(name, run.prompt_id, run.inputs, earlier)
        except Exception as exc:
            self._note(run, f"changed inputs not compared: {type(exc).__name__}: {exc}")
            return None

    @staticmethod
    def _note_once(run: RunRecord, message: str) -> None:
        if message not in run.monitor_errors and len(run.monitor_errors) < MAX_MONITOR_ERRORS:
            run.monitor_errors.append(message)

    # -- nodes --------------------------------------------------------------------------------
    def node_started(self, node_id: str) -> None:
        with self._lock:
            run = self._run
            if run is None or not run.profile_enabled:
                return
            if str(node_id) in run.open_nodes:
                # A lazy node that asked for more inputs starts again later without a finish in
                # between: its first span stays open, so its row covers all its attempts.
                return
            try:
                detail = DETAIL_FULL if str(node_id) in run.watched else DETAIL_LIGHT
                span = Span(f"node {node_id}", probes=self._probes, detail=detail, chained=True)
                run.open_nodes[str(node_id)] = span.start()
            except Exception as exc:
                self._note(run, f"node {node_id}: span failed to start: {type(exc).__name__}: {exc}")
            # after the span's own reads, so the node's GPU time starts where its work does
            mark = self.probes.gpu_mark()
            if mark is not None:
                run.gpu_marks[str(node_id)] = mark

    def node_finished(self, node_id: str) -> None:
        """A finish without a start is a cached node."""
        with self._lock:
            run = self._run
            if run is None or not run.profile_enabled:
                return
            node_id = str(node_id)
            if node_id in run.open_nodes:
                self._close_node(run, node_id, "executed")
            else:
                self._append_node(run, self._profile(run, node_id, "cached", None))
                self._repeat_cached_step(run, node_id)

    def _close_node(self, run: RunRecord, node_id: str, status: str) -> None:
        end_mark = self.probes.gpu_mark()  # before the span's reads, as the start mark is after them
        start_mark = run.gpu_marks.pop(node_id, None)
        span = run.open_nodes.pop(node_id)
        try:
            result = span.stop()
        except Exception as exc:
            self._note(run, f"node {node_id}: span failed to stop: {type(exc).__name__}: {exc}")
            result = None
        if result is not None and node_id in run.watched:
            run.full_results[node_id] = result
        timed = start_mark is not None or end_mark is not None
        profile = self._profile(run, node_id, status, result, NOT_YET_REASON if timed else GPU_TIME_NO_CUDA)
        profile = dataclasses.replace(profile, gpu_busy_unknown_reason=profile.gpu_time_unknown_reason)
        if self._append_node(run, profile) and timed:
            run.gpu_pending.append((len(run.nodes) - 1, start_mark, end_mark))
            run.busy_log = run.busy_log or SampleLog(run.started_unix_s - LOOKBACK_S)
            run.busy_log.collect(self.probes, (end_mark or start_mark)[0])

    def _profile(
        self, run: RunRecord, node_id: str, status: str, result, gpu_time_unknown_reason: str | None = None
    ) -> NodeProfile:
        class_type, title = self._node_info(run, node_id)
        if result is None:
            return NodeProfile(
                node_id=node_id,
                class_type=class_type,
                title=title,
                status=status,
                cached=status == "cached",
                gpu_time_unknown_reason=gpu_time_unknown_reason,
            )
        return node_profile_from_span(
            node_id,
            class_type,
            title,
            status,
            result,
            run.started_unix_s,
            gpu_time_unknown_reason,
            self.probes.device_memory_unknown_reasons,
        )

    def _append_node(self, run: RunRecord, profile: NodeProfile) -> bool:
        if len(run.nodes) < MAX_NODES_PER_RUN:
            run.nodes.append(profile)
            return True
        if len(run.nodes) == MAX_NODES_PER_RUN:
            self._note_once(run, f"more than {MAX_NODES_PER_RUN} nodes: later nodes not profiled")
        return False

    # -- monitor steps ------------------------------------------------------------------------
    def add_step(self, step: StepReport) -> bool:
        """Attach a monitor step to the active run; False when no run is active."""
        with self._lock:
            run = self._run
            if run is None:
                return False
            if len(run.steps) >= MAX_STEPS_PER_RUN:
                self._note_once(run, f"more than {MAX_STEPS_PER_RUN} monitor steps: later steps dropped")
                return False
            run.steps.append(step)
            if step.node_id is not None:
                key = self._step_key(run, str(step.node_id), step.kind)
                self._last_steps.pop(key, None)
                self._last_steps[key] = step
                while len(self._last_steps) > MAX_REMEMBERED_STEPS:
                    self._last_steps.popitem(last=False)
            return True

    def _step_key(self, run: RunRecord, node_id: str, kind: str | None) -> tuple:
        # ComfyUI caches a node's outputs by node id and inputs, so a cached node with the same id
        # and class produced its step in an earlier run.
        return (node_id, self._node_info(run, node_id)[0], kind)

    def _repeat_cached_step(self, run: RunRecord, node_id: str) -> None:
        # A node moved into or out of a subgraph keeps its id after the last ":" ("5" -> "9:5")
        # and ComfyUI's cache entry: without a step of its own id, its latest of each kind is its.
        local = node_id.rpartition(":")[2]
        candidates = [(k, s) for k, s in self._last_steps.items() if k[0].rpartition(":")[2] == local]
        if not candidates:
            return
        class_type = self._node_info(run, node_id)[0]
        same = [(k[0], s) for k, s in candidates if k[1] == class_type]
        steps = [s for step_node_id, s in same if step_node_id == node_id] or list({s.kind: s for _, s in same}.values())
        for step in steps:
            if len(run.steps) < MAX_STEPS_PER_RUN:
                run.steps.append(dataclasses.replace(step, cached=True, node_id=node_id))

    def executing_node(self) -> tuple[str, str | None, str | None] | None:
        """(node id, class_type, title) of the node running now, or None (live view)."""
        with self._lock:
            run = self._run
            if run is None or not run.open_nodes:
                return None
            node_id = next(reversed(run.open_nodes))
            return (node_id, *self._node_info(run, node_id))

    def record_monitor_error(self, message: str) -> None:
        with self._lock:
            self._note(self._run, message)

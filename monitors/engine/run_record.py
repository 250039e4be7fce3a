"""The record of one prompt's run while it runs (RunRecorder's state), and the GPU figures of its
node rows resolved at its end (read once, so that no node waits for the GPU)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from ..node_fields import NodeProfile
from ..report import StepReport
from .gpu_busy import SampleLog, resolve_busy
from .model_residency import ResidencyLog
from .span import Span


@dataclass
class RunRecord:
    """What the recorder keeps of the prompt that runs, until its report is made."""

    prompt_id: str
    started_unix_s: float
    started_monotonic_s: float
    node_info: dict[str, tuple[str | None, str | None]]  # node_id -> (class_type, title)
    span: Span | None
    node_lookup: Callable[[str], tuple[str | None, str | None] | None] | None = None
    open_nodes: dict[str, Span] = field(default_factory=dict)
    nodes: list[NodeProfile] = field(default_factory=list)
    steps: list[StepReport] = field(default_factory=list)
    monitor_errors: list[str] = field(default_factory=list)
    profile_enabled: bool = True
    gpu_marks: dict[str, tuple] = field(default_factory=dict)  # node_id -> its start event
    # (row index, start event, end event): elapsed times are read once, at the prompt's end, so
    # no node waits for the GPU
    gpu_pending: list[tuple] = field(default_factory=list)
    busy_log: SampleLog | None = None  # NVML utilization samples for the nodes' busy time (gpu_busy.py)
    # monitor node id -> the upstream nodes its step describes (see monitors/engine/upstream_memory.py);
    # only those nodes get a full-detail span, kept in `full_results` for the monitor's picture
    upstream_plan: dict[str, tuple[str, ...]] = field(default_factory=dict)
    watched: frozenset = frozenset()
    full_results: dict = field(default_factory=dict)
    # literal widget inputs at the start, compared at the end with the workflow's last run
    inputs: dict | None = None
    # loads, unloads and LoRA patches of model weights (monitors/engine/model_residency.py), and the
    # models resident as the prompt ended (None: not told)
    residency: ResidencyLog = field(default_factory=ResidencyLog)
    resident_at_end: list | None = None


def resolve_gpu_times(run: RunRecord, probes) -> None:
    """At the prompt's end: each timed node row gets its GPU stream time from its CUDA events and
    its busy time from NVML's samples, or the reason it has none."""
    for index, start, end in run.gpu_pending:
        elapsed, reason = None, None
        if start is None:
            reason = "CUDA was initialised while this node ran: no event at its start"
        elif end is None or start[0] != end[0]:
            reason = "the current CUDA device changed while this node ran"
        else:
            elapsed = probes.gpu_elapsed_s(start, end)
            if elapsed is None:
                reason = "reading the CUDA events failed (see the probe failures)"
        run.nodes[index] = dataclasses.replace(
            run.nodes[index], gpu_time_s=elapsed, gpu_time_unknown_reason=reason
        )
    resolve_busy(run.nodes, run.gpu_pending, run.busy_log, probes, run.started_unix_s)
    run.gpu_pending.clear()

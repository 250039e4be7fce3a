"""The `deep_profile` step's declaration (see monitors/vocabulary/registry.py): its summary record
(monitors/deep_profile/session.py constructs it), and the fields of each row of `details.nodes` and
of each row's `top_ops` (documented in the metrics reference, labelled in the panel and the HTML
report from here)."""

from __future__ import annotations

from dataclasses import dataclass

from ..summary_fields import StepRecord, SummaryField, figure

_NO_CUDA = "null without CUDA"


@dataclass(frozen=True, kw_only=True)
class DeepProfileSummary(StepRecord):
    """The `deep_profile` step's summary."""

    slowest_node: str | None = figure(
        "slowest node",
        None,
        "the profiled node with the longest wall time",
        headline=True,
    )
    prompt_wall_s: float | None = figure(
        "prompt wall time",
        "s",
        (
            "wall time of the prompt under the profiler: from its start to the end of the"
            " deep profile's own work (stopping the profiler, reading its events, writing"
            " the ops file)"
        ),
        headline=True,
    )
    overhead_ratio: float | None = figure(
        "profiler overhead",
        "ratio",
        (
            "this prompt's wall time over the wall time of the same workflow's last plain"
            " (not deep-profiled) successful run; null without one. A first run that "
            "loaded the models is no fair baseline"
        ),
        headline=True,
    )
    baseline_wall_s: float | None = figure(
        "plain run wall time",
        "s",
        (
            "wall time of the workflow's last plain run (details.baseline_prompt_id)"
        ),
    )
    host_op_time_s: float | None = figure(
        "host op time",
        "s",
        (
            "time in the torch operations the nodes called on the host, summed over the "
            "nodes"
        ),
        headline=True,
    )
    device_time_s: float | None = figure(
        "device time",
        "s",
        (
            "time the nodes' CUDA kernels ran on the device, summed over the nodes; null "
            "without CUDA"
        ),
        headline=True,
    )
    gpu_busy_pct: float | None = figure(
        "GPU busy",
        "pct",
        (
            "share of the nodes' wall time during which one of their kernels ran; null "
            "without CUDA"
        ),
        headline=True,
    )
    n_syncs: int | None = figure(
        "host-device syncs",
        "count",
        (
            "CUDA synchronisations the host waited for (device, stream and event "
            "synchronise, blocking copies), summed over the nodes; null without CUDA"
        ),
    )
    n_nodes_profiled: int | None = figure("nodes profiled", "count", "executed nodes the profiler saw")
    nodes_wall_s: float | None = figure("nodes wall time", "s", "wall time inside the nodes' ranges, summed")
    n_trace_events: int | None = figure(
        "trace events",
        "count",
        "ops and kernels kept for the Perfetto trace",
    )
    n_trace_events_dropped: int | None = figure(
        "trace events dropped",
        "count",
        (
            "ops and kernels left out of the trace by its size cap (the shortest first)"
        ),
    )


DEEP_PROFILE = DeepProfileSummary.vocabulary("deep_profile", "Deep profile")

# One row of `details.nodes`: per executed node.
NODE_FIELDS = (
    SummaryField("node_id", "node", None, "the node's id in the prompt", "string", nullable=False),
    SummaryField("class_type", "class", None, "the node's class", "string"),
    SummaryField(
        "wall_s",
        "wall time",
        "s",
        "wall time of the node's record_function range(s)",
        "number",
        nullable=False,
    ),
    SummaryField(
        "host_op_time_s",
        "host op time",
        "s",
        "time in the torch operations the node called directly (their children included)",
        "number",
        nullable=False,
    ),
    SummaryField(
        "device_time_s",
        "device time",
        "s",
        f"time the kernels the node launched ran on the device; {_NO_CUDA} (device_time_unknown_reason)",
        "number",
    ),
    SummaryField(
        "gpu_busy_pct",
        "GPU busy",
        "pct",
        f"share of the node's wall time during which one of its kernels ran; {_NO_CUDA}",
        "number",
    ),
    SummaryField(
        "n_syncs",
        "host-device syncs",
        "count",
        f"CUDA synchronisations under the node; {_NO_CUDA} (n_syncs_unknown_reason)",
        "integer",
    ),
    SummaryField(
        "n_ops", "ops", "count", "torch operations the node called directly", "integer", nullable=False
    ),
    SummaryField(
        "top_ops_by",
        "top ops by",
        None,
        "what ranks top_ops: device time with CUDA, host time without",
        "string",
        nullable=False,
    ),
)

# One entry of a node row's `top_ops` (at most 5).
TOP_OP_FIELDS = (
    SummaryField(
        "name", "operation", None, "the torch operation (e.g. aten::conv2d)", "string", nullable=False
    ),
    SummaryField(
        "n_calls", "calls", "count", "calls of it directly under the node", "integer", nullable=False
    ),
    SummaryField(
        "total_s",
        "total",
        "s",
        "its device time with CUDA, else its host time (children included)",
        "number",
        nullable=False,
    ),
    SummaryField("share_pct", "share", "pct", "its share of the node's device (or host op) time", "number"),
)

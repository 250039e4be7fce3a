"""The `deep_profile` step's details: the one declaration of their keys (see
monitors/detail_fields.py). A node row's figures are NODE_FIELDS (monitors/deep_profile/summary.py)."""

from __future__ import annotations

from ..detail_fields import DetailGroup, details_of
from ..summary_fields import SummaryField as F
from .summary import NODE_FIELDS

DEEP_PROFILE_DETAILS = details_of(
    "deep_profile",
    (
        F("activities", "activities", None, "what the profiler recorded: cpu, and cuda with CUDA", "array"),
        DetailGroup(
            "nodes",
            "nodes",
            "per executed node, what torch.profiler saw",
            NODE_FIELDS,
            repeated="list",
            nullable=False,
            open=True,
        ),
        F(
            "baseline_prompt_id",
            "baseline run",
            None,
            "the workflow's last plain run, for the overhead",
            "string",
        ),
        DetailGroup(
            "trace",
            "trace",
            "the ops kept for the Perfetto trace",
            (
                F("file", "trace file", None, "the ops file's name; null when none was written", "string"),
                F("n_host_events", "host events", "count", "ops kept", "integer"),
                F("n_device_events", "device events", "count", "kernels kept", "integer"),
                F("n_dropped", "events dropped", "count", "ops and kernels left out (the cap)", "integer"),
                F("max_events", "events cap", None, "the most ops and kernels kept (a count)", "integer"),
            ),
            nullable=False,
        ),
        F("unknown_reasons", "unknown reasons", None, "figure -> why it is unknown", "object"),
        F("profiler_start_s", "profiler start", "s", "seconds the profiler took to start", "number"),
        F("analysis_s", "analysis time", "s", "seconds the events took to read", "number"),
    ),
    "what torch.profiler saw per node, the trace kept and why any figure is unknown",
)

"""The `profiling` step's details: the one declaration of their keys (see monitors/detail_fields.py).
Their rows are the profiling API's (monitors/profiling/), described in docs/profiling.md."""

from __future__ import annotations

from ..detail_fields import details_of
from ..summary_fields import SummaryField as F

PROFILING_DETAILS = details_of(
    "profiling",
    (
        F("tags", "tags", None, "the session's tags", "object"),
        F("phases", "phases", None, "per stage: calls, time and depth", "array"),
        F("diffusion_steps", "diffusion steps", None, "each diffusion step recorded", "array"),
        F("blocks", "blocks", None, "each block recorded", "array"),
        F("models", "models", None, "the models the session saw initialised", "array"),
        F("events", "events", None, "the session's events", "array"),
        F("samples", "samples", None, "name -> the samples taken during the run", "object"),
        F("stage_threads", "stage threads", None, "stage -> the thread it ran on", "object"),
        F(
            "gpu_utilization_before_pct",
            "GPU utilization before",
            "pct",
            "each GPU's utilization before the run (%)",
            "array",
        ),
        F(
            "gpu_utilization_after_pct",
            "GPU utilization after",
            "pct",
            "each GPU's utilization after the run (%)",
            "array",
        ),
        F("config", "config", None, "the session's configuration", "object"),
        F(
            "memory",
            "memory",
            None,
            "the memory picture over the run (monitors.span.memory_picture); null without a span",
            "object",
        ),
    ),
    "what the profiling session recorded: its phases, steps, blocks, models, events and samples",
)

"""The `profiling` step's summary fields: the one declaration (see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from ..summary_fields import StepKindVocabulary, SummaryField

PROFILING = StepKindVocabulary(
    kind="profiling",
    title="Profiling",
    fields=(
        SummaryField("session", "session", None, "the profile session's name", "string", headline=True),
        SummaryField(
            "slowest_stage",
            "slowest stage",
            None,
            "the top-level stage that took longest",
            "string",
            headline=True,
        ),
        SummaryField(
            "n_steps", "denoising steps", "count", "denoising steps recorded", "integer", headline=True
        ),
        SummaryField(
            "steps_total_s", "time in steps", "s", "time inside denoising steps", "number", headline=True
        ),
        SummaryField(
            "steps_per_s", "steps per second", "per_s", "denoising steps per second", "number", headline=True
        ),
        SummaryField(
            "frames_per_s",
            "frames per second",
            "per_s",
            "frames decoded per second of block time",
            "number",
            headline=True,
        ),
        SummaryField(
            "peak_rss_bytes",
            "peak RSS",
            "bytes",
            "peak resident memory of the session",
            "integer",
            headline=True,
        ),
        SummaryField(
            "peak_gpu_allocated_bytes",
            "peak GPU allocated",
            "bytes",
            "peak torch-allocated GPU memory",
            "integer",
            headline=True,
        ),
        SummaryField("device_name", "device", None, "GPU names, or the CPU", "string", headline=True),
        SummaryField("rank", "rank", None, "rank of a distributed job", "integer"),
        SummaryField("world_size", "world size", None, "ranks of a distributed job", "integer"),
        SummaryField("n_stage_calls", "stage calls", "count", "calls of profiled stages", "integer"),
        SummaryField("n_stages", "stages", "count", "distinct stages", "integer"),
        SummaryField("n_blocks", "blocks", "count", "decode blocks recorded", "integer"),
        SummaryField("blocks_per_s", "blocks per second", "per_s", "decode blocks per second", "number"),
        SummaryField("n_frames", "frames", "count", "frames decoded", "integer"),
        SummaryField("n_events", "events", "count", "events recorded", "integer"),
        SummaryField("n_models", "models", "count", "models tracked", "integer"),
        SummaryField(
            "model_init_s", "model init time", "s", "time to initialise the tracked models", "number"
        ),
        SummaryField(
            "n_model_parameters", "model parameters", "count", "parameters of the tracked models", "integer"
        ),
        SummaryField(
            "model_parameter_bytes",
            "model parameter size",
            "bytes",
            "bytes of the tracked models' parameters",
            "integer",
        ),
    ),
)

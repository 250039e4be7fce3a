"""The `profiling` step's summary: the record monitors/pipeline_profiler/report.py constructs, and its
vocabulary (see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..summary_fields import StepRecord, figure


@dataclass(frozen=True, kw_only=True)
class ProfilingSummary(StepRecord):
    """The `profiling` step's summary."""

    session: str | None = figure("session", None, "the profile session's name", headline=True)
    slowest_stage: str | None = figure(
        "slowest stage",
        None,
        "the top-level stage that took longest",
        headline=True,
    )
    n_steps: int | None = figure("denoising steps", "count", "denoising steps recorded", headline=True)
    steps_total_s: float | None = figure("time in steps", "s", "time inside denoising steps", headline=True)
    steps_per_s: float | None = figure(
        "steps per second",
        "per_s",
        "denoising steps per second",
        headline=True,
    )
    frames_per_s: float | None = figure(
        "frames per second",
        "per_s",
        "frames decoded per second of block time",
        headline=True,
    )
    peak_rss_bytes: int | None = figure(
        "peak RSS",
        "bytes",
        "peak resident memory of the session",
        headline=True,
    )
    peak_gpu_allocated_bytes: int | None = figure(
        "peak GPU allocated",
        "bytes",
        "peak torch-allocated GPU memory",
        headline=True,
    )
    device_name: str | None = figure("device", None, "GPU names, or the CPU", headline=True)
    rank: int | None = figure("rank", None, "rank of a distributed job")
    world_size: int | None = figure("world size", None, "ranks of a distributed job")
    n_stage_calls: int | None = figure("stage calls", "count", "calls of profiled stages")
    n_stages: int | None = figure("stages", "count", "distinct stages")
    n_blocks: int | None = figure("blocks", "count", "decode blocks recorded")
    blocks_per_s: float | None = figure("blocks per second", "per_s", "decode blocks per second")
    n_frames: int | None = figure("frames", "count", "frames decoded")
    n_events: int | None = figure("events", "count", "events recorded")
    n_models: int | None = figure("models", "count", "models tracked")
    model_init_s: float | None = figure("model init time", "s", "time to initialise the tracked models")
    n_model_parameters: int | None = figure("model parameters", "count", "parameters of the tracked models")
    model_parameter_bytes: int | None = figure(
        "model parameter size",
        "bytes",
        "bytes of the tracked models' parameters",
    )


PROFILING = ProfilingSummary.vocabulary("profiling", "Profiling")

"""docs/metrics-reference.md's hand-written rows of profiling sessions and of the usage statistics
(`get_usage_statistics()`, not a run report)."""

from __future__ import annotations

from .reference_figure import Figure, picture_figures

F = Figure
SESSION_AND_USAGE_FIGURES: tuple[Figure, ...] = (
    # -- profiling sessions --------------------------------------------------------------------------
    F(
        "GPU utilisation before",
        "USE",
        "steps[kind=profiling].details.gpu_utilization_before_pct",
        "pct",
        "NVML",
        True,
    ),
    F(
        "GPU utilisation after",
        "USE",
        "steps[kind=profiling].details.gpu_utilization_after_pct",
        "pct",
        "NVML",
        True,
    ),
    *picture_figures("profiling", "PROF", "session "),
    # -- usage statistics (get_usage_statistics(), not a run report) -----------------------------------
    F("initialisation time", "USE", "usage.model_init_s", "s", "profile_model_parameters, summed"),
    F("generations", "USE", "usage.n_generations", "count", "profile_session calls"),
    F("total inference time", "USE", "usage.total_generation_s", "s", "sum of session times"),
    F("mean inference time", "USE", "usage.mean_generation_s", "s", "total / generations"),
    F("peak memory (RSS)", "USE", "usage.peak_rss_bytes", "bytes", "highest session peak"),
    F("peak GPU allocated", "USE", "usage.peak_gpu_allocated_bytes", "bytes", "highest session peak", True),
    F(
        "current GPU allocated",
        "USE",
        "usage.current_gpu_allocated_bytes",
        "bytes",
        "torch, summed over GPUs",
        True,
    ),
    F(
        "current GPU reserved",
        "USE",
        "usage.current_gpu_reserved_bytes",
        "bytes",
        "torch, summed over GPUs",
        True,
    ),
    F(
        "current GPU allocated per GPU",
        "USE",
        "usage.current_gpu_memory[].allocated_bytes",
        "bytes",
        "torch",
        True,
    ),
    F("current process RSS", "USE", "usage.current_process_rss_bytes", "bytes", "/proc RSS now"),
    F("device name", "USE", "usage.device_name", None, "NVML or torch"),
    F("generation time", "USE", "usage.generations[].duration_s", "s", "one session"),
    F(
        "GPU utilisation before inference",
        "USE",
        "usage.generations[].gpu_utilization_before_pct",
        "pct",
        "NVML",
        True,
    ),
    F(
        "GPU utilisation after inference",
        "USE",
        "usage.generations[].gpu_utilization_after_pct",
        "pct",
        "NVML",
        True,
    ),
)

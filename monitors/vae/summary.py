"""The `vae_encode` step's summary: the record monitors/vae/report.py constructs, and its vocabulary
(see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..summary_fields import StepRecord, figure


@dataclass(frozen=True, kw_only=True)
class VaeEncodeSummary(StepRecord):
    """The `vae_encode` step's summary."""

    strategy_used: str | None = figure(
        "strategy used",
        None,
        (
            "direct, tiled, cpu or dummy, or `tiled (ComfyUI retry)` when ComfyUI's own "
            "encode ran out of memory and tiled by itself; null when every strategy "
            "failed"
        ),
        headline=True,
    )
    strategy_requested: str | None = figure(
        "strategy requested",
        None,
        "the node's strategy input",
        headline=True,
    )
    duration_s: float | None = figure("time", "s", "time of the whole chain", headline=True)
    latent_type: str | None = figure(
        "latent type",
        None,
        "image, video or other (from the latent's rank)",
        headline=True,
    )
    latent_shape: list | None = figure("latent shape", None, "shape of the latent", headline=True)
    latent_dtype: str | None = figure("latent dtype", None, "dtype of the latent", headline=True)
    latent_bytes: int | None = figure("latent size", "bytes", "bytes of the latent", headline=True)
    peak_rss_bytes: int | None = figure(
        "peak RSS",
        "bytes",
        "peak RSS during the encode",
        headline=True,
        process_wide=True,
    )
    peak_gpu_allocated_bytes: int | None = figure(
        "peak GPU allocated",
        "bytes",
        "peak GPU allocated during the encode",
        headline=True,
        process_wide=True,
    )
    peak_gpu_reserved_bytes: int | None = figure(
        "peak GPU reserved",
        "bytes",
        "peak GPU reserved during the encode",
        headline=True,
        process_wide=True,
    )
    n_attempts: int | None = figure("attempts", "count", "strategies tried (not skipped)", headline=True)
    n_out_of_memory: int | None = figure(
        "out of memory",
        "count",
        (
            "attempts that ran out of memory, those ComfyUI's encode caught and retried "
            "tiled included"
        ),
        headline=True,
    )
    frames_per_s: float | None = figure(
        "frames per second",
        "per_s",
        "input frames encoded per second",
        headline=True,
    )
    error: str | None = figure("error", None, "why the encode failed, if it did", headline=True)
    dummy_used: bool | None = figure("dummy latent", None, "the output is all zeros (allow_dummy)")
    latent_device: str | None = figure("latent device", None, "device of the latent")
    latent_n_elements: int | None = figure("latent elements", "count", "elements of the latent")
    input_bytes: int | None = figure("input size", "bytes", "bytes of the input pixels")
    input_n_pixels: int | None = figure(
        "input pixels",
        "count",
        "pixels of the input: frames x height x width, without channels",
    )
    input_mib_per_s: float | None = figure(
        "input MiB per second",
        "per_s",
        "input mebibytes (2^20 bytes) encoded per second",
    )
    input_frames: int | None = figure("input frames", None, "frames (batch) of the input pixels")
    latent_frames: int | None = figure("latent frames", None, "frames of a video latent")
    spatial_compression_ratio: float | None = figure(
        "spatial compression",
        "ratio",
        "input H*W per latent H*W",
    )
    temporal_compression_ratio: float | None = figure(
        "temporal compression",
        "ratio",
        "input frames per latent frame",
    )
    direct_needed_bytes: int | None = figure(
        "direct needs",
        "bytes",
        (
            "predicted need of a direct encode: the VAE's own estimate (calibrated when "
            "earlier encodes measured this VAE) plus weights to load"
        ),
    )
    direct_estimate_bytes: int | None = figure(
        "direct estimate",
        "bytes",
        (
            "the VAE's own memory estimate for a direct encode (memory_used_encode), "
            "uncalibrated"
        ),
    )
    direct_calibration_ratio: float | None = figure(
        "direct calibration",
        "ratio",
        (
            "measured / estimated memory applied to the estimate: the largest of earlier "
            "encodes of this VAE in this process (with a safety margin), or that of an "
            "earlier encode as large with no more free memory (without); null: the raw "
            "estimate was used"
        ),
    )
    direct_calibration_source: str | None = figure(
        "direct calibration source",
        None,
        "where the calibration came from, or why the raw estimate was used",
    )
    direct_free_bytes: int | None = figure(
        "memory free for a direct encode",
        "bytes",
        (
            "memory this process could get on the device when direct was predicted: "
            "ComfyUI's free memory (cached blocks included) plus unloadable models less "
            "its reserve, capped by the per-process memory fraction"
        ),
        process_wide=True,
    )
    direct_predicted_to_fit: bool | None = figure(
        "direct predicted to fit",
        None,
        "the estimate said direct fits",
    )
    direct_prediction_held: bool | None = figure(
        "direct prediction held",
        None,
        "the direct attempt did what was predicted",
    )
    used_prediction_held: bool | None = figure(
        "used strategy's prediction held",
        None,
        "the strategy used did what was predicted",
    )
    peak_rss_at_s: float | None = figure("peak RSS at", "s", "when the RSS peak was reached, from the start")
    rss_peak_increase_bytes: int | None = figure(
        "RSS peak increase",
        "bytes",
        "peak RSS minus RSS before the encode",
    )
    rss_change_bytes: int | None = figure("RSS change", "bytes", "RSS after minus before")
    rss_change_pct: float | None = figure("RSS change %", "pct", "RSS change relative to before")
    peak_gpu_allocated_at_s: float | None = figure(
        "peak GPU allocated at",
        "s",
        "when the GPU allocated peak was reached, from the start",
    )
    gpu_allocated_peak_increase_bytes: int | None = figure(
        "GPU allocated peak increase",
        "bytes",
        "peak GPU allocated minus GPU allocated before the encode",
    )
    gpu_allocated_change_bytes: int | None = figure(
        "GPU allocated change",
        "bytes",
        "GPU allocated after minus before",
    )
    gpu_allocated_change_pct: float | None = figure(
        "GPU allocated change %",
        "pct",
        "GPU allocated change relative to before",
    )
    peak_gpu_reserved_at_s: float | None = figure(
        "peak GPU reserved at",
        "s",
        "when the GPU reserved peak was reached, from the start",
    )
    gpu_reserved_peak_increase_bytes: int | None = figure(
        "GPU reserved peak increase",
        "bytes",
        "peak GPU reserved minus GPU reserved before the encode",
    )
    gpu_reserved_change_bytes: int | None = figure(
        "GPU reserved change",
        "bytes",
        "GPU reserved after minus before",
    )
    gpu_reserved_change_pct: float | None = figure(
        "GPU reserved change %",
        "pct",
        "GPU reserved change relative to before",
    )
    gpu_allocated_reserved_ratio: float | None = figure(
        "GPU allocated of reserved",
        "fraction",
        "peak allocated / peak reserved GPU memory",
    )
    free_memory_before_bytes: int | None = figure(
        "free memory before",
        "bytes",
        (
            "memory this process could get before the encode (as direct_free_bytes; "
            "cached blocks count as free, so the encode's own cache growth does not move "
            "it: see gpu_driver_free_*)"
        ),
        process_wide=True,
    )
    free_memory_after_bytes: int | None = figure(
        "free memory after",
        "bytes",
        (
            "memory this process could get after the encode (as free_memory_before_bytes)"
        ),
        process_wide=True,
    )
    free_memory_change_bytes: int | None = figure(
        "free memory change",
        "bytes",
        "free memory after minus before",
        process_wide=True,
    )
    free_memory_manager: str | None = figure(
        "memory manager",
        None,
        (
            "which ComfyUI memory manager the free-memory figures read: dynamic (dynamic "
            "VRAM) or estimate-based; null when no ComfyUI figure was read"
        ),
    )
    gpu_driver_free_before_bytes: int | None = figure(
        "driver free before",
        "bytes",
        (
            "the driver's free device memory (NVML total - used) when the encode started:"
            " what the encode's own reserved memory (and other processes) move"
        ),
        process_wide=True,
    )
    gpu_driver_free_after_bytes: int | None = figure(
        "driver free after",
        "bytes",
        (
            "the driver's free device memory (NVML total - used) when the encode ended"
        ),
        process_wide=True,
    )
    gpu_driver_free_change_bytes: int | None = figure(
        "driver free change",
        "bytes",
        "driver free after minus before: down by what the encode left reserved",
        process_wide=True,
    )
    free_memory_change_pct: float | None = figure(
        "free memory change %",
        "pct",
        "free memory change relative to before",
    )
    cleanup_reclaimed_bytes: int | None = figure(
        "cleanup reclaimed",
        "bytes",
        "memory freed by cleanup after failed attempts",
        process_wide=True,
    )


VAE_ENCODE = VaeEncodeSummary.vocabulary(
    "vae_encode",
    "VAE encode",
    v1_renames={
        "spatial_compression": "spatial_compression_ratio",
        "temporal_compression": "temporal_compression_ratio",
    },
)

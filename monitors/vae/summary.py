"""The `vae_encode` step's summary fields: the one declaration (see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from ..summary_fields import StepKindVocabulary, SummaryField

# memory figures per metric: rss always, the GPU ones when the encode ran on a GPU
MEMORY_METRICS = ("rss", "gpu_allocated", "gpu_reserved")
_MEMORY_LABELS = {"rss": "RSS", "gpu_allocated": "GPU allocated", "gpu_reserved": "GPU reserved"}


def _peak_fields() -> tuple[SummaryField, ...]:
    return tuple(
        SummaryField(
            f"peak_{m}_bytes",
            f"peak {_MEMORY_LABELS[m]}",
            "bytes",
            f"peak {_MEMORY_LABELS[m]} during the encode",
            "integer",
            headline=True,
            process_wide=True,  # the process's absolute peak; the increase is the encode's own
        )
        for m in MEMORY_METRICS
    )


def _memory_fields() -> tuple[SummaryField, ...]:
    out = []
    for metric in MEMORY_METRICS:
        what = _MEMORY_LABELS[metric]
        out += [
            SummaryField(
                f"peak_{metric}_at_s",
                f"peak {what} at",
                "s",
                f"when the {what} peak was reached, from the start",
                "number",
            ),
            SummaryField(
                f"{metric}_peak_increase_bytes",
                f"{what} peak increase",
                "bytes",
                f"peak {what} minus {what} before the encode",
                "integer",
            ),
            SummaryField(
                f"{metric}_change_bytes", f"{what} change", "bytes", f"{what} after minus before", "integer"
            ),
            SummaryField(
                f"{metric}_change_pct",
                f"{what} change %",
                "pct",
                f"{what} change relative to before",
                "number",
            ),
        ]
    return tuple(out)


VAE_ENCODE = StepKindVocabulary(
    kind="vae_encode",
    title="VAE encode",
    fields=(
        SummaryField(
            "strategy_used",
            "strategy used",
            None,
            "direct, tiled, cpu or dummy, or `tiled (ComfyUI retry)` when ComfyUI's own encode ran out "
            "of memory and tiled by itself; null when every strategy failed",
            "string",
            headline=True,
        ),
        SummaryField(
            "strategy_requested",
            "strategy requested",
            None,
            "the node's strategy input",
            "string",
            headline=True,
        ),
        SummaryField("duration_s", "time", "s", "time of the whole chain", "number", headline=True),
        SummaryField(
            "latent_type",
            "latent type",
            None,
            "image, video or other (from the latent's rank)",
            "string",
            headline=True,
        ),
        SummaryField("latent_shape", "latent shape", None, "shape of the latent", "array", headline=True),
        SummaryField("latent_dtype", "latent dtype", None, "dtype of the latent", "string", headline=True),
        SummaryField("latent_bytes", "latent size", "bytes", "bytes of the latent", "integer", headline=True),
        *_peak_fields(),
        SummaryField(
            "n_attempts", "attempts", "count", "strategies tried (not skipped)", "integer", headline=True
        ),
        SummaryField(
            "n_out_of_memory",
            "out of memory",
            "count",
            "attempts that ran out of memory, those ComfyUI's encode caught and retried tiled included",
            "integer",
            headline=True,
        ),
        SummaryField(
            "frames_per_s",
            "frames per second",
            "per_s",
            "input frames encoded per second",
            "number",
            headline=True,
        ),
        SummaryField("error", "error", None, "why the encode failed, if it did", "string", headline=True),
        SummaryField("dummy_used", "dummy latent", None, "the output is all zeros (allow_dummy)", "boolean"),
        SummaryField("latent_device", "latent device", None, "device of the latent", "string"),
        SummaryField("latent_n_elements", "latent elements", "count", "elements of the latent", "integer"),
        SummaryField("input_bytes", "input size", "bytes", "bytes of the input pixels", "integer"),
        SummaryField(
            "input_n_pixels",
            "input pixels",
            "count",
            "pixels of the input: frames x height x width, without channels",
            "integer",
        ),
        SummaryField(
            "input_mib_per_s",
            "input MiB per second",
            "per_s",
            "input mebibytes (2^20 bytes) encoded per second",
            "number",
        ),
        SummaryField(
            "input_frames", "input frames", None, "frames (batch) of the input pixels", "integer"
        ),
        SummaryField("latent_frames", "latent frames", None, "frames of a video latent", "integer"),
        SummaryField(
            "spatial_compression_ratio", "spatial compression", "ratio", "input H*W per latent H*W", "number"
        ),
        SummaryField(
            "temporal_compression_ratio",
            "temporal compression",
            "ratio",
            "input frames per latent frame",
            "number",
        ),
        SummaryField(
            "direct_needed_bytes",
            "direct needs",
            "bytes",
            "predicted need of a direct encode: the VAE's own estimate (calibrated when earlier encodes "
            "measured this VAE) plus weights to load",
            "integer",
        ),
        SummaryField(
            "direct_estimate_bytes",
            "direct estimate",
            "bytes",
            "the VAE's own memory estimate for a direct encode (memory_used_encode), uncalibrated",
            "integer",
        ),
        SummaryField(
            "direct_calibration_ratio",
            "direct calibration",
            "ratio",
            "measured / estimated memory applied to the estimate: the largest of earlier encodes of this "
            "VAE in this process (with a safety margin), or that of an earlier encode as large with no more "
            "free memory (without); null: the raw estimate was used",
            "number",
        ),
        SummaryField(
            "direct_calibration_source",
            "direct calibration source",
            None,
            "where the calibration came from, or why the raw estimate was used",
            "string",
        ),
        SummaryField(
            "direct_free_bytes",
            "memory free for a direct encode",
            "bytes",
            "memory this process could get on the device when direct was predicted: ComfyUI's free "
            "memory (cached blocks included) plus unloadable models less its reserve, capped by the "
            "per-process memory fraction",
            "integer",
            process_wide=True,
        ),
        SummaryField(
            "direct_predicted_to_fit",
            "direct predicted to fit",
            None,
            "the estimate said direct fits",
            "boolean",
        ),
        SummaryField(
            "direct_prediction_held",
            "direct prediction held",
            None,
            "the direct attempt did what was predicted",
            "boolean",
        ),
        SummaryField(
            "used_prediction_held",
            "used strategy's prediction held",
            None,
            "the strategy used did what was predicted",
            "boolean",
        ),
        *_memory_fields(),
        SummaryField(
            "gpu_allocated_reserved_ratio",
            "GPU allocated of reserved",
            "fraction",
            "peak allocated / peak reserved GPU memory",
            "number",
        ),
        SummaryField(
            "free_memory_before_bytes",
            "free memory before",
            "bytes",
            "memory this process could get before the encode (as direct_free_bytes; cached blocks count as free, so the encode's own cache growth does not move it: see gpu_driver_free_*)",
            "integer",
            process_wide=True,
        ),
        SummaryField(
            "free_memory_after_bytes",
            "free memory after",
            "bytes",
            "memory this process could get after the encode (as free_memory_before_bytes)",
            "integer",
            process_wide=True,
        ),
        SummaryField(
            "free_memory_change_bytes",
            "free memory change",
            "bytes",
            "free memory after minus before",
            "integer",
            process_wide=True,
        ),
        SummaryField(
            "free_memory_manager",
            "memory manager",
            None,
            "which ComfyUI memory manager the free-memory figures read: dynamic (dynamic VRAM) or "
            "estimate-based; null when no ComfyUI figure was read",
            "string",
        ),
        SummaryField(
            "gpu_driver_free_before_bytes",
            "driver free before",
            "bytes",
            "the driver's free device memory (NVML total - used) when the encode started: what the "
            "encode's own reserved memory (and other processes) move",
            "integer",
            process_wide=True,
        ),
        SummaryField(
            "gpu_driver_free_after_bytes",
            "driver free after",
            "bytes",
            "the driver's free device memory (NVML total - used) when the encode ended",
            "integer",
            process_wide=True,
        ),
        SummaryField(
            "gpu_driver_free_change_bytes",
            "driver free change",
            "bytes",
            "driver free after minus before: down by what the encode left reserved",
            "integer",
            process_wide=True,
        ),
        SummaryField(
            "free_memory_change_pct",
            "free memory change %",
            "pct",
            "free memory change relative to before",
            "number",
        ),
        SummaryField(
            "cleanup_reclaimed_bytes",
            "cleanup reclaimed",
            "bytes",
            "memory freed by cleanup after failed attempts",
            "integer",
            process_wide=True,
        ),
    ),
    v1_renames={
        "spatial_compression": "spatial_compression_ratio",
        "temporal_compression": "temporal_compression_ratio",
    },
)

"""The `vae_encode` step's details: the one declaration of their keys (see
monitors/detail_fields.py). The attempts, predictions and tile settings are declared whole (a unit
test keeps them and their dataclasses, Attempt, Prediction and TileSettings, the same)."""

from __future__ import annotations

from ..detail_fields import DetailGroup, details_of
from ..summary_fields import SummaryField as F

_PREDICTION_FIELDS = (
    F("strategy", "strategy", None, "the strategy predicted (direct, tiled, cpu)", "string", nullable=False),
    F("device", "device", None, "the device it would run on", "string"),
    F(
        "estimate_bytes",
        "estimate",
        "bytes",
        "the VAE's own estimate for the activations (memory_used_encode)",
        "integer",
    ),
    F("weights_to_load_bytes", "weights to load", "bytes", "VAE weights not yet on that device", "integer"),
    F("needed_bytes", "needs", "bytes", "weights to load + the (calibrated) estimate", "integer"),
    F("free_bytes", "free", "bytes", "free memory on the device before encoding", "integer"),
    F("fits", "fits", None, "needs at most free; null when either is unknown", "boolean"),
    F("estimate_bytes_unknown_reason", "estimate unknown", None, "why estimate_bytes is null", "string"),
    F(
        "weights_to_load_bytes_unknown_reason",
        "weights unknown",
        None,
        "why weights_to_load_bytes is null",
        "string",
    ),
    F("free_bytes_unknown_reason", "free unknown", None, "why free_bytes is null", "string"),
    F(
        "calibration_ratio",
        "calibration",
        "ratio",
        "largest measured / estimated of earlier attempts",
        "number",
    ),
    F("calibration_margin", "calibration margin", None, "the factor put on the calibration ratio", "number"),
    F("calibrated_estimate_bytes", "calibrated estimate", "bytes", "estimate x ratio x margin", "integer"),
    F(
        "calibration_source",
        "calibrated from",
        None,
        "which earlier attempts calibrated the estimate",
        "string",
    ),
    F("calibration_unknown_reason", "not calibrated", None, "why the raw estimate was used", "string"),
    F(
        "calibration_lower_bound_ratio",
        "lower bound",
        "ratio",
        "at least this x the estimate: earlier attempts ran out of memory (a bound, never a measurement)",
        "number",
    ),
    F(
        "free_memory_manager",
        "memory manager",
        None,
        "ComfyUI's manager read: dynamic or estimate-based",
        "string",
    ),
    F(
        "free_memory_source",
        "free memory source",
        None,
        "how free_bytes was made (per-process cap, reserve...)",
        "string",
    ),
)

_ATTEMPT = DetailGroup(
    "attempts",
    "attempts",
    "each strategy the chain tried, in order",
    (
        F("strategy", "strategy", None, "direct, tiled, cpu or dummy", "string", nullable=False),
        F("outcome", "outcome", None, "ok, oom, error or skipped", "string", nullable=False),
        F("reason", "reason", None, "why it was skipped", "string"),
        F("error_type", "error", None, "the exception's type", "string"),
        F("error_message", "error message", None, "the exception's text", "string"),
        F("duration_s", "time", "s", "wall time of the attempt", "number"),
        F(
            "peaks",
            "peak",
            None,
            "per metric (rss, GPU allocated/reserved) its highest value and when",
            "object",
        ),
        DetailGroup(
            "prediction", "prediction", "what was predicted before the attempt ran", _PREDICTION_FIELDS
        ),
        F(
            "prediction_held",
            "prediction held",
            None,
            "the attempt's outcome agrees with its prediction",
            "boolean",
        ),
        F(
            "cleanup_reclaimed_bytes",
            "cleanup reclaimed",
            "bytes",
            "memory freed by the cleanup after it failed",
            "integer",
        ),
        F("notes", "notes", None, "log lines seen during the attempt that matter", "array"),
        F("memory_snapshot", "memory snapshot", None, "what was loaded when it ran out of memory", "object"),
        F(
            "caught_by_comfyui",
            "caught by ComfyUI",
            None,
            "ComfyUI's encode caught this out-of-memory and retried tiled itself",
            "boolean",
        ),
        F(
            "compute_dtype",
            "CPU dtype",
            None,
            "the dtype the CPU encode ran in, its input and weights alike (ComfyUI's CPU VAE dtype); "
            "null for the GPU strategies",
            "string",
        ),
        F(
            "weights_reload_s",
            "weights reload",
            "s",
            "seconds the CPU encode spent reloading the VAE's weights from its file (dynamic VRAM keeps "
            "no CPU copy); null when it used the loaded weights",
            "number",
        ),
        F(
            "weights_detached",
            "weights detached",
            None,
            "the CPU encode took a dynamic-VRAM VAE off its GPU: its next GPU encode loads the weights "
            "again; null for the GPU strategies",
            "boolean",
        ),
    ),
    repeated="list",
    nullable=False,
)

_TILES = DetailGroup(
    "tiles",
    "tiles",
    "the tile settings a tiled attempt uses (pixels)",
    (
        F("tile_size", "tile size", None, "tile side in pixels", "integer"),
        F("overlap", "overlap", None, "tile overlap in pixels", "integer"),
        F(
            "temporal_size",
            "temporal tile",
            None,
            "frames per temporal tile; null: no temporal tiling",
            "integer",
        ),
        F("temporal_overlap", "temporal overlap", None, "frames of temporal overlap", "integer"),
        F(
            "source",
            "tile settings from",
            None,
            "where the figures came from (inputs, ComfyUI's retry)",
            "string",
        ),
    ),
    nullable=False,
)

_TENSOR = (
    F("shape", "shape", None, "the tensor's shape", "array"),
    F("dtype", "dtype", None, "the tensor's dtype", "string"),
    F("device", "device", None, "the tensor's device", "string"),
    F("bytes", "size", None, "the tensor's size in bytes", "integer"),
    F("n_elements", "element count", "count", "numel", "integer"),
)

VAE_ENCODE_DETAILS = details_of(
    "vae_encode",
    (
        _ATTEMPT,
        DetailGroup(
            "predictions",
            "predictions",
            "per strategy, the prediction made before running",
            _PREDICTION_FIELDS,
            repeated="map",
            nullable=False,
        ),
        _TILES,
        F(
            "allow_dummy",
            "dummy allowed",
            None,
            "a zero latent may be made when every strategy failed",
            "boolean",
        ),
        DetailGroup("pixels", "input", "the image tensor encoded (statistics)", _TENSOR, open=True),
        DetailGroup(
            "latent", "latent", "the latent made (statistics); null when none was", _TENSOR, open=True
        ),
        F("vae", "VAE", None, "the VAE object: class, device, dtype, size, patches", "object"),
        F("device", "device", None, "the device the chain ran on", "string"),
        F("span", "span", None, "the step's span: its full readings (see span)", "object"),
        F(
            "memory",
            "memory",
            None,
            "the memory picture of the step's span (monitors.span.memory_picture); null without a span",
            "object",
        ),
        F(
            "throughput_unknown_reason",
            "throughput unknown",
            None,
            "why frames_per_s and input_mib_per_s are null",
            "string",
        ),
        F(
            "free_memory_unknown_reason",
            "free memory unknown",
            None,
            "on the CPU: why free memory is not read",
            "string",
        ),
        DetailGroup(
            "system_available_memory",
            "system available memory",
            "on the CPU: system RAM available before and after the encode",
            (
                F("before_bytes", "available before", "bytes", "system RAM available before", "integer"),
                F("after_bytes", "available after", "bytes", "system RAM available after", "integer"),
                F("change_bytes", "available change", "bytes", "after minus before", "integer"),
                F("note", "note", None, "system-wide: includes every other process", "string"),
            ),
        ),
    ),
    "what the VAE encode chain did: each attempt with its outcome, the predictions made before running, "
    "the tile settings, the input and the latent, the memory over the step's span",
)

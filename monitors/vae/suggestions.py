"""The findings of a VAE chain run (report.py puts them in the `vae_encode` step): how it ended,
direct's prediction and running out of memory, the fallbacks and tile settings, the latent's values
and the allocator's waste.
"""

from __future__ import annotations

from ..report import Finding, format_bytes
from .chain import OOM, SKIPPED, ChainResult
from .comfy_retry import RETRY_STRATEGY
from .tiles import TileSettings

FRAGMENTATION_RATIO = (
    0.6  # allocated/reserved below this at peak: the caching allocator holds much idle memory
)
FRAGMENTATION_MIN_RESERVED_BYTES = 512 * 1024**2


def suggestions(
    result: ChainResult, tiles: TileSettings, latent: dict | None, figures: dict
) -> list[Finding]:
    direct = result.attempt("direct")
    prediction = result.predictions.get("direct")
    return [
        *_outcome_findings(result),
        *_direct_predicted_too_large(result, direct, prediction),
        *_direct_out_of_memory(result, direct, prediction),
        *_fallback_findings(result, tiles),
        *_estimate_pessimistic(direct),
        *_output_findings(result, latent, figures),
    ]


def _outcome_findings(result: ChainResult) -> list[Finding]:
    """A dummy latent, and the chain's error (bad input is already among the input findings)."""
    found: list[Finding] = []
    if result.strategy_used == "dummy":
        found.append(
            Finding(
                "error",
                "Every strategy ran out of memory: the output latent is all ZEROS (allow_dummy is on). "
                "Anything made from it is meaningless; free memory or lower tile_size and run again.",
                "dummy_latent",
            )
        )
    if result.error and result.error_kind != "bad_input":
        found.append(Finding("error", result.error, result.error_kind))
    return found


def _direct_predicted_too_large(result: ChainResult, direct, prediction) -> list[Finding]:
    used = result.strategy_used
    if not (direct and direct.outcome == SKIPPED and prediction and prediction.fits is False and used):
        return []
    message = (
        f"direct would need {format_bytes(prediction.needed_bytes)}, "
        f"{format_bytes(prediction.free_bytes)} free: used {used}"
        + ("; lower tile_size to save more" if used == "tiled" else "")
        + (f" ({prediction.calibration_source})" if prediction.calibration_source else "")
    )
    return [Finding("info", message, "direct_predicted_too_large")]


def _direct_out_of_memory(result: ChainResult, direct, prediction) -> list[Finding]:
    """One finding for direct running out: by itself, or inside ComfyUI's encode that retried tiled."""
    found: list[Finding] = []
    if direct and direct.outcome == OOM and not direct.caught_by_comfyui:
        message = f"direct ran out of memory after {direct.duration_s:.2f} s"
        if prediction and prediction.fits:
            message += (
                f"; the VAE's estimate ({format_bytes(prediction.needed_bytes)} of "
                f"{format_bytes(prediction.free_bytes)} free) said it fits, so for inputs this size choose tiled"
            )
        elif result.requested == "direct":
            message += (
                "; strategy auto skips direct when the VAE's estimate, calibrated by earlier encodes, "
                "says it cannot fit"
            )
        found.append(Finding("warning", message + ".", "direct_out_of_memory"))
    if direct and direct.caught_by_comfyui:
        message = (
            f"direct ran out of memory inside ComfyUI's encode, which caught it and retried tiled by itself "
            f"({direct.duration_s:.2f} s in all)"
        )
        if prediction and prediction.fits:
            message += (
                f"; the VAE's estimate ({format_bytes(prediction.needed_bytes)} of "
                f"{format_bytes(prediction.free_bytes)} free) said it fits"
            )
        found.append(
            Finding(
                "warning",
                message + "; strategy tiled goes there at once.",
                "comfy_internal_tiled_retry",
            )
        )
    return found


def _fallback_findings(result: ChainResult, tiles: TileSettings) -> list[Finding]:
    """Encoding on the CPU when the GPU was asked for, and a tile as large as the image."""
    found: list[Finding] = []
    if result.strategy_used == "cpu" and result.requested != "cpu":
        gpu_attempts = [a for a in result.attempts if a.strategy in ("direct", "tiled", RETRY_STRATEGY)]
        if any(a.outcome == OOM for a in gpu_attempts):
            message = (
                "Encoded on the CPU after the GPU strategies ran out of memory (slow): lower tile_size "
                "or temporal_size, or free GPU memory."
            )
        else:  # only claim out of memory when an attempt ran out of it
            why = "; ".join(f"{a.strategy} {a.outcome}: {a.reason or a.error_message}" for a in gpu_attempts)
            message = f"Encoded on the CPU (slow): {why or 'no GPU strategy ran'}."
        found.append(Finding("warning", message, "cpu_fallback"))
    found.extend(_cpu_weights_findings(result.attempt("cpu")))
    tiled = result.attempt("tiled")
    shape = (result.pixels_info or {}).get("shape") or []
    if tiled and tiled.outcome != SKIPPED and len(shape) == 4 and tiles.tile_size >= max(shape[1], shape[2]):
        found.append(
            Finding(
                "info",
                f"tile_size {tiles.tile_size} covers the whole {shape[2]}x{shape[1]} image: tiled needs about "
                "as much memory as direct; lower tile_size.",
                "tile_covers_image",
            )
        )
    return found


def _cpu_weights_findings(cpu) -> list[Finding]:
    """Where the CPU encode's weights came from, when that cost something (dynamic VRAM)."""
    found: list[Finding] = []
    if cpu is None:
        return found
    if cpu.weights_reload_s is not None:
        found.append(
            Finding(
                "info",
                f"The CPU encode reloaded the VAE's weights from its file ({cpu.weights_reload_s:.2f} s): "
                "under dynamic VRAM ComfyUI keeps no CPU copy of them to encode with.",
                "cpu_weights_reloaded",
            )
        )
    if cpu.weights_detached:
        found.append(
            Finding(
                "info",
                "The CPU encode took the VAE off its GPU (dynamic VRAM): its next GPU encode loads the "
                "weights again.",
                "dynamic_vram_weights_detached",
            )
        )
    return found


def _estimate_pessimistic(direct) -> list[Finding]:
    if not (direct and direct.outcome == "ok" and direct.prediction and direct.prediction.fits is False):
        return []
    message = (
        f"direct fit although the VAE's estimate ({format_bytes(direct.prediction.needed_bytes)}) "
        f"exceeded the {format_bytes(direct.prediction.free_bytes)} free: the estimate is cautious."
    )
    return [Finding("info", message, "estimate_pessimistic")]


def _output_findings(result: ChainResult, latent: dict | None, figures: dict) -> list[Finding]:
    """NaN or Inf in the latent, and reserved GPU memory the allocator held idle at peak."""
    found: list[Finding] = []
    if latent and result.strategy_used != "dummy" and (latent.get("n_nan") or latent.get("n_inf")):
        message = f"The latent holds {latent['n_nan']} NaN and {latent['n_inf']} Inf values."
        found.append(Finding("error", message, "nan_latent"))
    ratio = figures.get("gpu_allocated_reserved_ratio")
    reserved = figures.get("peak_gpu_reserved_bytes") or 0
    if ratio is not None and ratio < FRAGMENTATION_RATIO and reserved >= FRAGMENTATION_MIN_RESERVED_BYTES:
        found.append(
            Finding(
                "info",
                f"At peak only {100 * ratio:.0f}% of reserved GPU memory was allocated: "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True can reduce the waste.",
                "allocator_fragmentation",
            )
        )
    return found

"""The `vae_encode` report step of a VAE chain run: key figures, attempts and suggestions.

Plain data only: the latent is described (describe_tensor) and dropped, never kept.
"""

from __future__ import annotations

import logging
import time

from ..engine.span import memory_picture
from ..models.state import describe_vae
from ..numeric.tensor_stats import describe_tensor
from ..report import Finding, StepReport, format_bytes
from .chain import OOM, SKIPPED, ChainResult
from .comfy_retry import RETRY_STRATEGY
from .geometry import TileSettings

STEP_KIND = "vae_encode"
MB = 1_000_000
FRAGMENTATION_RATIO = (
    0.6  # allocated/reserved below this at peak: the caching allocator holds much idle memory
)
FRAGMENTATION_MIN_RESERVED_BYTES = 512 * 1024**2


def latent_type(shape) -> str:
    return {4: "image", 5: "video"}.get(len(shape), "other")


def _ratio(numerator, denominator) -> float | None:
    return None if not numerator or not denominator else numerator / denominator


def _pct(delta, base) -> float | None:
    return None if delta is None or not base else 100.0 * delta / base


def _gpu_name(device: str | None) -> str | None:
    if not device or not device.startswith("cuda"):
        return None
    return device if ":" in device else "cuda:0"


def geometry(pixels_shape, latent) -> dict:
    """Latent type and shape, spatial (input H*W / latent H*W) and temporal compression."""
    shape = list(latent["shape"])
    kind = latent_type(shape)
    batch, height, width = (pixels_shape + [None] * 3)[:3] if pixels_shape else (None, None, None)
    latent_area = shape[-1] * shape[-2] if len(shape) >= 4 else None
    temporal = None
    latent_frames = None
    if kind == "video" and shape[0] == 1:
        latent_frames = shape[2]
        temporal = _ratio(batch, latent_frames)
    return {
        "latent_type": kind,
        "latent_shape": shape,
        "input_frames": batch,
        "latent_frames": latent_frames,
        "spatial_compression_ratio": _ratio((height or 0) * (width or 0), latent_area),
        "temporal_compression_ratio": temporal,
    }


# On the CPU, "free memory" is the system's available RAM: other processes move it (an encode that
# grew the process by 53 KB saw it drop by 997 MB), so it is no figure of the encode.
CPU_FREE_MEMORY_REASON = (
    "on the CPU free memory is the whole system's available RAM, which other processes move: "
    "not this encode's (see rss_change_bytes, and details.system_available_memory)"
)


def n_pixels(pixels_shape) -> int | None:
    """frames x height x width of an IMAGE batch [frames, height, width, channels]; channels left out."""
    if not pixels_shape or len(pixels_shape) < 3:
        return None
    frames, height, width = pixels_shape[:3]
    if not all(isinstance(v, int) for v in (frames, height, width)):
        return None
    return frames * height * width


def _on_cpu(device: str | None) -> bool:
    return bool(device) and str(device).startswith("cpu")


def memory_figures(result: ChainResult) -> dict:
    """Peaks with times, immediate impact (peak - before), before/after changes, ratios."""
    figures: dict = {}
    span = result.span
    if span is None:
        return figures
    gpu = _gpu_name(result.device)
    metrics = {"rss": "process_rss_bytes"}
    if gpu:
        metrics.update(gpu_allocated=f"{gpu}.allocated_bytes", gpu_reserved=f"{gpu}.reserved_bytes")
    for label, metric in metrics.items():
        peak = span.peaks.get(metric)
        change = span.changes.get(metric)
        before = None if change is None else change.before
        figures[f"peak_{label}_bytes"] = None if peak is None or peak.value is None else int(peak.value)
        figures[f"peak_{label}_at_s"] = None if peak is None else peak.at_s
        peak_value = figures[f"peak_{label}_bytes"]
        figures[f"{label}_peak_increase_bytes"] = (
            None if peak_value is None or before is None else int(peak_value - before)
        )
        figures[f"{label}_change_bytes"] = (
            None if change is None or change.delta is None else int(change.delta)
        )
        figures[f"{label}_change_pct"] = None if change is None else change.delta_pct
    if gpu:
        figures["gpu_allocated_reserved_ratio"] = _ratio(
            figures.get("peak_gpu_allocated_bytes"), figures.get("peak_gpu_reserved_bytes")
        )
    free_change = (
        None
        if result.free_before_bytes is None or result.free_after_bytes is None
        else result.free_after_bytes - result.free_before_bytes
    )
    figures.update(driver_free_figures(span, gpu))
    if _on_cpu(result.device):
        figures.update(
            free_memory_before_bytes=None,
            free_memory_after_bytes=None,
            free_memory_change_bytes=None,
            free_memory_change_pct=None,
            cleanup_reclaimed_bytes=result.cleanup_reclaimed_bytes,
        )
        return figures
    figures.update(
        free_memory_before_bytes=result.free_before_bytes,
        free_memory_after_bytes=result.free_after_bytes,
        free_memory_change_bytes=free_change,
        free_memory_change_pct=_pct(free_change, result.free_before_bytes),
        cleanup_reclaimed_bytes=result.cleanup_reclaimed_bytes,
    )
    return figures


def _driver_free(snapshot, gpu: str | None) -> int | None:
    for reading in getattr(snapshot, "gpus", ()) if gpu else ():
        if (
            reading.device == gpu
            and reading.nvml_total_bytes is not None
            and reading.nvml_used_bytes is not None
        ):
            return int(reading.nvml_total_bytes - reading.nvml_used_bytes)
    return None


def driver_free_figures(span, gpu: str | None) -> dict:
    """The driver's free memory (NVML) at the encode's start and end: unlike ComfyUI's figure it
    counts torch's cached blocks as used, so the encode's own reserved memory moves it."""
    before, after = _driver_free(span.baseline, gpu), _driver_free(span.end, gpu)
    return {
        "gpu_driver_free_before_bytes": before,
        "gpu_driver_free_after_bytes": after,
        "gpu_driver_free_change_bytes": None if before is None or after is None else after - before,
    }


def _attempt(result: ChainResult, strategy: str):
    for attempt in result.attempts:
        if attempt.strategy == strategy:
            return attempt
    return None


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


def suggestions(
    result: ChainResult, tiles: TileSettings, latent: dict | None, figures: dict
) -> list[Finding]:
    found: list[Finding] = []
    used = result.strategy_used
    direct, tiled = _attempt(result, "direct"), _attempt(result, "tiled")
    prediction = result.predictions.get("direct")
    if used == "dummy":
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
    if direct and direct.outcome == SKIPPED and prediction and prediction.fits is False and used:
        found.append(
            Finding(
                "info",
                f"direct would need {format_bytes(prediction.needed_bytes)}, "
                f"{format_bytes(prediction.free_bytes)} free: used {used}"
                + ("; lower tile_size to save more" if used == "tiled" else "")
                + (f" ({prediction.calibration_source})" if prediction.calibration_source else ""),
                "direct_predicted_too_large",
            )
        )
    found.extend(_direct_out_of_memory(result, direct, prediction))
    if used == "cpu" and result.requested != "cpu":
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
    if direct and direct.outcome == "ok" and direct.prediction and direct.prediction.fits is False:
        found.append(
            Finding(
                "info",
                f"direct fit although the VAE's estimate ({format_bytes(direct.prediction.needed_bytes)}) "
                f"exceeded the {format_bytes(direct.prediction.free_bytes)} free: the estimate is cautious.",
                "estimate_pessimistic",
            )
        )
    if latent and used != "dummy" and (latent.get("n_nan") or latent.get("n_inf")):
        found.append(
            Finding(
                "error",
                f"The latent holds {latent['n_nan']} NaN and {latent['n_inf']} Inf values.",
                "nan_latent",
            )
        )
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


def build_step(
    node_id: str | None,
    result: ChainResult,
    vae_info: dict | None = None,
    allow_dummy: bool = False,
) -> StepReport:
    latent = describe_tensor(result.samples) if result.samples is not None else None
    pixels = result.pixels_info or {}
    figures = memory_figures(result)
    duration = None if result.span is None else result.span.duration_s
    frames = (pixels.get("shape") or [None])[0]
    throughput_reason = None
    if result.samples is None:
        throughput_reason = "no latent was made"
    elif result.strategy_used == "dummy":
        throughput_reason = "dummy latent: zeros made without encoding, so nothing was encoded per second"
    direct_prediction = result.predictions.get("direct")
    direct_attempt = _attempt(result, "direct")
    used_attempt = _attempt(result, result.strategy_used) if result.strategy_used else None
    summary = {
        "strategy_requested": result.requested,
        "strategy_used": result.strategy_used,
        "dummy_used": result.strategy_used == "dummy",
        "n_attempts": sum(1 for a in result.attempts if a.outcome != SKIPPED),
        "n_out_of_memory": sum(1 for a in result.attempts if a.outcome == OOM),
        "error": result.error,
        "latent_dtype": None if latent is None else latent["dtype"],
        "latent_device": None if latent is None else latent["device"],
        "latent_bytes": None if latent is None else latent["bytes"],
        "latent_n_elements": None if latent is None else latent["n_elements"],
        "input_bytes": pixels.get("bytes"),
        "input_n_pixels": n_pixels(pixels.get("shape")),
        "duration_s": duration,
        "frames_per_s": None if throughput_reason else _ratio(frames, duration),
        "input_mb_per_s": None if throughput_reason else _ratio((pixels.get("bytes") or 0) / MB, duration),
        "direct_needed_bytes": None if direct_prediction is None else direct_prediction.needed_bytes,
        "direct_estimate_bytes": None if direct_prediction is None else direct_prediction.estimate_bytes,
        "direct_calibration_ratio": None if direct_prediction is None else direct_prediction.calibration_ratio,
        "direct_calibration_source": None
        if direct_prediction is None
        else direct_prediction.calibration_source or direct_prediction.calibration_unknown_reason,
        "direct_free_bytes": None if direct_prediction is None else direct_prediction.free_bytes,
        "free_memory_manager": result.free_memory_manager,
        "direct_predicted_to_fit": None if direct_prediction is None else direct_prediction.fits,
        "direct_prediction_held": None if direct_attempt is None else direct_attempt.prediction_held,
        "used_prediction_held": None if used_attempt is None else used_attempt.prediction_held,
    }
    if latent is not None:
        summary.update(geometry(pixels.get("shape"), latent))
    else:
        summary.update(
            latent_type=None,
            latent_shape=None,
            spatial_compression_ratio=None,
            temporal_compression_ratio=None,
        )
    summary.update(figures)
    findings = [*result.input_findings, *suggestions(result, result.tiles, latent, figures)]
    details = {
        "attempts": [a.to_dict() for a in result.attempts],
        "predictions": {k: v.to_dict() for k, v in result.predictions.items()},
        "tiles": dict(result.tiles.__dict__),
        "allow_dummy": allow_dummy,
        "pixels": pixels or None,
        "latent": latent,
        "vae": vae_info,
        "device": result.device,
        "span": None if result.span is None else result.span.to_dict(),
        # The same named before/end/change/peak@time set as every monitor step with a span.
        "memory": None if result.span is None else memory_picture(result.span),
        "throughput_unknown_reason": throughput_reason,
    }
    if _on_cpu(result.device):
        details["free_memory_unknown_reason"] = CPU_FREE_MEMORY_REASON
        details["system_available_memory"] = {
            "before_bytes": result.free_before_bytes,
            "after_bytes": result.free_after_bytes,
            "change_bytes": None
            if result.free_before_bytes is None or result.free_after_bytes is None
            else result.free_after_bytes - result.free_before_bytes,
            "note": "system-wide: includes every other process",
        }
    return StepReport(
        kind=STEP_KIND,
        node_id=node_id,
        summary=summary,
        details=details,
        findings=tuple(findings),
        monitor_errors=tuple(result.monitor_errors),
        created_unix_s=time.time(),
    )


def build_vae_encode_step(
    node_id: str | None, result: ChainResult, vae=None, allow_dummy: bool = False
) -> StepReport:
    """The step of a finished chain run, with the VAE described (the latent itself is not kept)."""
    vae_info = describe_vae(vae) if vae is not None else None
    return build_step(node_id, result, vae_info=vae_info, allow_dummy=allow_dummy)


def log_findings(step: StepReport, log: logging.Logger) -> None:
    """Warnings and errors of an encode go to the log too: a fallback or dummy latent must not pass unseen."""
    for finding in step.findings:
        if finding.level != "info":
            level = logging.ERROR if finding.level == "error" else logging.WARNING
            log.log(level, "pipeline monitor: VAE encode node %s: %s", step.node_id, finding.message)

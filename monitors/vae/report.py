"""The `vae_encode` report step of a VAE chain run: key figures, attempts and suggestions
(suggestions.py).

Plain data only: the latent is described (describe_tensor) and dropped, never kept.
"""

from __future__ import annotations

import logging
import time

from ..engine.span import memory_picture
from ..models.state import describe_vae
from ..numeric.tensor_stats import describe_tensor
from ..report import StepReport
from .chain import OOM, SKIPPED, ChainResult
from .details import VAE_ENCODE_DETAILS
from .suggestions import suggestions
from .summary import VaeEncodeSummary

STEP_KIND = "vae_encode"
MiB = 1024**2


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


def build_step(
    node_id: str | None,
    result: ChainResult,
    vae_info: dict | None = None,
    allow_dummy: bool = False,
) -> StepReport:
    """The summary (outcome and sizes, throughput, direct's prediction, shapes, memory figures), the
    details (attempts, predictions, tensors, memory picture) and the findings."""
    latent = describe_tensor(result.samples) if result.samples is not None else None
    pixels = result.pixels_info or {}
    figures = memory_figures(result)
    throughput_reason = _throughput_unknown_reason(result)
    # Each part a mapping of record fields (the memory figures' names per metric): a name the record
    # does not declare raises here.
    summary = VaeEncodeSummary(
        **_outcome_summary(result, latent, pixels),
        **_throughput_summary(result, pixels, throughput_reason),
        **_prediction_summary(result),
        **_shape_summary(pixels, latent),
        **figures,
    )
    findings = [*result.input_findings, *suggestions(result, result.tiles, latent, figures)]
    return StepReport(
        kind=STEP_KIND,
        node_id=node_id,
        summary=summary.to_dict(),
        details=VAE_ENCODE_DETAILS.build(**_details(result, latent, vae_info, allow_dummy, throughput_reason)),
        findings=tuple(findings),
        monitor_errors=tuple(result.monitor_errors),
        created_unix_s=time.time(),
    )


def _throughput_unknown_reason(result: ChainResult) -> str | None:
    if result.samples is None:
        return "no latent was made"
    if result.strategy_used == "dummy":
        return "dummy latent: zeros made without encoding, so nothing was encoded per second"
    return None


def _outcome_summary(result: ChainResult, latent: dict | None, pixels: dict) -> dict:
    return {
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
    }


def _throughput_summary(result: ChainResult, pixels: dict, throughput_reason: str | None) -> dict:
    duration = None if result.span is None else result.span.duration_s
    frames = (pixels.get("shape") or [None])[0]
    return {
        "duration_s": duration,
        "frames_per_s": None if throughput_reason else _ratio(frames, duration),
        "input_mib_per_s": None if throughput_reason else _ratio((pixels.get("bytes") or 0) / MiB, duration),
    }


def _prediction_summary(result: ChainResult) -> dict:
    """Direct's prediction (calibrated or not) and whether the attempts bore it out."""
    direct = result.predictions.get("direct")
    direct_attempt = result.attempt("direct")
    used_attempt = result.attempt(result.strategy_used) if result.strategy_used else None
    return {
        "direct_needed_bytes": None if direct is None else direct.needed_bytes,
        "direct_estimate_bytes": None if direct is None else direct.estimate_bytes,
        "direct_calibration_ratio": None if direct is None else direct.calibration_ratio,
        "direct_calibration_source": None
        if direct is None
        else direct.calibration_source or direct.calibration_unknown_reason,
        "direct_free_bytes": None if direct is None else direct.free_bytes,
        "free_memory_manager": result.free_memory_manager,
        "direct_predicted_to_fit": None if direct is None else direct.fits,
        "direct_prediction_held": None if direct_attempt is None else direct_attempt.prediction_held,
        "used_prediction_held": None if used_attempt is None else used_attempt.prediction_held,
    }


def _shape_summary(pixels: dict, latent: dict | None) -> dict:
    if latent is not None:
        return geometry(pixels.get("shape"), latent)
    return {
        "latent_type": None,
        "latent_shape": None,
        "spatial_compression_ratio": None,
        "temporal_compression_ratio": None,
    }


def _details(
    result: ChainResult, latent: dict | None, vae_info: dict | None, allow_dummy: bool, throughput_reason
) -> dict:
    details = {
        "attempts": [a.to_dict() for a in result.attempts],
        "predictions": {k: v.to_dict() for k, v in result.predictions.items()},
        "tiles": dict(result.tiles.__dict__),
        "allow_dummy": allow_dummy,
        "pixels": result.pixels_info or None,
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
    return details


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

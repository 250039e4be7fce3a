"""Shapes and memory needs of a VAE encode, from the VAE's own attributes (duck typing), and
checks of its input (the tile settings are in tiles.py).

ComfyUI's VAE takes IMAGE [B, H, W, C] in 0..1, crops H and W to a multiple of its spatial
compression, drops extra channels (or pads missing ones when it has a pad value), and for video
VAEs (latent_dim 3) turns the batch into time: [1, C, T, H, W]. The helpers here repeat that
arithmetic so the chain can ask the VAE's own memory estimate (`memory_used_encode`) for the
shape each strategy hands to the model, and make a dummy latent of the right shape, without
encoding anything.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..numeric.tensor_stats import describe_tensor
from ..report import Finding
from .free_memory import as_free_memory
from .tiles import (  # noqa: F401 (the tile settings are imported from here too)
    COMFY_RETRY_OVERLAP,
    COMFY_RETRY_SOURCE,
    COMFY_RETRY_TILE_SIZE,
    TileSettings,
    comfy_retry_tiles,
    tiles_from_inputs,
    tiles_itself,
    usable_tiles,
)

log = logging.getLogger(__name__)


def spatial_ratio(vae) -> int | None:
    """Pixels per latent pixel along H and W."""
    method = getattr(vae, "spacial_compression_encode", None)  # sic, ComfyUI's spelling
    if callable(method):
        try:
            return int(method())
        except Exception as exc:  # the same figure is read from downscale_ratio below
            log.debug("pipeline monitor: spacial_compression_encode failed, using downscale_ratio: %s", exc)
    ratio = getattr(vae, "downscale_ratio", None)
    if isinstance(ratio, (tuple, list)) and ratio:
        ratio = ratio[-1]
    return int(ratio) if isinstance(ratio, (int, float)) and ratio > 0 else None


def _temporal(vae, attribute: str):
    ratio = getattr(vae, attribute, None)
    if isinstance(ratio, (tuple, list)) and ratio and callable(ratio[0]):
        return ratio[0]
    return None


def latent_frames(vae, frames: int) -> int | None:
    """Latent frames for `frames` input frames (video VAEs), e.g. WAN 2.1: 9 -> 3."""
    down = _temporal(vae, "downscale_ratio")
    return None if down is None else int(down(frames))


def used_frames(vae, frames: int) -> int | None:
    """Input frames that the latent frames cover (WAN: 1 + 4k); later frames are dropped."""
    down, up = _temporal(vae, "downscale_ratio"), _temporal(vae, "upscale_ratio")
    return None if down is None or up is None else int(up(down(frames)))


def is_video_vae(vae) -> bool:
    return getattr(vae, "latent_dim", 2) == 3 and not getattr(vae, "not_video", False)


def encode_input_shape(vae, pixels_shape) -> tuple[int, ...] | None:
    """The shape `vae.encode` hands to the model (and to its memory estimate)."""
    if len(pixels_shape) != 4:
        return None
    batch, height, width, channels = (int(v) for v in pixels_shape)
    ratio = spatial_ratio(vae) or 1
    if getattr(vae, "crop_input", True):
        height, width = height // ratio * ratio, width // ratio * ratio
    expected = getattr(vae, "output_channels", None)
    if isinstance(expected, int):
        can_pad = getattr(vae, "pad_channel_value", None) is not None
        if channels > expected or (channels < expected and can_pad):
            channels = expected
    if getattr(vae, "latent_dim", 2) == 3:
        if is_video_vae(vae):
            return (1, channels, batch, height, width)
        return (batch, channels, 1, height, width)
    return (batch, channels, height, width)


def tile_input_shape(vae, pixels_shape, tiles) -> tuple[int, ...] | None:
    """The largest piece `encode_tiled` hands to the model with these tile settings: the whole
    input for a VAE that tiles by itself (ComfyUI's own estimate for it is of the whole input too)."""
    full = encode_input_shape(vae, pixels_shape)
    if full is None or tiles_itself(vae):
        return full
    size = tiles.tile_size
    if len(full) == 4:
        _, channels, height, width = full
        # Three passes with tiles (x, y), (2x, y/2) and (x/2, 2y): the largest clipped area counts.
        passes = ((size, size), (size * 2, size // 2), (size // 2, size * 2))
        tile_w, tile_h = max(passes, key=lambda p: min(width, p[0]) * min(height, p[1]))
        return (1, channels, min(height, tile_h), min(width, tile_w))
    if len(full) == 5:
        batch, channels, frames, height, width = full
        down, up = _temporal(vae, "downscale_ratio"), _temporal(vae, "upscale_ratio")
        if tiles.temporal_size is None:  # no temporal tiling: every frame in each tile
            tile_t = frames
        else:
            tile_t = int(up(max(2, down(tiles.temporal_size)))) if down and up else tiles.temporal_size
        return (batch, channels, min(frames, tile_t), min(height, size), min(width, size))
    return None


def latent_shape(vae, pixels_shape) -> tuple[int, ...] | None:
    """The latent `vae.encode` would return, or None for VAEs whose shape rule is unknown (audio)."""
    full = encode_input_shape(vae, pixels_shape)
    ratio = spatial_ratio(vae)
    channels = getattr(vae, "latent_channels", None)
    if full is None or ratio is None or not isinstance(channels, int):
        return None
    if getattr(vae, "extra_1d_channel", None) is not None:
        return None
    if len(full) == 4:
        return (full[0], channels, full[2] // ratio, full[3] // ratio)
    batch, _, frames, height, width = full
    if is_video_vae(vae):
        frames = latent_frames(vae, frames)
        if frames is None:
            return None
    return (batch, channels, frames, height // ratio, width // ratio)


def dummy_latent(vae, pixels):
    """Zeros of the latent's shape: the emergency output when every real strategy ran out."""
    import torch

    shape = latent_shape(vae, tuple(pixels.shape))
    if shape is None:
        raise RuntimeError("the latent shape of this VAE is unknown, so no dummy latent can be made")
    device = getattr(vae, "output_device", None) or pixels.device
    return torch.zeros(shape, dtype=torch.float32, device=device)


@dataclass(frozen=True)
class Prediction:
    strategy: str
    device: str | None
    estimate_bytes: int | None  # the VAE's own estimate for the activations (memory_used_encode)
    weights_to_load_bytes: int | None  # VAE weights not yet on that device
    needed_bytes: int | None
    free_bytes: int | None
    fits: bool | None  # None: unknown (no estimate or no free-memory reading)
    estimate_bytes_unknown_reason: str | None = None
    weights_to_load_bytes_unknown_reason: str | None = None
    free_bytes_unknown_reason: str | None = None
    # needed_bytes = weights + estimate x calibration_ratio x calibration_margin when earlier
    # encodes measured this VAE (calibration.py); estimate_bytes stays the VAE's own figure.
    calibration_ratio: float | None = None  # largest measured / estimated of the earlier attempts
    calibration_margin: float | None = None
    calibrated_estimate_bytes: int | None = None
    calibration_source: str | None = None  # "calibrated from 3 earlier encode attempts of WanVAE on cuda ..."
    calibration_unknown_reason: str | None = None  # why the raw estimate was used
    # at least this x the estimate: earlier attempts ran out of memory (a bound, never a measurement)
    calibration_lower_bound_ratio: float | None = None
    free_memory_manager: str | None = (
        None  # ComfyUI's manager read: dynamic | estimate-based (free_memory.py)
    )
    free_memory_source: str | None = None  # how free_bytes was made (per-process cap, reserve, ...)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def device_name(vae) -> str | None:
    device = getattr(vae, "device", None)
    return None if device is None else str(device)


def _weights_to_load(vae, device: str | None) -> tuple[int | None, str | None]:
    """(VAE weight bytes that encoding on `device` must still bring there, why unknown)."""
    vae_device = device_name(vae)
    if device is None or vae_device is None:
        return None, "the VAE has no device"
    try:
        size = vae.model_size() if hasattr(vae, "model_size") else None
        if device.startswith("cpu") and vae_device.startswith("cpu"):
            return 0, None  # weights of a CPU VAE already sit in RAM
        if size is None:
            return None, "the VAE has no model_size"
        if device.startswith("cpu"):
            return size, None  # a GPU VAE's weights come over in full
        patcher = getattr(vae, "patcher", None)
        loaded = patcher.loaded_size() if patcher is not None and hasattr(patcher, "loaded_size") else 0
        return max(0, int(size) - int(loaded or 0)), None
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


def predict(
    vae, pixels_shape, strategy: str, tiles: TileSettings, free_memory, calibration=None
) -> Prediction:
    """Memory the strategy needs (VAE estimate, calibrated when `calibration` is given, + weights
    to load) against the free memory. `calibration`: a calibration.Calibration, or a text saying
    why there is none."""
    device = "cpu" if strategy == "cpu" else device_name(vae)
    shape = tile_input_shape(vae, pixels_shape, tiles) if strategy == "tiled" else None
    shape = shape or encode_input_shape(vae, pixels_shape)
    estimate, estimate_reason = None, None
    if shape is None:
        estimate_reason = "input shape unknown for this VAE"
    elif not hasattr(vae, "memory_used_encode"):
        estimate_reason = "the VAE has no memory_used_encode"
    else:
        try:
            estimate = int(vae.memory_used_encode(shape, getattr(vae, "vae_dtype", None)))
        except Exception as exc:
            log.debug("pipeline monitor: memory_used_encode(%s) failed: %s", shape, exc)
            estimate_reason = f"memory_used_encode: {type(exc).__name__}: {exc}"
    weights, weights_reason = _weights_to_load(vae, device)
    free, free_reason, reading = None, None, as_free_memory(None)
    if device is None:
        free_reason = "the VAE has no device"
    else:
        try:
            reading = as_free_memory(free_memory(device))
        except Exception as exc:  # the reading is advice: the prediction stays, unknown, with why
            free_reason = f"{type(exc).__name__}: {exc}"
        else:
            free = reading.free_bytes
            if free is None:
                free_reason = f"no free-memory reading for {device}"
    calibrated, calibration_reason, ratio, margin, source = None, None, None, None, None
    lower_bound = None
    if isinstance(calibration, str) or calibration is None:
        calibration_reason = calibration or "no calibration table"
    elif estimate is not None:
        precedent = calibration.precedent(strategy, estimate, free)
        if precedent is not None:
            ratio, margin, source = precedent.ratio, 1.0, calibration.precedent_source(precedent)
            calibrated = int(round(estimate * ratio))
        else:
            ratio, source = calibration.ratio, calibration.source
            margin = None if ratio is None else calibration.margin
            lower_bound = calibration.lower_bound_ratio
            calibrated = int(round(estimate * calibration.factor))
    used_estimate = calibrated if calibrated is not None else estimate
    needed = None if used_estimate is None else used_estimate + (weights or 0)
    fits = None if needed is None or free is None else needed <= free
    if fits and lower_bound is not None and estimate * lower_bound >= estimate * (ratio or 0) * (margin or 1):
        fits = needed < free  # a bound that decides: the need exceeded it, equal does not fit
    return Prediction(
        strategy,
        device,
        estimate,
        weights,
        needed,
        free,
        fits,
        estimate_reason,
        weights_reason,
        free_reason,
        calibration_ratio=ratio,
        calibration_margin=margin,
        calibrated_estimate_bytes=calibrated,
        calibration_source=source,
        calibration_unknown_reason=calibration_reason,
        calibration_lower_bound_ratio=lower_bound,
        free_memory_manager=reading.manager,
        free_memory_source=reading.source,
    )


@dataclass(frozen=True)
class InputCheck:
    fatal: str | None  # why no strategy can run
    findings: tuple[Finding, ...]
    pixels: dict | None  # describe_tensor of the input


def check_input(vae, pixels) -> InputCheck:
    """The VAE and the image first (no strategy can run without them), then the image's size and
    channels against the VAE, then what the encode will do to it (warnings and notes)."""
    problem = _vae_problem(vae) or _pixels_problem(pixels)
    if problem is not None:
        return InputCheck(problem.message, (problem,), None)
    shape = tuple(int(v) for v in pixels.shape)
    info = describe_tensor(pixels)
    problem = _size_problem(vae, shape) or _channel_problem(vae, shape[3])
    if problem is not None:
        return InputCheck(problem.message, (problem,), info)
    findings = (*_channel_findings(vae, shape[3]), *_value_findings(info), *_layout_findings(vae, shape))
    return InputCheck(None, findings, info)


def _vae_problem(vae) -> Finding | None:
    if vae is None:
        return Finding(
            "error",
            "No VAE received (the vae input is None; a checkpoint without a VAE gives None): connect a VAE loader.",
            "no_vae",
        )
    if not callable(getattr(vae, "encode", None)):
        message = f"The vae input is a {type(vae).__name__}, which has no encode method."
        return Finding("error", message, "not_a_vae")
    if hasattr(vae, "first_stage_model") and vae.first_stage_model is None:
        return Finding(
            "error", "The VAE is invalid (it has no model): load a file that contains a VAE.", "invalid_vae"
        )
    return None


def _pixels_problem(pixels) -> Finding | None:
    shape = getattr(pixels, "shape", None)
    if pixels is None or shape is None or not hasattr(pixels, "numel"):
        return Finding("error", f"No image received (pixels is {type(pixels).__name__}).", "no_pixels")
    if len(shape) != 4:
        message = f"Expected an IMAGE [batch, height, width, channels], got shape {[int(v) for v in shape]}."
        return Finding("error", message, "bad_image_shape")
    return None


def _size_problem(vae, shape: tuple[int, ...]) -> Finding | None:
    batch, height, width, _ = shape
    if batch == 0:
        return Finding("error", "Empty image batch (0 images): nothing to encode.", "empty_batch")
    ratio = spatial_ratio(vae) or 1
    if height < ratio or width < ratio:
        return Finding(
            "error",
            f"Image of {width}x{height} px is smaller than the VAE's {ratio} px per latent pixel: "
            "the latent would be empty. Upscale it first.",
            "image_too_small",
        )
    return None


def _channel_problem(vae, channels: int) -> Finding | None:
    expected = getattr(vae, "output_channels", None)
    if isinstance(expected, int) and channels < expected and getattr(vae, "pad_channel_value", None) is None:
        return Finding(
            "error",
            f"Image has {channels} channel(s) but the VAE expects {expected}: convert it to RGB first.",
            "wrong_channels",
        )
    return None


def _channel_findings(vae, channels: int) -> tuple[Finding, ...]:
    """Channels the encode drops or pads (a shortfall without a pad value is a _channel_problem)."""
    expected = getattr(vae, "output_channels", None)
    if not isinstance(expected, int) or channels == expected:
        return ()
    if channels > expected:
        message = f"Image has {channels} channels: only the first {expected} are encoded."
        return (Finding("warning", message, "channels_dropped"),)
    message = f"Image has {channels} channel(s): the VAE pads it to {expected}."
    return (Finding("warning", message, "channels_padded"),)


def _value_findings(info: dict) -> tuple[Finding, ...]:
    """NaN or Inf pixels, and values outside IMAGE's 0..1."""
    findings = []
    if info.get("n_nan") or info.get("n_inf"):
        message = (
            f"The image holds {info['n_nan']} NaN and {info['n_inf']} Inf values: the latent will hold them "
            "too. Check the node that made the image."
        )
        findings.append(Finding("error", message, "nan_pixels"))
    lo, hi = info.get("min"), info.get("max")
    if lo is not None and hi is not None and (lo < -1e-3 or hi > 1.0 + 1e-3):
        message = f"Pixel values span {lo:.3g}..{hi:.3g}; IMAGE is expected in 0..1."
        findings.append(Finding("warning", message, "pixels_out_of_range"))
    return tuple(findings)


def _layout_findings(vae, shape: tuple[int, ...]) -> tuple[Finding, ...]:
    """Pixels the encode crops away and frames a video VAE drops."""
    batch, height, width, _ = shape
    ratio = spatial_ratio(vae) or 1
    findings = []
    if getattr(vae, "crop_input", True) and (height % ratio or width % ratio):
        message = (
            f"{width}x{height} is cropped to {width // ratio * ratio}x{height // ratio * ratio} "
            f"(a multiple of {ratio})."
        )
        findings.append(Finding("info", message, "cropped"))
    kept = used_frames(vae, batch) if is_video_vae(vae) else None
    if kept is not None and kept < batch:
        up = _temporal(vae, "upscale_ratio")
        step = int(up(2) - up(1))
        message = (
            f"Only the first {kept} of {batch} frames are encoded: this video VAE takes 1 + {step}k frames."
        )
        findings.append(Finding("warning", message, "frames_dropped"))
    return tuple(findings)

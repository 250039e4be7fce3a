"""What a LATENT holds: shape, image/video/other, the latent family guessed from channels and rank,
dtype, device, size, value statistics with NaN/Inf counts, noise mask and batch index.

A LATENT is a dict {"samples": tensor, "noise_mask"?: tensor, "batch_index"?: [int], "type"?: str}.
Images are [B, C, H, W], videos [B, C, T, H, W]; some models pass a nested tensor (an object with
`.is_nested` and `.tensors`). Everything here is duck-typed and reads metadata first; value
statistics are skipped above STATS_MAX_ELEMENTS (numeric/describe.py) so a huge (or expanded)
tensor costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..numeric.describe import STATS_MAX_ELEMENTS, describe_tensor_bounded
from ..report import Finding, sum_known
from ..summary_fields import NOT_GIVEN
from .summary import LatentSummary

MAX_BATCH_INDEX_SHOWN = 64


@dataclass(frozen=True)
class LatentFamily:
    name: str
    channels: int
    rank: int  # 4 image [B,C,H,W], 5 video [B,C,T,H,W]
    spatial_factor: int  # pixels per latent pixel along H and W
    temporal_factor: int | None = None  # frames = (T' - 1) * factor + 1


# From the ComfyUI 0.8 latent formats; the first entry of a (channels, rank) pair is the guess used
# for the decoded size, the others are listed as alternatives.
FAMILIES = (
    LatentFamily("SD1 / SD2 / SDXL", 4, 4, 8),
    LatentFamily("SD3 / Flux.1", 16, 4, 8),
    LatentFamily("Flux.2", 128, 4, 16),
    LatentFamily("WAN 2.1 / HunyuanVideo / Kandinsky 5", 16, 5, 8, 4),
    LatentFamily("Cosmos", 16, 5, 8, 8),
    LatentFamily("WAN 2.2 5B", 48, 5, 16, 4),
    LatentFamily("HunyuanVideo 1.5", 32, 5, 16, 4),
    LatentFamily("LTXV", 128, 5, 32, 8),
    LatentFamily("Mochi", 12, 5, 8, 6),
)


def latent_kind(rank: int) -> str:
    return {4: "image", 5: "video"}.get(rank, "other")


def guess_families(channels: int | None, rank: int) -> list[LatentFamily]:
    return [f for f in FAMILIES if f.channels == channels and f.rank == rank]


def is_tensor(value: Any) -> bool:
    return all(hasattr(value, a) for a in ("shape", "dtype", "device", "numel", "element_size"))


def is_nested(value: Any) -> bool:
    return getattr(value, "is_nested", False) is True and isinstance(getattr(value, "tensors", None), list)


def decoded_size(shape: list[int], family: LatentFamily) -> dict[str, int]:
    """Pixel size the latent decodes to if it is of `family`."""
    size = {"height": shape[-2] * family.spatial_factor, "width": shape[-1] * family.spatial_factor}
    if family.temporal_factor is not None and len(shape) == 5:
        size["frames"] = max(0, (shape[2] - 1) * family.temporal_factor + 1)
    return size


def analyse_samples(samples) -> tuple[dict, list[Finding]]:
    """Shape, kind, family and statistics of one samples tensor."""
    info = describe_tensor_bounded(samples)
    findings: list[Finding] = []
    shape = info["shape"]
    rank = len(shape)
    channels = shape[1] if rank >= 2 else None
    info["rank"] = rank
    info["kind"] = latent_kind(rank)
    info["batch_size"] = shape[0] if rank >= 1 else None
    info["channels"] = channels
    info["frames"] = shape[2] if rank == 5 else None
    families = guess_families(channels, rank) if rank in (4, 5) else []
    info["family"] = families[0].name if families else None
    info["family_alternatives"] = [f.name for f in families[1:]]
    info["decoded_size"] = decoded_size(shape, families[0]) if families else None

    if info["n_elements"] == 0:
        findings.append(
            Finding("error", f"The latent is empty (shape {shape}): nothing to sample or decode.", "empty")
        )
        return info, findings
    if rank not in (4, 5):
        findings.append(
            Finding(
                "warning" if rank < 3 else "info",
                f"Rank-{rank} latent {shape}: not an image [B,C,H,W] or video [B,C,T,H,W] latent.",
                "unusual_rank",
            )
        )
    elif not families:
        findings.append(
            Finding(
                "info",
                f"No known latent family has {channels} channels as a{'n image' if rank == 4 else ' video'} "
                "latent.",
                "unknown_family",
            )
        )
    n_nan, n_inf = info.get("n_nan") or 0, info.get("n_inf") or 0
    if n_nan or n_inf:
        findings.append(
            Finding(
                "error",
                f"The latent holds {n_nan} NaN and {n_inf} Inf values: decoding gives black or broken "
                "frames. Common causes: fp16 overflow in the model or VAE, or a bad upstream node.",
                "non_finite",
            )
        )
    elif info["stats_skipped"]:
        findings.append(
            Finding(
                "info",
                f"Statistics skipped: {info['n_elements']} elements is above the limit of "
                f"{STATS_MAX_ELEMENTS}.",
                "stats_skipped",
            )
        )
    elif info["min"] == 0 and info["max"] == 0:
        hint = (
            " EmptyLatentImage always makes 4 channels; the sampler widens it to the model's channels."
            if channels == 4 and rank == 4
            else ""
        )
        findings.append(Finding("info", "All values are zero: an empty latent." + hint, "all_zero"))
    return info, findings


def analyse_latent(latent, made_by: str | None = NOT_GIVEN) -> tuple[dict, dict, list[Finding]]:
    """(summary, details, findings) of a LATENT value: its samples (one tensor or the parts of a
    nested one), then the noise mask, batch index and other keys, then the summary. `made_by`: the
    class of the node that made it, where the step knows it."""
    findings: list[Finding] = []
    if not isinstance(latent, Mapping):
        findings.append(
            Finding(
                "error",
                f"Expected a LATENT (a dict with 'samples'), got {type(latent).__name__}.",
                "not_a_latent",
            )
        )
        summary = LatentSummary(latent_type=None, source_class=made_by)
        return summary.to_dict(), {"value_type": type(latent).__name__}, findings
    details: dict[str, Any] = {"keys": sorted(str(k) for k in latent)}
    if "type" in latent:
        details["latent_type"] = str(latent["type"])
    described = []
    for part in _sample_parts(latent.get("samples"), details, findings):
        info, part_findings = analyse_samples(part)
        described.append(info)
        findings.extend(part_findings)
    if described:
        details["samples"] = described[0] if len(described) == 1 else described
    findings.extend(_describe_noise_mask(latent.get("noise_mask"), details))
    findings.extend(_describe_batch_index(latent.get("batch_index"), details))
    extras = _describe_extras(latent)
    if extras:
        details["extras"] = extras
    summary = _summary(described, latent.get("noise_mask") is not None, details.get("nested"), made_by)
    return summary.to_dict(), details, findings


def _sample_parts(samples, details: dict, findings: list[Finding]) -> list:
    """The samples tensor, or the tensors of a nested one (details["nested"] says so)."""
    if is_nested(samples):
        details["nested"] = True
        return [t for t in samples.tensors if is_tensor(t)]
    if is_tensor(samples):
        return [samples]
    message = f"The LATENT has no samples tensor ('samples' is {type(samples).__name__})."
    findings.append(Finding("error", message, "no_samples"))
    return []


def _describe_noise_mask(mask, details: dict) -> list[Finding]:
    if mask is None:
        return []
    if is_tensor(mask):
        details["noise_mask"] = describe_tensor_bounded(mask)
        return []
    details["noise_mask"] = {"type": type(mask).__name__}
    return [Finding("warning", f"noise_mask is a {type(mask).__name__}, not a tensor.", "bad_noise_mask")]


def _describe_batch_index(batch_index, details: dict) -> list[Finding]:
    if batch_index is None:
        return []
    try:
        indices = [int(i) for i in batch_index]
    except (TypeError, ValueError):
        details["batch_index"] = str(batch_index)[:200]
        return [Finding("warning", "batch_index is not a list of integers.", "bad_batch_index")]
    details["batch_index"] = indices[:MAX_BATCH_INDEX_SHOWN]
    details["n_batch_index"] = len(indices)
    return []


def _describe_extras(latent: Mapping) -> dict:
    """The other keys of the LATENT: a tensor's shape and dtype, or the value's type."""
    extras = {}
    for key, value in latent.items():
        if key not in ("samples", "noise_mask", "batch_index", "type"):
            extras[str(key)] = (
                {"shape": [int(s) for s in value.shape], "dtype": str(value.dtype).replace("torch.", "")}
                if is_tensor(value)
                else type(value).__name__
            )
    return extras


def _summary(described: list[dict], has_noise_mask: bool, nested: bool | None, made_by) -> LatentSummary:
    """The first part's facts, sizes and NaN/Inf counts over all parts."""
    first = described[0] if described else {}
    return LatentSummary(
        latent_type=first.get("kind"),
        shape=first.get("shape"),
        family=first.get("family"),
        n_channels=first.get("channels"),
        n_frames=first.get("frames"),
        dtype=first.get("dtype"),
        device=first.get("device"),
        size_bytes=sum(d["bytes"] for d in described) if described else None,
        n_elements=sum(d["n_elements"] for d in described) if described else None,
        n_nan=sum_known(d.get("n_nan") for d in described),
        n_inf=sum_known(d.get("n_inf") for d in described),
        mean=first.get("mean"),
        std=first.get("std"),
        has_noise_mask=has_noise_mask,
        n_parts=len(described) if nested else None,
        source_class=made_by,
    )

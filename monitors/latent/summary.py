"""The `latent` step's summary: the record monitors/latent/ constructs, and its vocabulary (see
monitors/vocabulary/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..summary_fields import StepRecord, figure


@dataclass(frozen=True, kw_only=True)
class LatentSummary(StepRecord):
    """The `latent` step's summary."""

    latent_type: str | None = figure(
        "latent type",
        None,
        "image, video or other (from the rank)",
        headline=True,
    )
    shape: list | None = figure(
        "shape",
        None,
        "shape of the samples (the first part of a nested latent)",
        headline=True,
    )
    family: str | None = figure("latent family", None, "family guessed from channels and rank", headline=True)
    n_channels: int | None = figure("channels", "count", "latent channels", headline=True)
    n_frames: int | None = figure("frames", "count", "latent frames of a video latent", headline=True)
    dtype: str | None = figure("dtype", None, "dtype of the samples", headline=True)
    device: str | None = figure("device", None, "device of the samples", headline=True)
    size_bytes: int | None = figure("size", "bytes", "bytes of all parts", headline=True)
    n_nan: int | None = figure("NaN values", "count", "NaN values in all parts", headline=True)
    n_inf: int | None = figure("Inf values", "count", "infinite values in all parts", headline=True)
    mean: float | None = figure("mean", None, "mean of the values", headline=True)
    std: float | None = figure("standard deviation", None, "standard deviation of the values", headline=True)
    has_noise_mask: bool | None = figure("noise mask", None, "the latent carries a noise mask", headline=True)
    n_elements: int | None = figure("elements", "count", "elements of all parts")
    n_parts: int | None = figure("parts", "count", "tensors of a nested latent")
    source_class: str | None = figure("made by", None, "class of the node that made the latent")


LATENT = LatentSummary.vocabulary(
    "latent",
    "Latent",
    v1_renames={
        "kind": "latent_type",
        "channels": "n_channels",
    },
)

"""The `latent` step's summary fields: the one declaration (see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from ..summary_fields import StepKindVocabulary, SummaryField

LATENT = StepKindVocabulary(
    kind="latent",
    title="Latent",
    fields=(
        SummaryField(
            "latent_type",
            "latent type",
            None,
            "image, video or other (from the rank)",
            "string",
            headline=True,
        ),
        SummaryField(
            "shape",
            "shape",
            None,
            "shape of the samples (the first part of a nested latent)",
            "array",
            headline=True,
        ),
        SummaryField(
            "family", "latent family", None, "family guessed from channels and rank", "string", headline=True
        ),
        SummaryField("n_channels", "channels", "count", "latent channels", "integer", headline=True),
        SummaryField(
            "n_frames", "frames", "count", "latent frames of a video latent", "integer", headline=True
        ),
        SummaryField("dtype", "dtype", None, "dtype of the samples", "string", headline=True),
        SummaryField("device", "device", None, "device of the samples", "string", headline=True),
        SummaryField("size_bytes", "size", "bytes", "bytes of all parts", "integer", headline=True),
        SummaryField("n_nan", "NaN values", "count", "NaN values in all parts", "integer", headline=True),
        SummaryField(
            "n_inf", "Inf values", "count", "infinite values in all parts", "integer", headline=True
        ),
        SummaryField("mean", "mean", None, "mean of the values", "number", headline=True),
        SummaryField(
            "std", "standard deviation", None, "standard deviation of the values", "number", headline=True
        ),
        SummaryField(
            "has_noise_mask", "noise mask", None, "the latent carries a noise mask", "boolean", headline=True
        ),
        SummaryField("n_elements", "elements", "count", "elements of all parts", "integer"),
        SummaryField("n_parts", "parts", "count", "tensors of a nested latent", "integer"),
        SummaryField("source_class", "made by", None, "class of the node that made the latent", "string"),
    ),
    v1_renames={"kind": "latent_type", "channels": "n_channels"},
)

"""The `models` step's summary fields: the one declaration (see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from ..summary_fields import StepKindVocabulary, SummaryField, sided

INPUT_KINDS = ("model", "clip", "vae")

MODELS = StepKindVocabulary(
    kind="models",
    title="Models",
    fields=(
        SummaryField(
            "n_objects",
            "objects connected",
            "count",
            "MODEL / CLIP / VAE inputs described",
            "integer",
            headline=True,
        ),
        SummaryField(
            "total_size_bytes", "total size", "bytes", "sum of the weights' sizes", "integer", headline=True
        ),
        SummaryField(
            "loaders_duration_s",
            "loaders' time",
            "s",
            "time of the loader nodes (from the profile)",
            "number",
            headline=True,
        ),
        *sided(
            INPUT_KINDS,
            (
                SummaryField("class", "class", None, "the object's (inner model's) class", "string"),
                SummaryField("size_bytes", "size", "bytes", "size of its weights", "integer"),
            ),
            headline=tuple(f"{k}_{n}" for k in INPUT_KINDS for n in ("class", "size_bytes")),
        ),
        SummaryField(
            "model_config_class",
            "model config",
            None,
            "the model configuration ComfyUI detected (SD15, SD20, WAN21_T2V...): model_class alone is "
            "BaseModel for both SD1.5 and SD2.x",
            "string",
            headline=True,
        ),
        SummaryField(
            "process_rss_bytes",
            "process RSS",
            "bytes",
            "resident memory of the process at the step (the baseline)",
            "integer",
            process_wide=True,
        ),
    ),
)

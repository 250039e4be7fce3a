"""The `models` step's summary: the record monitors/models/report.py constructs, and its vocabulary
(see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..summary_fields import StepRecord, figure, side


@dataclass(frozen=True, kw_only=True)
class ModelsSide(StepRecord):
    """Each connected object's figures (model, clip, vae); an object not connected is left out."""

    class_: str | None = figure("class", None, "the object's (inner model's) class", name="class")
    size_bytes: int | None = figure("size", "bytes", "size of its weights")


@dataclass(frozen=True, kw_only=True)
class ModelsSummary(StepRecord):
    """The `models` step's summary."""

    n_objects: int | None = figure(
        "objects connected",
        "count",
        "MODEL / CLIP / VAE inputs described",
        headline=True,
    )
    total_size_bytes: int | None = figure("total size", "bytes", "sum of the weights' sizes", headline=True)
    loaders_duration_s: float | None = figure(
        "loaders' time",
        "s",
        "time of the loader nodes (from the profile)",
        headline=True,
    )
    model: ModelsSide | None = side(ModelsSide, headline=("class", "size_bytes"))
    clip: ModelsSide | None = side(ModelsSide, headline=("class", "size_bytes"))
    vae: ModelsSide | None = side(ModelsSide, headline=("class", "size_bytes"))
    model_config_class: str | None = figure(
        "model config",
        None,
        (
            "the model configuration ComfyUI detected (SD15, SD20, WAN21_T2V...): "
            "model_class alone is BaseModel for both SD1.5 and SD2.x"
        ),
        headline=True,
    )
    process_rss_bytes: int | None = figure(
        "process RSS",
        "bytes",
        "resident memory of the process at the step (the baseline)",
        process_wide=True,
    )


MODELS = ModelsSummary.vocabulary("models", "Models")

"""The `lora` step's summary: the record monitors/lora/report.py constructs, and its vocabulary
(see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..summary_fields import StepRecord, figure, side


@dataclass(frozen=True, kw_only=True)
class LoraSide(StepRecord):
    """Each side's figures (model, clip), from the side's analysis (monitors/lora/side.py)."""

    relative_change_ratio: float | None = figure(
        "weight change",
        "fraction",
        "norm of the weight change relative to the base weights' norm",
    )
    relative_change_partial: bool | None = figure(
        "weight change partial",
        None,
        (
            "true when the relative change covers fewer weights than were patched "
            "(weights without a base norm; each weight row says why): numerator and "
            "denominator always cover the same weights"
        ),
    )
    n_weights_relative_change: int | None = figure(
        "weights in the weight change",
        "count",
        (
            "patched weights the relative change covers (both a change norm and a base "
            "norm)"
        ),
    )
    n_patch_keys_added: int | None = figure(
        "patched weights",
        "count",
        "weights with patches added by the LoRA(s)",
    )
    n_hops: int | None = figure("patch hops", "count", "clone steps analysed (one per stacked loader)")
    delta_norm: float | None = figure(
        "change norm",
        None,
        (
            "Frobenius norm of the weight change: per weight the norm of the sum of its "
            "patches, patches ComfyUI does not apply count 0"
        ),
    )
    delta_norm_partial: bool | None = figure(
        "change norm partial",
        None,
        (
            "true when some patched weight has no change norm: the change norm and its "
            "ratio cover the other weights only"
        ),
    )
    n_patches_not_applied: int | None = figure(
        "patches not applied",
        "count",
        (
            "patches ComfyUI queues but never applies (shape mismatch, non-leaf module, "
            "buffer)"
        ),
    )
    patch_bytes: int | None = figure("patch size", "bytes", "memory held by the patches")
    n_state_dict_keys_before: int | None = figure(
        "state-dict keys before",
        "count",
        "keys in the base model's state dict (before the LoRA(s))",
    )
    n_state_dict_keys_after: int | None = figure(
        "state-dict keys after",
        "count",
        "keys in the state dict of the model the LoRA(s) give",
    )


@dataclass(frozen=True, kw_only=True)
class LoraSummary(StepRecord):
    """The `lora` step's summary."""

    success: bool | None = figure("applied", None, "patches found and no error-level finding", headline=True)
    n_loras: int | None = figure("LoRAs", "count", "LoRA loaders upstream of the monitor", headline=True)
    n_loras_skipped: int | None = figure(
        "LoRAs skipped",
        "count",
        "loaders with both strengths 0 or no file",
        headline=True,
    )
    n_unmatched_keys: int | None = figure(
        "unmatched keys",
        "count",
        "file keys ComfyUI's key map does not place on the model",
        headline=True,
    )
    n_matched_keys: int | None = figure(
        "matched keys",
        "count",
        "file keys placed on a weight",
        headline=True,
    )
    n_file_keys: int | None = figure("file keys", "count", "LoRA keys in the files", headline=True)
    model: LoraSide | None = side(LoraSide, headline=("relative_change_ratio", "n_patch_keys_added"))
    clip: LoraSide | None = side(LoraSide, headline=("relative_change_ratio", "n_patch_keys_added"))
    n_models_returned: int | None = figure(
        "models returned",
        "count",
        (
            "MODEL and CLIP objects the monitor hands on (its inputs; ids in "
            "details.returned)"
        ),
    )
    analysis_s: float | None = figure("analysis time", "s", "time the monitor took", headline=True)


LORA = LoraSummary.vocabulary(
    "lora",
    "LoRA",
    v1_renames={
        "model_relative_change": "model_relative_change_ratio",
        "clip_relative_change": "clip_relative_change_ratio",
    },
)

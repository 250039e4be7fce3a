"""The `lora` step's summary fields: the one declaration (see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from ..summary_fields import StepKindVocabulary, SummaryField, sided

SIDES = ("model", "clip")

# Each side's figures (model, clip): `source` is where monitors/lora/report.py takes each from, in
# the side's analysis (monitors/lora/side.py).
SIDE_FIELDS = (
    SummaryField(
        "relative_change_ratio",
        "weight change",
        "fraction",
        "norm of the weight change relative to the base weights' norm",
        "number",
        source="overall.totals.relative_change",
    ),
    SummaryField(
        "relative_change_partial",
        "weight change partial",
        None,
        "true when the relative change covers fewer weights than were patched (weights "
        "without a base norm; each weight row says why): numerator and denominator always "
        "cover the same weights",
        "boolean",
        source="overall.totals.relative_change_partial",
    ),
    SummaryField(
        "n_weights_relative_change",
        "weights in the weight change",
        "count",
        "patched weights the relative change covers (both a change norm and a base norm)",
        "integer",
        source="overall.totals.n_with_relative_change",
    ),
    SummaryField(
        "n_patch_keys_added",
        "patched weights",
        "count",
        "weights with patches added by the LoRA(s)",
        "integer",
        source="overall.totals.n_keys",
    ),
    SummaryField(
        "n_hops",
        "patch hops",
        "count",
        "clone steps analysed (one per stacked loader)",
        "integer",
        source="identity.n_hops",
    ),
    SummaryField(
        "delta_norm",
        "change norm",
        None,
        "Frobenius norm of the weight change: per weight the norm of the sum of its patches, "
        "patches ComfyUI does not apply count 0",
        "number",
        source="overall.totals.delta_norm",
    ),
    SummaryField(
        "delta_norm_partial",
        "change norm partial",
        None,
        "true when some patched weight has no change norm: the change norm and its ratio "
        "cover the other weights only",
        "boolean",
        source="overall.totals.delta_norm_partial",
    ),
    SummaryField(
        "n_patches_not_applied",
        "patches not applied",
        "count",
        "patches ComfyUI queues but never applies (shape mismatch, non-leaf module, buffer)",
        "integer",
        source="overall.totals.n_not_applied",
    ),
    SummaryField(
        "patch_bytes",
        "patch size",
        "bytes",
        "memory held by the patches",
        "integer",
        source="overall.totals.patch_bytes",
    ),
    SummaryField(
        "n_state_dict_keys_before",
        "state-dict keys before",
        "count",
        "keys in the base model's state dict (before the LoRA(s))",
        "integer",
        source="weight_modifications.n_state_dict_keys_before",
    ),
    SummaryField(
        "n_state_dict_keys_after",
        "state-dict keys after",
        "count",
        "keys in the state dict of the model the LoRA(s) give",
        "integer",
        source="weight_modifications.n_state_dict_keys_after",
    ),
)

LORA = StepKindVocabulary(
    kind="lora",
    title="LoRA",
    fields=(
        SummaryField(
            "success", "applied", None, "patches found and no error-level finding", "boolean", headline=True
        ),
        SummaryField(
            "n_loras", "LoRAs", "count", "LoRA loaders upstream of the monitor", "integer", headline=True
        ),
        SummaryField(
            "n_loras_skipped",
            "LoRAs skipped",
            "count",
            "loaders with both strengths 0 or no file",
            "integer",
            headline=True,
        ),
        SummaryField(
            "n_unmatched_keys",
            "unmatched keys",
            "count",
            "file keys ComfyUI's key map does not place on the model",
            "integer",
            headline=True,
        ),
        SummaryField(
            "n_matched_keys",
            "matched keys",
            "count",
            "file keys placed on a weight",
            "integer",
            headline=True,
        ),
        SummaryField("n_file_keys", "file keys", "count", "LoRA keys in the files", "integer", headline=True),
        *sided(
            SIDES,
            SIDE_FIELDS,
            headline=(
                "model_relative_change_ratio",
                "clip_relative_change_ratio",
                "model_n_patch_keys_added",
                "clip_n_patch_keys_added",
            ),
        ),
        SummaryField(
            "n_models_returned",
            "models returned",
            "count",
            "MODEL and CLIP objects the monitor hands on (its inputs; ids in details.returned)",
            "integer",
        ),
        SummaryField("analysis_s", "analysis time", "s", "time the monitor took", "number", headline=True),
    ),
    v1_renames={
        "model_relative_change": "model_relative_change_ratio",
        "clip_relative_change": "clip_relative_change_ratio",
    },
)

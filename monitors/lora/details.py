"""The `lora` step's details: the one declaration of their keys (see monitors/detail_fields.py).

Every key of `details` is declared; inside, the loaders' rows are declared whole and each side's
patch hops and weights with the figures the panel, the HTML report and the metrics reference read.
"""

from __future__ import annotations

from ..detail_fields import MEMORY_DETAILS, DetailGroup, details_of
from ..node_fields import NODE_ROW
from ..summary_fields import SummaryField as F

_FILE = DetailGroup(
    "file",
    "file",
    "the LoRA file as read from its safetensors header (no tensor loaded)",
    (
        F("name", "file", None, "the file name the loader names", "string"),
        F("path", "path", None, "where the file was found; null when not found", "string"),
        F("exists", "found", None, "whether the file was found", "boolean"),
        F("size_bytes", "file size", "bytes", "size of the file on disk", "integer"),
        F("n_tensors", "tensors", "count", "tensors in the file's header", "integer"),
        F("format", "format", None, "the key naming of the file (kohya, diffusers, peft...)", "string"),
        DetailGroup(
            "network",
            "network",
            "what the file's metadata says of its training (ss_* keys)",
            (
                F("base_model_name", "trained for", None, "the base model the LoRA was trained on", "string"),
                F("base_model", "base model", None, "the base model version the metadata names", "string"),
                F("module", "network", None, "the network module that trained it", "string"),
            ),
            open=True,
        ),
    ),
    open=True,
)
_COVERAGE = DetailGroup(
    "coverage",
    "coverage",
    "which file keys ComfyUI's key map places on the model's weights",
    (
        F(
            "computed",
            "coverage computed",
            None,
            "false when the key map could not be run (reason)",
            "boolean",
        ),
        F("n_file_keys", "file keys", "count", "LoRA keys in the file", "integer"),
        F("n_matched_keys", "matched keys", "count", "file keys placed on a weight", "integer"),
        F("n_unmatched_keys", "unmatched keys", "count", "file keys placed on no weight", "integer"),
        F("matched_pct", "matched", "pct", "matched keys over file keys", "number"),
        F("unmatched_keys", "unmatched key names", None, "the unmatched keys (first ones)", "array"),
        F(
            "unmatched_truncated",
            "unmatched names cut",
            None,
            "true when not every unmatched key is listed",
            "boolean",
        ),
    ),
    open=True,
)
_LOADER = DetailGroup(
    "loaders",
    "loaders",
    "the LoRA loader nodes upstream of the monitor, in graph order",
    (
        F("node_id", "loader node", None, "the loader's node id", "string"),
        F("class_type", "node class", None, "the loader's class", "string"),
        F("title", "title", None, "the loader's title in the workflow", "string"),
        F("lora_name", "LoRA", None, "the file the loader names", "string"),
        F("strength_model", "strength model", None, "strength on the model", "number"),
        F("strength_clip", "strength clip", None, "strength on the text encoder", "number"),
        F("has_clip_input", "has CLIP input", None, "whether the loader takes a CLIP", "boolean"),
        F("skipped", "skipped", None, "both strengths 0 or no file: the loader patches nothing", "boolean"),
        F("on_model_path", "on the model path", None, "the loader feeds the monitor's MODEL", "boolean"),
        F("on_clip_path", "on the CLIP path", None, "the loader feeds the monitor's CLIP", "boolean"),
        F("model_hop_index", "model hop", None, "index of its patch hop in details.model.hops", "integer"),
        F("clip_hop_index", "clip hop", None, "index of its patch hop in details.clip.hops", "integer"),
        F(
            "model_hop_consistent",
            "model hop consistent",
            None,
            "its hop patches what its file holds",
            "boolean",
        ),
        F(
            "clip_hop_consistent",
            "clip hop consistent",
            None,
            "its hop patches what its file holds",
            "boolean",
        ),
        _FILE,
        _COVERAGE,
        DetailGroup(
            "profile",
            "loader profile",
            "the loader's node row; null when it did not run",
            NODE_ROW.fields,
            same_as="nodes[]",
        ),
    ),
    repeated="list",
    nullable=False,
)
_TOTALS = DetailGroup(
    "totals",
    "totals",
    "the hop's figures summed over its patched weights",
    (
        F("n_keys", "patched weights", "count", "weights the hop patches", "integer"),
        F("ranks", "rank", None, "the ranks of its patches", "array"),
        F("alphas", "alpha", None, "the alphas of its patches", "array"),
        F(
            "n_not_applied",
            "patches not applied",
            "count",
            "patches ComfyUI queues but never applies",
            "integer",
        ),
        F(
            "relative_change",
            "weight change",
            "fraction",
            "change norm over the base weights' norm",
            "number",
        ),
        F("delta_norm", "change norm", None, "Frobenius norm of the weight change", "number"),
        F("patch_bytes", "patch size", "bytes", "memory held by the hop's patches", "integer"),
    ),
    open=True,
)
_WEIGHT = DetailGroup(
    "weights",
    "weight",
    "one row per patched weight, largest change first",
    (
        F("key", "weight", None, "the weight's state-dict key", "string"),
        F("relative_change", "change", "fraction", "change norm over the weight's norm", "number"),
        F("delta_norm", "change norm", None, "Frobenius norm of the weight's change", "number"),
        F("applied", "applied", None, "whether ComfyUI applies the weight's patches", "boolean"),
        F("shape_before", "original shape", None, "state-dict tensor shape in the base module", "array"),
        F("shape_after", "modified shape", None, "state-dict tensor shape in the module going out", "array"),
        F("n_patches", "patch count", "count", "len(patches[key]) of the patcher going out", "integer"),
    ),
    repeated="list",
    open=True,
)
_HOP = DetailGroup(
    "hops",
    "patch hop",
    "one clone step of the patcher (one per stacked loader)",
    (
        _TOTALS,
        F("by_block", "per block", None, "per model block: delta_norm and relative_change", "object"),
    ),
    repeated="list",
    open=True,
)


def _side(name: str, same_as: str | None = None) -> DetailGroup:
    return DetailGroup(
        name,
        f"{name} side",
        f"the {name.upper()} patches the loaders added, against the {name} before them; absent when not connected",
        (
            F("analysed", "analysed", None, "false when the side could not be analysed", "boolean"),
            _HOP,
            DetailGroup("overall", "overall", "the side's patches over all hops", (_WEIGHT,), open=True),
        ),
        open=True,
        same_as=same_as,
    )


_DEFERRED = DetailGroup(
    "deferred",
    "after the prompt",
    "the first analysis of a LoRA file on a model, finished after the prompt (monitors/engine/"
    "deferred_steps.py); absent when the step was made whole in the prompt",
    (
        F("job_id", "job", None, "the work after the prompt that finishes this step", "string"),
        F("in_prompt_s", "in the prompt", "s", "the step's time inside the prompt", "number"),
        F("after_prompt_s", "after the prompt", "s", "the analysis' time after the prompt; null while pending", "number"),
        F("started_unix_s", "started", "s", "when the work after the prompt started; null while pending", "number"),
        F("finished_unix_s", "finished", "s", "when the work after the prompt ended; null while pending", "number"),
    ),
    open=True,
)


LORA_DETAILS = details_of(
    "lora",
    (
        _LOADER,
        _side("model"),
        _side("clip", same_as="model"),
        DetailGroup(
            "returned",
            "returned",
            "the objects the node hands on",
            (
                F(
                    "model_object_id",
                    "MODEL returned",
                    None,
                    "id() of the MODEL the node hands on",
                    "integer",
                ),
                F("clip_object_id", "CLIP returned", None, "id() of the CLIP the node hands on", "integer"),
                F("n_models", "models returned", "count", "MODEL objects handed on", "integer"),
                F("unknown_reason", "returned unknown", None, "why the ids are null", "string"),
            ),
            nullable=False,
        ),
        F(
            "exceptions",
            "exceptions",
            None,
            "exceptions the analysis caught, with their traceback (bounded)",
            "array",
        ),
        F(
            "n_exceptions",
            "exceptions caught",
            "count",
            "exceptions the analysis caught, listed or not",
            "integer",
        ),
        _DEFERRED,
        *MEMORY_DETAILS,
    ),
    "what the LoRA monitor found: its loaders with their files and key coverage, each side's patch hops "
    "and weights, the objects handed on, and the memory over the loaders' spans",
)

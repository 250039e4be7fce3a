"""The `conditioning` step's details: the one declaration of their keys (see
monitors/detail_fields.py). Every key of `details` is declared; inside, each side, its entries and
its prompt texts with the figures the panel, the HTML report and the metrics reference read."""

from __future__ import annotations

from ..detail_fields import MEMORY_DETAILS, DetailGroup, details_of
from ..node_fields import NODE_ROW
from ..summary_fields import SummaryField as F

_TEXT = DetailGroup(
    "texts",
    "prompt texts",
    "the prompt texts found upstream of the encoder (traced through the graph)",
    (
        F("text", "prompt text", None, "the text (its first 2,000 characters)", "string"),
        F("text_truncated", "text cut", None, "true when the text is longer than what is kept", "boolean"),
        F("n_words", "words", "count", "words in the text", "integer"),
        F("n_characters", "characters", "count", "characters in the text", "integer"),
    ),
    repeated="list",
    open=True,
)
_ENCODER = DetailGroup(
    "encoders",
    "encoders",
    "the text encode nodes feeding the side",
    (
        F("node_id", "encoder node", None, "the encode node's id", "string"),
        F("class_type", "encoder class", None, "the encode node's class", "string"),
        _TEXT,
        DetailGroup(
            "profile",
            "encoder profile",
            "the encode node's row; null when it has none",
            NODE_ROW.fields,
            same_as="nodes[]",
        ),
    ),
    repeated="list",
    open=True,
)
_ENTRY = DetailGroup(
    "entries",
    "entries",
    "one row per conditioning entry (tensor and its extras)",
    (
        F("index", "#", None, "the entry's place in the conditioning list", "integer"),
        F("shape", "shape", None, "the entry tensor's shape", "array"),
        F("min", "min", None, "smallest value", "number"),
        F("max", "max", None, "largest value", "number"),
        F("mean", "mean", None, "mean value", "number"),
        F("std", "std", None, "standard deviation", "number"),
        F("n_nan", "NaN", "count", "NaN values", "integer"),
        F("n_inf", "Inf", "count", "infinite values", "integer"),
        F("n_elements", "conditioning elements", "count", "numel", "integer"),
    ),
    repeated="list",
    open=True,
)


def _side(name: str, same_as: str | None = None) -> DetailGroup:
    return DetailGroup(
        name,
        f"{name} side",
        f"the {name} conditioning: its entries, its encoders and their prompt texts",
        (
            F("connected", "connected", None, "false when nothing feeds the side", "boolean"),
            F("shape", "conditioning shape", None, "shape of the first entry", "array"),
            F("dtype", "conditioning dtype", None, "dtype of the first entry", "string"),
            F("device", "conditioning device", None, "device of the first entry", "string"),
            _ENTRY,
            _ENCODER,
        ),
        nullable=False,
        open=True,
        same_as=same_as,
    )


_ENCODE_ROW = DetailGroup(
    "encoders",
    "encode",
    "per encode node: its time and memory from its node row",
    (
        F("duration_s", "encoder time", "s", "its node row's time", "number"),
        F(
            "memory_above_start_bytes",
            "encoder memory added",
            "bytes",
            "GPU allocated peak above start, else RSS peak above start",
            "integer",
        ),
        F("rss_change_bytes", "encoder RSS change", "bytes", "its node row's RSS change", "integer"),
        F("peak_rss_at_s", "encoder RSS peak time", "s", "its node row's peak RSS time", "number"),
        F(
            "gpu_allocated_change_bytes",
            "encoder GPU allocated change",
            "bytes",
            "its node row's GPU change",
            "integer",
        ),
    ),
    repeated="list",
    open=True,
)

_OBJECT = "the object description (class, device, dtype, size, patches)"

CONDITIONING_DETAILS = details_of(
    "conditioning",
    (
        _side("positive"),
        _side("negative", same_as="positive"),
        F(
            "comparison",
            "comparison",
            None,
            "the two sides' figures side by side; null without both",
            "object",
        ),
        DetailGroup(
            "clip",
            "CLIP",
            f"the CLIP input: {_OBJECT}; null when not connected",
            (
                F("object_id", "CLIP id", None, "Python id() of the CLIP", "integer"),
                F("class", "CLIP class", None, "type name", "string"),
                F("device", "CLIP device", None, "module device", "string"),
                F("n_patches", "CLIP patch count", "count", "patches on its patcher", "integer"),
                F("patches_uuid", "CLIP patches UUID", None, "its patcher's patches UUID", "string"),
            ),
            open=True,
        ),
        DetailGroup(
            "encode",
            "encode",
            "the encode nodes' time and memory, and the memory budget",
            (
                F("total_s", "encode time (all)", "s", "sum over encode nodes", "number"),
                _ENCODE_ROW,
                DetailGroup(
                    "memory_budget",
                    "memory budget",
                    "the budget the monitor was given for the encode",
                    (F("budget_bytes", "memory budget", "bytes", "input", "integer"),),
                    open=True,
                ),
            ),
            nullable=False,
            open=True,
        ),
        DetailGroup(
            "diffusion_model",
            "diffusion model",
            "the MODEL input, when connected",
            (
                F("object_id", "diffusion model id", None, "MODEL input", "integer"),
                F("class", "diffusion model class", None, "MODEL input", "string"),
                F("device", "diffusion model device", None, "MODEL input", "string"),
            ),
            nullable=False,
            open=True,
        ),
        *MEMORY_DETAILS,
    ),
    "what the conditioning monitor found: each side's entries, encoders and prompt texts, their "
    "comparison, the CLIP and the MODEL, the encode nodes' cost and the memory over their spans",
)

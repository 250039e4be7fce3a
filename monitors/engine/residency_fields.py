"""The declaration of a run's `model_residency` object (monitors/engine/model_residency.py), in the
language of monitors/detail_fields.py: the schema's `model_residency` property, the panel's labels
and the metrics reference come from it."""

from __future__ import annotations

from ..detail_fields import DetailGroup
from ..summary_fields import SummaryField as F
from .model_residency import EVENT_KINDS

_SIZE = "ComfyUI's loaded_size()"

EVENT = DetailGroup(
    "events",
    "model events",
    "each load, unload and LoRA patch/unpatch of a model's weights, in order (at most 500)",
    (
        F(
            "kind",
            "what",
            None,
            "load_full / load_partial / load_dynamic, unload_full / unload_partial, "
            "patch / unpatch (LoRA weights)",
            "string",
            nullable=False,
            choices=EVENT_KINDS,
        ),
        F(
            "model_class",
            "model",
            None,
            "the class of the model's module (BaseModel, SDXL, AutoencoderKL...)",
            "string",
        ),
        F(
            "patcher_id",
            "patcher",
            None,
            "serial of the model patcher in this process (a LoRA clone has its own)",
            "integer",
        ),
        F(
            "model_id",
            "weights",
            None,
            "serial of the weights' module in this process (shared by clones)",
            "integer",
        ),
        F("device", "device", None, "the device the weights went to or left", "string"),
        F("duration_s", "duration", "s", "how long the model manager's call took", "number"),
        F(
            "bytes_moved",
            "bytes moved",
            "bytes",
            f"{_SIZE} after minus before, as a positive number",
            "integer",
        ),
        F("loaded_before_bytes", "loaded before", "bytes", f"{_SIZE} before the call", "integer"),
        F("loaded_after_bytes", "loaded after", "bytes", f"{_SIZE} after the call", "integer"),
        F("model_size_bytes", "model size", "bytes", "ComfyUI's model_size()", "integer"),
        F(
            "n_weights",
            "weights patched",
            "count",
            "LoRA weights patched or unpatched (lowvram patches included)",
            "integer",
        ),
        F(
            "reason",
            "why",
            None,
            "why, when the model manager says (memory for another model, an explicit free)",
            "string",
        ),
        F("loader_node_id", "loader node", None, "the node that made the model, when known", "string"),
        F("offset_s", "at", "s", "seconds after the prompt's start when the call began", "number"),
        F("node_id", "node", None, "the node running when it happened; null between nodes", "string"),
        F("node_class", "node class", None, "that node's class", "string"),
        F(
            "first_load",
            "first load",
            None,
            "a load of weights never loaded before in this process (from the loader)",
            "boolean",
        ),
        DetailGroup(
            "reloaded_after",
            "reloaded after",
            "a load of weights unloaded earlier: where that was",
            (
                F("prompt_id", "prompt", None, "the prompt of the unload", "string"),
                F("node_id", "node", None, "the node running at the unload", "string"),
                F("node_class", "node class", None, "its class", "string"),
                F("reason", "why", None, "why it was unloaded", "string"),
            ),
        ),
    ),
    repeated="list",
    nullable=False,
)

RESIDENT = DetailGroup(
    "resident_at_end",
    "resident at end",
    "the models the model manager held as the prompt ended; null when not read",
    (
        F("model_class", "model", None, "the class of the model's module", "string"),
        F("patcher_id", "patcher", None, "serial of the patcher", "integer"),
        F("model_id", "weights", None, "serial of the weights' module", "integer"),
        F("device", "device", None, "where it is loaded", "string"),
        F("loaded_bytes", "loaded", "bytes", _SIZE, "integer"),
        F("model_size_bytes", "model size", "bytes", "ComfyUI's model_size()", "integer"),
    ),
    repeated="list",
)

FINDING = DetailGroup(
    "findings",
    "model findings",
    "what moved weights and why: model_reloaded, lora_repatched, partial_load",
    (
        F("level", "level", None, "info, warning or error", "string", nullable=False),
        F("message", "message", None, "the finding", "string", nullable=False),
        F("code", "code", None, "model_reloaded, lora_repatched or partial_load", "string"),
    ),
    repeated="list",
    nullable=False,
)

MODEL_RESIDENCY = DetailGroup(
    "model_residency",
    "model residency",
    "loads, unloads and LoRA patches of model weights in this prompt, from ComfyUI's model manager "
    "(its loaded_size()/model_size() before and after); absent in older reports",
    (
        F(
            "n_loads",
            "model loads",
            "count",
            "loads that moved weights (a model asked for while fully loaded is counted as already resident)",
            "integer",
        ),
        F("n_unloads", "model unloads", "count", "full and partial unloads", "integer"),
        F(
            "n_models_first_loaded",
            "models loaded first time",
            "count",
            "models loaded for the first time in this process (their weights came from the loader)",
            "integer",
        ),
        F(
            "n_models_reloaded",
            "models reloaded",
            "count",
            "models loaded again after an earlier unload (from the offload device)",
            "integer",
        ),
        F(
            "n_models_already_resident",
            "models already resident",
            "count",
            "models a node asked for whose weights were loaded already",
            "integer",
        ),
        F("weights_loaded_bytes", "weights loaded", "bytes", "sum of the loads' bytes", "integer"),
        F("weights_unloaded_bytes", "weights unloaded", "bytes", "sum of the unloads' bytes", "integer"),
        F(
            "weights_moved_s",
            "time moving weights",
            "s",
            "seconds covered by the events (nested ones once)",
            "number",
        ),
        F(
            "weights_moved_pct",
            "share moving weights",
            "pct",
            "weights_moved_s over the prompt's wall time",
            "number",
        ),
        F(
            "n_events_dropped",
            "events dropped",
            "count",
            "events beyond the log's bound, counted only",
            "integer",
        ),
        EVENT,
        RESIDENT,
        FINDING,
    ),
)

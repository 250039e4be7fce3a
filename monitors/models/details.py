"""The `models` step's details: the one declaration of their keys (see monitors/detail_fields.py).
The objects' descriptions (monitors/models/state.py) and the loaders' rows are described elsewhere:
their groups are open."""

from __future__ import annotations

from ..detail_fields import MEMORY_DETAILS, DetailGroup, details_of
from ..node_fields import NODE_ROW
from ..summary_fields import SummaryField as F

MODELS_DETAILS = details_of(
    "models",
    (
        DetailGroup(
            "objects",
            "objects",
            "kind (model, clip, vae) -> the connected object described (monitors/models/state.py)",
            (
                F("class", "class", None, "the object's class", "string"),
                F("module_class", "inner class", None, "the inner model's class", "string"),
                F("config_class", "model config", None, "the model configuration ComfyUI detected", "string"),
                F("size_bytes", "size", "bytes", "size of its weights", "integer"),
                F("n_elements", "elements", "count", "elements of its weights", "integer"),
            ),
            repeated="map",
            nullable=False,
            open=True,
        ),
        DetailGroup(
            "loaders",
            "loaders",
            "kind -> the row of the node that produced that input",
            NODE_ROW.fields,
            repeated="map",
            nullable=False,
            same_as="nodes[]",
        ),
        F(
            "memory_baseline",
            "memory baseline",
            None,
            "the probes' snapshot at the step (monitors/probes): process, system and device memory",
            "object",
        ),
        *MEMORY_DETAILS,
    ),
    "what the models monitor found: each connected object, its loader's row, the memory baseline and "
    "the memory over the loaders' spans",
)

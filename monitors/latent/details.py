"""The `latent` step's details: the one declaration of their keys (see monitors/detail_fields.py)."""

from __future__ import annotations

from ..detail_fields import DetailGroup, details_of
from ..node_fields import NODE_ROW
from ..summary_fields import SummaryField as F

_TENSOR = "a tensor described (monitors/latent/analysis.py analyse_samples): shape, dtype, device, statistics"

LATENT_DETAILS = details_of(
    "latent",
    (
        F("value_type", "value type", None, "the type of a value that is not a LATENT", "string"),
        F("keys", "keys", None, "the keys of the LATENT dict", "array"),
        F("latent_type", "latent type", None, "the LATENT's own `type` key", "string"),
        F("nested", "nested", None, "true for a nested latent (its parts in samples)", "boolean"),
        F("samples", "samples", None, f"{_TENSOR}; a list of them for a nested latent", ("object", "array")),
        F("noise_mask", "noise mask", None, _TENSOR, "object"),
        F(
            "batch_index",
            "batch index",
            None,
            "the batch indices (the first ones), or the value's text when it is no list",
            ("array", "string"),
        ),
        F("n_batch_index", "batch indices", "count", "batch indices in the LATENT", "integer"),
        F("extras", "other keys", None, "other keys of the LATENT, described", "object"),
        DetailGroup(
            "source",
            "made by",
            "the row of the node that made the latent",
            NODE_ROW.fields,
            same_as="nodes[]",
        ),
    ),
    "what the latent monitor found: the samples, the noise mask, the batch index, other keys and the "
    "node that made it",
)

"""The `conditioning` step's summary fields: the one declaration (see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from ..summary_fields import StepKindVocabulary, SummaryField, sided

SIDES = ("positive", "negative")

# per side: (summary name without the side, key of the side's analysis it is read from)
SIDE_SOURCES = (
    ("family", None),  # from the side's family guess, not a plain key
    ("n_entries", "n_entries"),
    ("n_tokens", "n_tokens"),
    ("hidden_size", "hidden_size"),
    ("pooled_size", "pooled_size"),
    ("bytes", "total_bytes"),
    ("n_nan", "n_nan"),
    ("n_characters", "n_characters"),
    ("n_words", "n_words"),
    ("n_special_characters", "n_special_characters"),
    ("encode_s", "encode_duration_s"),
    ("characters_per_s", "characters_per_s"),
    ("bytes_per_character", "bytes_per_character"),
)

CONDITIONING = StepKindVocabulary(
    kind="conditioning",
    title="Conditioning",
    fields=(
        SummaryField(
            "family",
            "encoder family",
            None,
            "text encoder family of the positive side",
            "string",
            headline=True,
        ),
        SummaryField(
            "encoder_class",
            "encoder class",
            None,
            "class of the connected CLIP's encoder",
            "string",
            headline=True,
        ),
        SummaryField(
            "negative_connected",
            "negative connected",
            None,
            "a negative conditioning is connected",
            "boolean",
            headline=True,
        ),
        SummaryField(
            "hidden_size_match",
            "hidden sizes match",
            None,
            "positive and negative hidden sizes agree",
            "boolean",
            headline=True,
        ),
        SummaryField("clip_n_patches", "CLIP patches", "count", "patches on the connected CLIP", "integer"),
        SummaryField(
            "encode_total_s",
            "encode time (all)",
            "s",
            "time of every text encode node of the prompt together",
            "number",
            headline=True,
        ),
        SummaryField(
            "encode_peak_gpu_allocated_above_start_bytes",
            "encode GPU memory",
            "bytes",
            "most GPU memory (torch allocated) one encode node added above its start; null without a GPU",
            "integer",
        ),
        SummaryField(
            "encode_peak_rss_above_start_bytes",
            "encode RAM",
            "bytes",
            "most process RSS one encode node added above its start",
            "integer",
        ),
        SummaryField(
            "memory_budget_bytes", "memory budget", "bytes", "memory one encode node may add", "integer"
        ),
        SummaryField(
            "memory_budget_exceeded",
            "over budget",
            None,
            "an encode node added more than the memory budget",
            "boolean",
        ),
        SummaryField(
            "model_class", "diffusion model", None, "class of the MODEL connected at encode time", "string"
        ),
        SummaryField(
            "model_device", "model device", None, "device of the diffusion model at encode time", "string"
        ),
        *sided(
            SIDES,
            (
                SummaryField(
                    "family", "family", None, "encoder family guessed from the CLIP or the shapes", "string"
                ),
                SummaryField("n_entries", "entries", "count", "conditioning entries", "integer"),
                SummaryField("n_tokens", "tokens", "count", "tokens of the first entry", "integer"),
                SummaryField("hidden_size", "hidden size", None, "hidden size of the embeddings", "integer"),
                SummaryField("pooled_size", "pooled size", None, "size of the pooled output", "integer"),
                SummaryField("bytes", "size", "bytes", "bytes of all its tensors", "integer"),
                SummaryField("n_nan", "NaN values", "count", "NaN values in its tensors", "integer"),
                SummaryField(
                    "n_characters", "characters", "count", "characters of the prompt text", "integer"
                ),
                SummaryField("n_words", "words", "count", "words of the prompt text", "integer"),
                SummaryField(
                    "n_special_characters",
                    "special characters",
                    "count",
                    "special characters of the prompt text",
                    "integer",
                ),
                SummaryField("encode_s", "encode time", "s", "time of the text encode node(s)", "number"),
                SummaryField(
                    "characters_per_s",
                    "characters per second",
                    "per_s",
                    "characters of the prompt text encoded per second",
                    "number",
                ),
                SummaryField(
                    "bytes_per_character",
                    "bytes per character",
                    None,
                    "tensor bytes per prompt character",
                    "number",
                ),
            ),
            headline=(
                "positive_n_tokens",
                "positive_hidden_size",
                "positive_pooled_size",
                "positive_encode_s",
                "positive_n_nan",
            ),
        ),
    ),
)

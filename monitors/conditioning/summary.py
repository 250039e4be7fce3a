"""The `conditioning` step's summary: the record monitors/conditioning/analysis.py constructs, and
its vocabulary (see monitors/vocabulary/registry.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ..summary_fields import StepRecord, figure, side


@dataclass(frozen=True, kw_only=True)
class ConditioningSide(StepRecord):
    """Each side's figures (positive, negative), from the side's description (describe_side)."""

    family: str | None = figure("family", None, "encoder family guessed from the CLIP or the shapes")
    n_entries: int | None = figure("entries", "count", "conditioning entries")
    n_tokens: int | None = figure("tokens", "count", "tokens of the first entry")
    hidden_size: int | None = figure("hidden size", None, "hidden size of the embeddings")
    pooled_size: int | None = figure("pooled size", None, "size of the pooled output")
    bytes: int | None = figure("size", "bytes", "bytes of all its tensors")
    n_nan: int | None = figure("NaN values", "count", "NaN values in its tensors")
    n_characters: int | None = figure("characters", "count", "characters of the prompt text")
    n_words: int | None = figure("words", "count", "words of the prompt text")
    n_special_characters: int | None = figure(
        "special characters",
        "count",
        "special characters of the prompt text",
    )
    encode_s: float | None = figure("encode time", "s", "time of the text encode node(s)")
    characters_per_s: float | None = figure(
        "characters per second",
        "per_s",
        "characters of the prompt text encoded per second",
    )
    bytes_per_character: float | None = figure(
        "bytes per character",
        None,
        "tensor bytes per prompt character",
    )


@dataclass(frozen=True, kw_only=True)
class ConditioningSummary(StepRecord):
    """The `conditioning` step's summary."""

    family: str | None = figure(
        "encoder family",
        None,
        "text encoder family of the positive side",
        headline=True,
    )
    encoder_class: str | None = figure(
        "encoder class",
        None,
        "class of the connected CLIP's encoder",
        headline=True,
    )
    negative_connected: bool | None = figure(
        "negative connected",
        None,
        "a negative conditioning is connected",
        headline=True,
    )
    hidden_size_match: bool | None = figure(
        "hidden sizes match",
        None,
        "positive and negative hidden sizes agree",
        headline=True,
    )
    clip_n_patches: int | None = figure("CLIP patches", "count", "patches on the connected CLIP")
    encode_total_s: float | None = figure(
        "encode time (all)",
        "s",
        "time of every text encode node of the prompt together",
        headline=True,
    )
    encode_peak_gpu_allocated_above_start_bytes: int | None = figure(
        "encode GPU memory",
        "bytes",
        (
            "most GPU memory (torch allocated) one encode node added above its start; "
            "null without a GPU"
        ),
    )
    encode_peak_rss_above_start_bytes: int | None = figure(
        "encode RAM",
        "bytes",
        "most process RSS one encode node added above its start",
    )
    memory_budget_bytes: int | None = figure("memory budget", "bytes", "memory one encode node may add")
    memory_budget_exceeded: bool | None = figure(
        "over budget",
        None,
        "an encode node added more than the memory budget",
    )
    model_class: str | None = figure("diffusion model", None, "class of the MODEL connected at encode time")
    model_device: str | None = figure("model device", None, "device of the diffusion model at encode time")
    positive: ConditioningSide | None = side(
        ConditioningSide, headline=("n_tokens", "hidden_size", "pooled_size", "n_nan", "encode_s")
    )
    negative: ConditioningSide | None = side(ConditioningSide)


CONDITIONING = ConditioningSummary.vocabulary("conditioning", "Conditioning")

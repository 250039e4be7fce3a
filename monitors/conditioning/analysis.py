"""What a text encoder produced: CONDITIONING entries, encoder family, prompt text, cost, checks.

CONDITIONING is a list of [cond, extras] pairs: cond a [batch, tokens, hidden] tensor, extras a
dict with `pooled_output` (tensor or None) and family- or node-specific keys. This module reads
them by duck typing and returns plain data only: no tensor, model or CLIP is referenced by the
report it builds. Anything malformed becomes a finding, never an exception.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ..models.state import describe_clip
from ..numeric.batch_stats import stats_read_back_once
from ..numeric.describe import STATS_MAX_ELEMENTS
from ..report import Finding, StepReport
from .details import CONDITIONING_DETAILS
from .encode_cost import describe_diffusion_model, describe_encode
from .entry import (  # noqa: F401 (MAX_EXTRAS is imported from here)
    MAX_EXTRAS,
    describe_cond,
    describe_extras,
    describe_pooled,
    is_tensor,
    stats_tensors,
)
from .family import families_from_encoder_class, family_from_shape, identify_family, remember_family
from .prompt_text import attach_texts
from .summary import ConditioningSide, ConditioningSummary

SIDES = ("positive", "negative")
MAX_ENTRIES = 64  # entries described per side; the count of the rest is reported
MAX_FINDINGS = 50


class _Findings:
    """Findings in order, at most MAX_FINDINGS; the rest are counted."""

    def __init__(self):
        self.items: list[Finding] = []
        self.n_dropped = 0

    def add(self, level: str, message: str, code: str) -> None:
        if len(self.items) < MAX_FINDINGS:
            self.items.append(Finding(level, message, code))
        else:
            self.n_dropped += 1


def describe_entry(
    index: int, entry, encoder_families: tuple[str, ...], where: str, findings: _Findings
) -> dict:
    """One [cond, extras] pair: tensor facts, statistics, pooled output, extras, family."""
    info: dict = {"index": index, "valid": False, "entry_type": type(entry).__name__}
    if not isinstance(entry, (list, tuple)) or len(entry) != 2:
        findings.add(
            "error",
            f"{where}: entry {index} is a {type(entry).__name__}, not a [tensor, dict] pair",
            "entry_not_pair",
        )
        return info
    cond, extras = entry
    if not is_tensor(cond):
        findings.add(
            "error", f"{where}: entry {index} holds a {type(cond).__name__}, not a tensor", "cond_not_tensor"
        )
        return info
    label = f"{where}: entry {index}"
    stats = describe_cond(cond, info, label, findings)
    if not isinstance(extras, Mapping):
        findings.add("error", f"{label} extras are a {type(extras).__name__}, not a dict", "extras_not_dict")
        extras = {}
    describe_pooled(extras.get("pooled_output"), info, label, findings)
    extra_keys = describe_extras(extras, info, label, findings)
    mask = extras.get("attention_mask")
    countable = is_tensor(mask) and 0 < mask.numel() <= STATS_MAX_ELEMENTS and str(mask.device) != "meta"
    info["n_attended_tokens"] = int((mask != 0).sum()) if countable else None
    info["total_bytes"] = (
        stats["bytes"]
        + (info["pooled"]["bytes"] if info["pooled"] else 0)
        + sum(e.get("bytes") or 0 for e in info["extras"].values())
    )
    shape_family = family_from_shape(info["hidden_size"], info["pooled_size"], info["n_tokens"], extra_keys)
    info["family"] = identify_family(shape_family, encoder_families)
    remember_family(cond, info["family"])
    return info


def describe_side(conditioning, where: str, encoder_families: tuple[str, ...], findings: _Findings) -> dict:
    """All entries of one CONDITIONING input and the figures of its first valid entry."""
    side: dict = {"connected": True, "type": type(conditioning).__name__, "n_entries": None, "entries": []}
    if not isinstance(conditioning, (list, tuple)):
        findings.add(
            "error", f"{where}: got a {type(conditioning).__name__}, not a CONDITIONING list", "not_a_list"
        )
    elif not conditioning:
        findings.add("error", f"{where}: the CONDITIONING list is empty (no entries)", "no_entries")
        side["n_entries"] = 0
    else:
        side["n_entries"] = len(conditioning)
        for index, entry in enumerate(conditioning[:MAX_ENTRIES]):
            side["entries"].append(describe_entry(index, entry, encoder_families, where, findings))
        if len(conditioning) > MAX_ENTRIES:
            findings.add(
                "info",
                f"{where}: {len(conditioning)} entries, the first {MAX_ENTRIES} are described",
                "many_entries",
            )
    valid = [e for e in side["entries"] if e["valid"]]
    first = valid[0] if valid else {}
    side["valid"] = bool(valid) and len(valid) == len(side["entries"])
    for key in ("n_tokens", "hidden_size", "pooled_size", "pooled_shape", "shape", "dtype", "device"):
        side[key] = first.get(key)
    side["family"] = first.get("family")
    side["total_bytes"] = sum(e["total_bytes"] for e in valid) if valid else None
    nan_counts = [e["n_nan"] for e in valid]  # None where statistics were skipped
    side["n_nan"] = sum(nan_counts) if valid and None not in nan_counts else None
    hidden_sizes = sorted({e["hidden_size"] for e in valid if e["hidden_size"] is not None})
    if len(hidden_sizes) > 1:
        findings.add(
            "warning", f"{where}: entries have different hidden sizes {hidden_sizes}", "mixed_hidden_sizes"
        )
    return side


COMPARED = (
    "n_entries",
    "n_tokens",
    "hidden_size",
    "pooled_size",
    "total_bytes",
    "n_characters",
    "encode_duration_s",
)


def compare_sides(positive: dict, negative: dict, findings: _Findings) -> dict:
    """Positive and negative side by side, and the mismatches a sampler would trip over."""
    comparison = {key: [positive.get(key), negative.get(key)] for key in COMPARED}
    families = [(s.get("family") or {}).get("family") for s in (positive, negative)]
    comparison["family"] = families
    p_hidden, n_hidden = comparison["hidden_size"]
    comparison["hidden_size_match"] = None if None in (p_hidden, n_hidden) else p_hidden == n_hidden
    if comparison["hidden_size_match"] is False:
        findings.add(
            "error",
            f"positive and negative have different hidden sizes ({p_hidden} vs {n_hidden}): they come from "
            "different text encoders and sampling will fail",
            "hidden_mismatch",
        )
    p_pooled, n_pooled = comparison["pooled_size"]
    both_valid = positive.get("valid") and negative.get("valid")
    comparison["pooled_match"] = p_pooled == n_pooled if both_valid else None
    if both_valid and p_pooled != n_pooled:
        one_missing = None in (p_pooled, n_pooled)
        findings.add(
            "warning" if one_missing else "error",
            f"pooled outputs differ: positive {p_pooled}, negative {n_pooled}"
            + (" (one side has none)" if one_missing else ": different text encoders"),
            "pooled_mismatch",
        )
    if both_valid and comparison["hidden_size_match"] and None not in families and families[0] != families[1]:
        findings.add(
            "warning", f"positive looks like {families[0]}, negative like {families[1]}", "family_mismatch"
        )
    p_texts = [t.get("text") for e in positive.get("encoders", []) for t in e.get("texts", [])]
    n_texts = [t.get("text") for e in negative.get("encoders", []) for t in e.get("texts", [])]
    comparison["same_text"] = p_texts == n_texts if p_texts and None not in p_texts + n_texts else None
    if comparison["same_text"] and any((t or "").strip() for t in p_texts):
        findings.add(
            "warning",
            "positive and negative prompts are identical: guidance has nothing to push against",
            "same_prompt",
        )
    return comparison


def describe_clip_input(clip, findings: _Findings, errors: list) -> tuple[dict | None, tuple[str, ...]]:
    if clip is None:
        findings.add(
            "info",
            "no CLIP connected: the encoder family is identified from the tensor shapes only",
            "no_clip",
        )
        return None, ()
    module = getattr(clip, "cond_stage_model", None)
    if module is None:
        findings.add(
            "warning",
            f"the clip input is a {type(clip).__name__} without a text encoder, not a CLIP",
            "clip_not_a_clip",
        )
    try:
        info = describe_clip(clip)
    except Exception as exc:
        errors.append(f"clip: {type(exc).__name__}: {exc}")
        info = {"class": type(clip).__name__}
    families = families_from_encoder_class(module) if module is not None else ()
    info["encoder_class"] = None if module is None else type(module).__name__
    info["families"] = list(families)
    return info, families


def analyse_conditioning(
    node_id,
    positive,
    negative=None,
    clip=None,
    traces: Mapping | None = None,
    *,
    model=None,
    memory_budget_bytes: int | None = None,
) -> StepReport:
    """The `conditioning` step: both sides, their texts and cost, the CLIP, and the checks.

    `traces` maps "positive"/"negative" to prompt_text.trace_text_encoders() results whose
    encoders may carry a "profile" (the encode node's per-node profile row). `model` is the
    diffusion model as it was at encode time (optional); `memory_budget_bytes` (0 or None: no
    check) is what one encode node may add before a finding says so.
    """
    findings, errors = _Findings(), []
    clip_info, families = describe_clip_input(clip, findings, errors)
    sides = describe_sides(positive, negative, traces, clip_info, families, findings)
    comparison = (
        compare_sides(sides["positive"], sides["negative"], findings)
        if sides["negative"]["connected"]
        else None
    )
    connected = {where: side for where, side in sides.items() if side.get("connected")}
    encode, budget_findings = describe_encode(connected, memory_budget_bytes)
    for level, message, code in budget_findings:
        findings.add(level, message, code)
    diffusion_model = describe_diffusion_model(model)
    if findings.n_dropped:
        errors.append(f"{findings.n_dropped} more finding(s) dropped (limit {MAX_FINDINGS})")
    summary = summarise(sides, clip_info, comparison, encode, diffusion_model)
    return StepReport(
        kind="conditioning",
        node_id=None if node_id is None else str(node_id),
        summary=summary.to_dict(),
        details=CONDITIONING_DETAILS.build(
            positive=sides["positive"],
            negative=sides["negative"],
            comparison=comparison,
            clip=clip_info,
            encode=encode,
            diffusion_model=diffusion_model,
        ),
        findings=tuple(findings.items),
        monitor_errors=tuple(errors),
        created_unix_s=time.time(),
    )


def describe_sides(
    positive, negative, traces: Mapping | None, clip_info: dict | None, families: tuple[str, ...], findings
) -> dict:
    """where -> the side described with its texts; a negative left unconnected is {"connected": False}.
    The statistics of both sides' tensors are read back at once (numeric/batch_stats.py)."""
    sides: dict = {}
    with stats_read_back_once(stats_tensors((positive, negative), MAX_ENTRIES), STATS_MAX_ELEMENTS):
        for where, conditioning in (("positive", positive), ("negative", negative)):
            if where == "negative" and conditioning is None:
                sides[where] = {"connected": False}
                continue
            side = describe_side(conditioning, where, families, findings)
            attach_texts(side, (traces or {}).get(where), where, findings.add)
            sides[where] = side
            _family_findings(where, side.get("family") or {}, clip_info, families, findings)
    return sides


def _family_findings(
    where: str, family: dict, clip_info: dict | None, families: tuple[str, ...], findings
) -> None:
    """A family no text encoder matches, and a side that does not look like the connected CLIP's."""
    if family.get("confidence") == "unknown":
        findings.add("info", f"{where}: {family['family']} matches no known text encoder", "unknown_family")
    shape_family = family.get("shape_family")
    if families and shape_family and not shape_family.startswith("unknown") and shape_family not in families:
        findings.add(
            "warning",
            f"{where}: the conditioning looks like {shape_family} but the CLIP connected is "
            f"{clip_info.get('encoder_class')} ({' / '.join(families)}): connect the CLIP that encoded it",
            "clip_family_mismatch",
        )


def summarise(
    sides: dict, clip_info: dict | None, comparison: dict | None, encode: dict, diffusion_model: dict
) -> ConditioningSummary:
    """The step's summary: the encoder, each side's figures, what the text encode nodes cost and the
    diffusion model as it was at encode time."""
    return ConditioningSummary(
        family=(sides["positive"].get("family") or {}).get("family"),
        encoder_class=None if clip_info is None else clip_info.get("encoder_class"),
        clip_n_patches=None if clip_info is None else clip_info.get("n_patches"),
        negative_connected=sides["negative"]["connected"],
        hidden_size_match=None if comparison is None else comparison["hidden_size_match"],
        encode_total_s=encode["total_s"],
        encode_peak_gpu_allocated_above_start_bytes=encode["peak_gpu_allocated_above_start_bytes"],
        encode_peak_rss_above_start_bytes=encode["peak_rss_above_start_bytes"],
        memory_budget_bytes=encode["memory_budget"]["budget_bytes"],
        memory_budget_exceeded=encode["memory_budget"]["exceeded"],
        model_class=diffusion_model["class"],
        model_device=diffusion_model["device"],
        positive=_side_figures(sides["positive"]),
        negative=_side_figures(sides["negative"]),
    )


def _side_figures(side: dict) -> ConditioningSide:
    """A side's figures from its description (an unconnected negative: all None)."""
    return ConditioningSide(
        family=(side.get("family") or {}).get("family"),
        n_entries=side.get("n_entries"),
        n_tokens=side.get("n_tokens"),
        hidden_size=side.get("hidden_size"),
        pooled_size=side.get("pooled_size"),
        bytes=side.get("total_bytes"),
        n_nan=side.get("n_nan"),
        n_characters=side.get("n_characters"),
        n_words=side.get("n_words"),
        n_special_characters=side.get("n_special_characters"),
        encode_s=side.get("encode_duration_s"),
        characters_per_s=side.get("characters_per_s"),
        bytes_per_character=side.get("bytes_per_character"),
    )

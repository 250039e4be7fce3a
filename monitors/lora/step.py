"""The `lora` step made from its parts: what the prompt read of the loaders (LoraParts) and the
sides analysed (in the prompt, or after it: after_prompt.py), with the step's findings and its summary
record. report.py gathers the parts; this file and after_prompt.py make the step from them.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass

from ..report import MAX_TRACEBACK_CHARS, Finding, StepReport, sum_known
from .caches import file_identity
from .coverage import attribute_hops, loader_findings
from .details import LORA_DETAILS
from .side import analyse_side
from .summary import LoraSide, LoraSummary

log = logging.getLogger(__name__)

STEP_KIND = "lora"
MAX_EXCEPTIONS = 5  # with their tracebacks, so that one broken LoRA stack cannot bloat the report


def caught_exception(where: str, exc: BaseException) -> dict:
    """An exception the analysis caught, with its traceback (the last MAX_TRACEBACK_CHARS) as text:
    the traceback object itself would keep the frames' patchers and tensors alive."""
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return {
        "where": where,
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": trace[-MAX_TRACEBACK_CHARS:],
        "traceback_truncated": len(trace) > MAX_TRACEBACK_CHARS,
    }


def _attach_attribution(side: dict | None, loaders: list[dict], path: str, strength_field: str) -> bool:
    """Link hops and loaders of one side; False when they could not be paired."""
    if not side or not side.get("analysed") or side["mode"] != "parent_chain":
        return True
    on_path = [loader for loader in loaders if loader[f"on_{path}_path"]]
    pairs = attribute_hops(side["hops"], on_path, strength_field)
    by_id = {loader["node_id"]: loader for loader in loaders}
    for pair in pairs:
        side["hops"][pair["hop_index"]]["loader_node_id"] = pair["loader_node_id"]
        by_id[pair["loader_node_id"]][f"{path}_hop_index"] = pair["hop_index"]
        by_id[pair["loader_node_id"]][f"{path}_hop_consistent"] = pair["consistent"]
    return bool(pairs) or not any(not loader["skipped"] for loader in on_path)


def _side_findings(kind: str, side: dict | None) -> list[Finding]:
    if side is None:
        return []
    if not side.get("analysed"):
        return [Finding("warning", f"{kind}: not analysed: {side.get('reason')}", "lora_not_a_patcher")]
    totals = side["overall"]["totals"]
    findings = []
    rows = [row for hop in side["hops"] for row in hop["keys"]]
    mismatched = [row for row in rows if row.get("shape_mismatch")]
    if mismatched:
        examples = "; ".join(f"{row['key']}: {row['shape_mismatch']}" for row in mismatched[:5])
        findings.append(
            Finding(
                "error",
                f"{kind}: {totals['n_shape_mismatches']} patches do not fit the shape of the model's weights "
                f"and ComfyUI leaves those weights unchanged: this LoRA is for a different model size "
                f"({examples})",
                "lora_shape_mismatch",
            )
        )
    skipped = [row for row in rows if row.get("applied") is False and not row.get("shape_mismatch")]
    if skipped:
        reasons = "; ".join(sorted({f"{row['key']}: {row['not_applied_reason']}" for row in skipped[:5]}))
        findings.append(
            Finding(
                "warning",
                f"{kind}: {len(skipped)} patches are queued but ComfyUI never applies them ({reasons})",
                "lora_patches_not_applied",
            )
        )
    if totals.get("relative_change_partial") and totals.get("reasons_without_base_norm"):
        # (weights without a change norm have their own finding below)
        reasons = "; ".join(f"{n} x {why}" for why, n in totals["reasons_without_base_norm"].items())
        findings.append(
            Finding(
                "info",
                f"{kind}: the relative change covers {totals['n_with_relative_change']} of "
                f"{totals['n_weights']} patched weights, change and base norms over the same ones "
                f"({reasons})",
                "lora_relative_change_partial",
            )
        )
    if totals["delta_norm_partial"]:
        reasons = "; ".join(f"{n} x {why}" for why, n in totals["reasons_without_norm"].items())
        findings.append(
            Finding(
                "info",
                f"{kind}: the change norm total is partial: {totals['n_weights_without_delta_norm']} weights "
                f"have no norm ({reasons})",
                "lora_norm_unavailable",
            )
        )
    return findings


def _applied(side: dict | None) -> bool:
    """Some patch with a non-zero strength that ComfyUI really applies."""
    if not side or not side.get("analysed"):
        return False
    return any(
        row.get("applied", True) and row["strength"] not in (None, 0.0)
        for hop in side["hops"]
        for row in hop["keys"]
    )


def loader_files(loaders: list[dict], kind: str) -> list[tuple]:
    """(file identity or None, strength) of the active loaders on one path, nearest first: what
    lets a side reuse the figures of a file it analysed before (caches.py)."""
    strength_field = "strength_model" if kind == "model" else "strength_clip"
    found = []
    for loader in loaders:
        if not loader[f"on_{kind}_path"] or loader["skipped"]:
            continue
        status = loader.get("file") or {}
        usable = status.get("exists") and status.get("header_ok") and status.get("data_ok") is not False
        found.append((file_identity(status.get("path")) if usable else None, loader.get(strength_field)))
    return found


@dataclass
class LoraParts:
    """What the step reads in the prompt whether its sides are analysed then or after it."""

    node_id: str | None
    clip: object
    loaders: list[dict]
    loader_errors: list[str]
    loader_exceptions: list[dict]
    returned_ids: dict
    memory: dict


def finish_step(
    parts: LoraParts, sides: dict, errors: list, exceptions: list, findings: list, analysis_s: float,
    deferred: dict | None = None,
) -> StepReport:
    """The step from its analysed sides (the loaders' errors listed after the sides')."""
    errors, exceptions = [*errors, *parts.loader_errors], [*exceptions, *parts.loader_exceptions]
    findings = [*findings, *_step_findings(parts.loaders, sides, parts.clip)]
    summary = step_summary(parts.loaders, sides, findings, parts.returned_ids, analysis_s)
    return StepReport(
        kind=STEP_KIND,
        node_id=parts.node_id,
        summary=summary.to_dict(),
        details=LORA_DETAILS.build(
            loaders=parts.loaders,
            **sides,
            returned=parts.returned_ids,
            exceptions=exceptions[:MAX_EXCEPTIONS],
            n_exceptions=len(exceptions),
            **({"deferred": deferred} if deferred is not None else {}),
            # the picture over the LoRA loaders' own spans (monitors/engine/upstream_memory.py)
            **parts.memory,
        ),
        findings=tuple(findings),
        monitor_errors=tuple(errors),
        created_unix_s=time.time(),
    )


def _step_findings(loaders: list[dict], sides: dict, clip) -> list[Finding]:
    """The step's findings after its sides': loaders paired with patch hops, each loader's file and
    coverage, each side's own, a CLIP left unconnected, no LoRA at all."""
    findings = []
    paired = [
        _attach_attribution(sides.get("model"), loaders, "model", "strength_model"),
        _attach_attribution(sides.get("clip"), loaders, "clip", "strength_clip"),
    ]
    if not all(paired):
        findings.append(
            Finding("info", "patch hops and LoRA loaders could not be paired one to one", "lora_attribution")
        )
    for loader in loaders:
        findings.extend(loader_findings(loader, loader["file"], loader["coverage"]))
    for kind in ("model", "clip"):
        findings.extend(_side_findings(kind, sides.get(kind)))
    if clip is None and any(
        loader["has_clip_input"] and loader["strength_clip"] != 0.0 for loader in loaders
    ):
        findings.append(
            Finding(
                "info",
                "CLIP not connected: the text-encoder side of the LoRA is not analysed",
                "lora_clip_not_connected",
            )
        )
    if not (_applied(sides.get("model")) or _applied(sides.get("clip"))) and not loaders:
        findings.append(
            Finding(
                "warning",
                "no LoRA patches found upstream of this monitor: is a LoRA loader connected?",
                "lora_no_patches",
            )
        )
    return findings


def step_summary(
    loaders: list[dict], sides: dict, findings: list, returned_ids: dict, analysis_s: float
) -> LoraSummary:
    """The step's summary: success, loaders and their key coverage, what it hands on, each side's."""
    applied = _applied(sides.get("model")) or _applied(sides.get("clip"))
    coverages = [
        loader["coverage"] for loader in loaders if loader["coverage"] and loader["coverage"].get("computed")
    ]
    return LoraSummary(
        success=applied and not any(f.level == "error" for f in findings),
        n_loras=len(loaders),
        n_loras_skipped=sum(1 for loader in loaders if loader["skipped"]),
        n_file_keys=sum_known(c["n_file_keys"] for c in coverages),
        n_matched_keys=sum_known(c["n_matched_keys"] for c in coverages),
        n_unmatched_keys=sum_known(c["n_unmatched_keys"] for c in coverages),
        n_models_returned=returned_ids["n_models"],
        model=_side_figures(sides.get("model")),
        clip=_side_figures(sides.get("clip")),
        analysis_s=analysis_s,
    )


def analyse_one_side(
    kind, after, before, loaders, calculate, findings: list, errors: list, exceptions: list, lookup=None,
    described=None,
) -> dict | None:
    """One side given, analysed with the figures of its loaders' files; None when not given or
    failed (the failure recorded). `lookup`, `described`: what a step finished after the prompt
    took in it (side.analyse_side)."""
    if after is None:
        if before is not None:
            findings.append(Finding("warning", f"{kind}_before given without {kind}: ignored", "lora_before_only"))
        return None
    try:
        hop_files = loader_files(loaders, kind)
        return analyse_side(
            kind, after, before, calculate=calculate, hop_files=hop_files, lookup=lookup, described=described
        )
    except Exception as exc:
        errors.append(f"{kind}: {type(exc).__name__}: {exc}")
        exceptions.append(caught_exception(kind, exc))
        log.warning("pipeline monitor: LoRA analysis of %s failed: %s", kind, exc)
        return None


def _side_figures(side: dict | None) -> LoraSide | None:
    """A side's figures from its analysis (monitors/lora/side.py); None (all unknown) for a side not
    analysed or without patches."""
    totals = side["overall"]["totals"] if side and side.get("analysed") else {}
    if not totals:
        return None
    return LoraSide(
        relative_change_ratio=totals.get("relative_change"),
        relative_change_partial=totals.get("relative_change_partial"),
        n_weights_relative_change=totals.get("n_with_relative_change"),
        n_patch_keys_added=totals.get("n_keys"),
        n_hops=_at(side, "identity.n_hops"),
        delta_norm=totals.get("delta_norm"),
        delta_norm_partial=totals.get("delta_norm_partial"),
        n_patches_not_applied=totals.get("n_not_applied"),
        patch_bytes=totals.get("patch_bytes"),
        n_state_dict_keys_before=_at(side, "weight_modifications.n_state_dict_keys_before"),
        n_state_dict_keys_after=_at(side, "weight_modifications.n_state_dict_keys_after"),
    )


def _at(value, path: str):
    """The value at a dotted path of nested dicts; None where a key is missing."""
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value

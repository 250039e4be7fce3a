"""The `lora` step: did the LoRA(s) before the monitor apply, and how much.

Per side (MODEL, CLIP): the patches added since the base (parent chain) or against a `*_before`
object; per loader in the graph: its file, key coverage and strengths; paired hops and loaders,
and findings. Framework objects are duck-typed; file lookup and key coverage come in as callables.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..engine.upstream_memory import step_memory
from ..report import MAX_TRACEBACK_CHARS, Finding, StepReport, sum_known
from .caches import file_identity
from .coverage import attribute_hops, loader_findings, merge_loaders, upstream_loaders
from .file import lora_file_status
from .side import analyse_side
from .state_dicts import with_shared_state_dicts
from .summary import SIDE_FIELDS, SIDES

log = logging.getLogger(__name__)

STEP_KIND = "lora"
MAX_EXCEPTIONS = 5  # with their tracebacks, so that one broken LoRA stack cannot bloat the report


def _exception(where: str, exc: BaseException) -> dict:
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


def _returned(returned: tuple | None) -> dict:
    """Ids of the MODEL / CLIP the node hands on (a monitor hands on its inputs, the same objects)."""
    if returned is None:
        return {
            "model_object_id": None,
            "clip_object_id": None,
            "n_models": None,
            "unknown_reason": "the caller did not say what it returns",
        }
    model, clip = (tuple(returned) + (None, None))[:2]
    return {
        "model_object_id": None if model is None else id(model),
        "clip_object_id": None if clip is None else id(clip),
        "n_models": sum(1 for obj in (model, clip) if obj is not None),
        "unknown_reason": None,
    }


def analyse_loaders(
    node_id, prompt, model, clip, errors: list, recorder, lora_path, coverage, exceptions: list | None = None
) -> list[dict]:
    """The LoRA loaders upstream of the monitor, each with its file's status and key coverage;
    what fails goes to `errors` (one line) and `exceptions` (with the traceback)."""
    model_loaders = upstream_loaders(prompt, node_id, "model")
    clip_loaders = upstream_loaders(prompt, node_id, "clip") if clip is not None else []
    loaders = merge_loaders(model_loaders, clip_loaders)
    for loader in loaders:
        loader["file"], loader["coverage"] = None, None
        profile = None if recorder is None else recorder.node_profile(loader["node_id"])
        loader["profile"] = None if profile is None else profile.to_dict()
        try:
            status, index = lora_file_status(loader["lora_name"], lora_path(loader["lora_name"]))
            loader["file"] = status
            if (
                coverage is not None
                and status["exists"]
                and status["header_ok"] is not False
                and status.get("data_ok") is not False
                and not loader["skipped"]
            ):
                loader["coverage"] = coverage(
                    model if loader["on_model_path"] else None,
                    clip if loader["on_clip_path"] else None,
                    status["path"],
                    index,
                )
        except Exception as exc:
            errors.append(f"loader {loader['node_id']}: {type(exc).__name__}: {exc}")
            if exceptions is not None:
                exceptions.append(_exception(f"loader {loader['node_id']}", exc))
            log.warning("pipeline monitor: LoRA file check of node %s failed: %s", loader["node_id"], exc)
    return loaders


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


def _no_file(name: str | None) -> None:
    return None


@with_shared_state_dicts
def build_lora_step(
    node_id: str | None,
    prompt: Mapping | None,
    model,
    clip=None,
    model_before=None,
    clip_before=None,
    *,
    recorder=None,
    lora_path: Callable[[str | None], str | None] = _no_file,
    coverage: Callable | None = None,
    calculate: Callable | None = None,
    returned: tuple | None = None,
    defer: Callable | None = None,
) -> StepReport:
    """The `lora` step of the MODEL / CLIP given, against their patch history or the `*_before` objects.

    `recorder` (a RunRecorder) gives the loaders' profile rows; `lora_path` resolves a loader's
    lora_name to a file; `coverage(model, clip, path, header_index)` recomputes key coverage with
    the framework's own key mapping (none: coverage not computed); `returned`: the (MODEL, CLIP) the
    node hands on, for their ids. `defer(work)` (DEFERRED.submit for the running prompt): when a
    side's analysis is first-time work, the step comes back pending and `work` finishes it after
    the prompt (deferral.py).
    """
    started = time.perf_counter()
    # the loaders first (the sides reuse their files' figures); their errors are listed after the sides'
    loader_errors, loader_exceptions = [], []
    loaders = analyse_loaders(
        node_id, prompt, model, clip, loader_errors, recorder, lora_path, coverage, loader_exceptions
    )
    parts = LoraParts(
        node_id, clip, loaders, loader_errors, loader_exceptions, _returned(returned), step_memory(recorder, node_id)
    )
    pairs = (("model", model, model_before), ("clip", clip, clip_before))
    if defer is not None:
        from .deferral import pending_step

        try:
            pending = pending_step(parts, pairs, calculate, defer, started)
        except Exception as exc:  # the analysis is then made now, in the prompt
            log.warning("pipeline monitor: LoRA analysis not deferred: %s: %s", type(exc).__name__, exc)
            pending = None
        if pending is not None:
            return pending
    errors, exceptions, findings = [], [], []
    sides = {}
    for kind, after, before in pairs:
        side = analyse_one_side(kind, after, before, loaders, calculate, findings, errors, exceptions)
        if side is not None:
            sides[kind] = side
    return finish_step(parts, sides, errors, exceptions, findings, time.perf_counter() - started)


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
    summary = _step_summary(parts.loaders, sides, findings, parts.returned_ids)
    summary["analysis_s"] = analysis_s
    return StepReport(
        kind=STEP_KIND,
        node_id=parts.node_id,
        summary=summary,
        details={
            "loaders": parts.loaders,
            **sides,
            "returned": parts.returned_ids,
            "exceptions": exceptions[:MAX_EXCEPTIONS],
            "n_exceptions": len(exceptions),
            **({"deferred": deferred} if deferred is not None else {}),
            # the picture over the LoRA loaders' own spans (monitors/engine/upstream_memory.py)
            **parts.memory,
        },
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


def _step_summary(loaders: list[dict], sides: dict, findings: list, returned_ids: dict) -> dict:
    """The step's summary: success, loaders and their key coverage, what it hands on, each side's."""
    applied = _applied(sides.get("model")) or _applied(sides.get("clip"))
    coverages = [
        loader["coverage"] for loader in loaders if loader["coverage"] and loader["coverage"].get("computed")
    ]
    summary = {
        "success": applied and not any(f.level == "error" for f in findings),
        "n_loras": len(loaders),
        "n_loras_skipped": sum(1 for loader in loaders if loader["skipped"]),
        "n_file_keys": sum_known(c["n_file_keys"] for c in coverages),
        "n_matched_keys": sum_known(c["n_matched_keys"] for c in coverages),
        "n_unmatched_keys": sum_known(c["n_unmatched_keys"] for c in coverages),
        "n_models_returned": returned_ids["n_models"],
    }
    _side_summary(summary, sides)
    return summary


def analyse_one_side(
    kind, after, before, loaders, calculate, findings: list, errors: list, exceptions: list, lookup=None
) -> dict | None:
    """One side given, analysed with the figures of its loaders' files; None when not given or
    failed (the failure recorded)."""
    if after is None:
        if before is not None:
            findings.append(Finding("warning", f"{kind}_before given without {kind}: ignored", "lora_before_only"))
        return None
    try:
        hop_files = loader_files(loaders, kind)
        return analyse_side(kind, after, before, calculate=calculate, hop_files=hop_files, lookup=lookup)
    except Exception as exc:
        errors.append(f"{kind}: {type(exc).__name__}: {exc}")
        exceptions.append(_exception(kind, exc))
        log.warning("pipeline monitor: LoRA analysis of %s failed: %s", kind, exc)
        return None


def _side_summary(summary: dict, sides: dict) -> None:
    """Each side's declared figures (SIDE_FIELDS), each from its `source` in the side's analysis;
    all None for a side not analysed or without patches."""
    for kind in SIDES:
        side = sides.get(kind)
        totals = side["overall"]["totals"] if side and side.get("analysed") else {}
        for field in SIDE_FIELDS:
            summary[f"{kind}_{field.name}"] = _at(side, field.source) if totals else None


def _at(value, path: str):
    """The value at a dotted path of nested dicts; None where a key is missing."""
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    return value

"""PipelineMonitorLora: passthrough after LoRA loaders; did the LoRA apply, and how much (step `lora`)."""

from __future__ import annotations

import logging
import time

from comfy_api.latest import io

from ..monitors.lora.coverage import attribute_hops, loader_findings, merge_loaders, upstream_loaders
from ..monitors.lora.file import lora_file_status
from ..monitors.lora.side import analyse_side
from ..monitors.probes import get_probes
from ..monitors.report import Finding, StepReport
from .lora_keys import lora_path, recompute_coverage
from .node_support import record_step
from .runtime import get_runtime

log = logging.getLogger(__name__)


def analyse_loaders(node_id, prompt, model, clip, errors: list) -> list[dict]:
    """The LoRA loaders upstream of the monitor, each with its file's status and key coverage."""
    model_loaders = upstream_loaders(prompt, node_id, "model")
    clip_loaders = upstream_loaders(prompt, node_id, "clip") if clip is not None else []
    loaders = merge_loaders(model_loaders, clip_loaders)
    recorder = get_runtime().recorder
    for loader in loaders:
        loader["file"], loader["coverage"] = None, None
        profile = recorder.node_profile(loader["node_id"])  # the loader's time and peaks, if profiled
        loader["profile"] = None if profile is None else profile.to_dict()
        try:
            status, index = lora_file_status(loader["lora_name"], lora_path(loader["lora_name"]))
            loader["file"] = status
            if status["exists"] and status["header_ok"] is not False and not loader["skipped"]:
                loader["coverage"] = recompute_coverage(
                    model if loader["on_model_path"] else None,
                    clip if loader["on_clip_path"] else None,
                    status["path"],
                    index,
                )
        except Exception as exc:
            errors.append(f"loader {loader['node_id']}: {type(exc).__name__}: {exc}")
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
    if totals["n_without_delta_norm"]:
        reasons = "; ".join(f"{n} x {why}" for why, n in totals["reasons_without_norm"].items())
        findings.append(
            Finding(
                "info",
                f"{kind}: no cheap change norm for {totals['n_without_delta_norm']} patches ({reasons})",
                "lora_norm_unavailable",
            )
        )
    return findings


def _applied(side: dict | None) -> bool:
    totals = side["overall"]["totals"] if side and side.get("analysed") else None
    return bool(totals and any(s != 0.0 for s in totals["strengths"]))


def _sum_known(values):
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def analyse_lora(node_id, prompt, model, clip, model_before=None, clip_before=None) -> StepReport:
    started = time.perf_counter()
    errors, findings, sides = [], [], {}
    for kind, after, before in (("model", model, model_before), ("clip", clip, clip_before)):
        if after is None:
            if before is not None:
                findings.append(
                    Finding("warning", f"{kind}_before given without {kind}: ignored", "lora_before_only")
                )
            continue
        try:
            sides[kind] = analyse_side(kind, after, before)
        except Exception as exc:
            errors.append(f"{kind}: {type(exc).__name__}: {exc}")
            log.warning("pipeline monitor: LoRA analysis of %s failed: %s", kind, exc)
    loaders = analyse_loaders(node_id, prompt, model, clip, errors)
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
    applied = _applied(sides.get("model")) or _applied(sides.get("clip"))
    if not applied and not loaders:
        findings.append(
            Finding(
                "warning",
                "no LoRA patches found upstream of this monitor: is a LoRA loader connected?",
                "lora_no_patches",
            )
        )
    coverages = [
        loader["coverage"] for loader in loaders if loader["coverage"] and loader["coverage"].get("computed")
    ]
    summary = {
        "success": applied and not any(f.level == "error" for f in findings),
        "n_loras": len(loaders),
        "n_loras_skipped": sum(1 for loader in loaders if loader["skipped"]),
        "n_file_keys": _sum_known(c["n_file_keys"] for c in coverages),
        "n_matched_keys": _sum_known(c["n_matched_keys"] for c in coverages),
        "n_unmatched_keys": _sum_known(c["n_unmatched_keys"] for c in coverages),
    }
    for kind in ("model", "clip"):
        side = sides.get(kind)
        totals = side["overall"]["totals"] if side and side.get("analysed") else {}
        summary[f"{kind}_n_hops"] = len(side["hops"]) if totals else None
        summary[f"{kind}_n_patch_keys_added"] = totals.get("n_keys")
        summary[f"{kind}_delta_norm"] = totals.get("delta_norm")
        summary[f"{kind}_relative_change"] = totals.get("relative_change")
        summary[f"{kind}_patch_bytes"] = totals.get("patch_bytes")
    summary["analysis_s"] = time.perf_counter() - started
    return StepReport(
        kind="lora",
        node_id=node_id,
        summary=summary,
        details={"loaders": loaders, **sides, "memory": get_probes().snapshot().to_dict()},
        findings=tuple(findings),
        monitor_errors=tuple(errors),
        created_unix_s=time.time(),
    )


def ui_text(step: StepReport) -> str:
    s = step.summary
    parts = []
    for kind in ("model", "clip"):
        if s.get(f"{kind}_n_patch_keys_added") is not None:
            text = f"{kind}: +{s[f'{kind}_n_patch_keys_added']} patched weights"
            if s.get(f"{kind}_relative_change") is not None:
                text += f", change {100 * s[f'{kind}_relative_change']:.2f}% of |W|"
            parts.append(text)
    if s.get("n_file_keys") is not None:
        parts.append(
            f"keys matched {s['n_matched_keys']}/{s['n_file_keys']}, unmatched {s['n_unmatched_keys']}"
        )
    problems = [f.message for f in step.findings if f.level in ("warning", "error")]
    head = "LoRA applied" if s.get("success") else "LoRA NOT fully applied"
    return "\n".join([f"{head}: " + (" | ".join(parts) or "no patches"), *problems[:5]])


class PipelineMonitorLora(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="PipelineMonitorLora",
            display_name="Pipeline Monitor: LoRA",
            category="pipeline_monitor",
            description="Passes MODEL and CLIP through unchanged and reports whether the LoRA(s) before it "
            "applied: patches per weight and block, change norms, matched and unmatched file keys.",
            inputs=[
                io.Model.Input("model"),
                io.Clip.Input("clip", optional=True),
                io.Model.Input(
                    "model_before",
                    optional=True,
                    tooltip="compare with this MODEL instead of the patch history",
                ),
                io.Clip.Input(
                    "clip_before",
                    optional=True,
                    tooltip="compare with this CLIP instead of the patch history",
                ),
            ],
            outputs=[io.Model.Output(display_name="model"), io.Clip.Output(display_name="clip")],
            hidden=[io.Hidden.unique_id, io.Hidden.prompt],
            is_output_node=True,  # reports even when its outputs are not connected
        )

    @classmethod
    def execute(cls, model, clip=None, model_before=None, clip_before=None) -> io.NodeOutput:
        hidden = getattr(cls, "hidden", None)
        node_id = getattr(hidden, "unique_id", None)
        prompt = getattr(hidden, "prompt", None)
        ui = None
        try:
            step = analyse_lora(node_id, prompt, model, clip, model_before, clip_before)
            record_step(step)
            ui = {"text": [ui_text(step)]}
        except Exception as exc:  # monitoring never fails the prompt
            log.exception("pipeline monitor: LoRA analysis failed")
            record_step(
                StepReport(kind="lora", node_id=node_id, monitor_errors=(f"{type(exc).__name__}: {exc}",))
            )
        return io.NodeOutput(model, clip, ui=ui)

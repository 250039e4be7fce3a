"""PipelineMonitorModels: passthrough for MODEL / CLIP / VAE right after the loaders (step kind `models`)."""

from __future__ import annotations

import logging
import time

from comfy_api.latest import io

from ..monitors.models.state import describe
from ..monitors.probes import get_probes
from ..monitors.report import Finding, StepReport, format_bytes
from .node_support import loader_profiles, record_step

log = logging.getLogger(__name__)

INPUT_KINDS = ("model", "clip", "vae")


def analyse_models(node_id: str | None, inputs: dict, prompt) -> StepReport:
    """Describe each connected object, the loaders' cost from the profile, and the memory baseline."""
    objects, findings, errors = {}, [], []
    for kind in INPUT_KINDS:
        obj = inputs.get(kind)
        if obj is None:
            continue
        try:
            objects[kind] = describe(kind, obj)
        except Exception as exc:
            errors.append(f"{kind}: {type(exc).__name__}: {exc}")
            continue
        if not objects[kind].get("n_elements"):  # every real MODEL / CLIP / VAE holds weights
            findings.append(
                Finding(
                    "warning",
                    f"The {kind} input is a {type(obj).__name__} without weights, not a {kind.upper()}.",
                    "no_weights",
                )
            )
    if not objects:
        findings.append(
            Finding(
                "info",
                "Nothing connected: connect a MODEL, CLIP or VAE to see its state.",
                "nothing_connected",
            )
        )
    loaders = loader_profiles(node_id, prompt, INPUT_KINDS)
    baseline = get_probes().snapshot().to_dict()
    total = sum(o.get("size_bytes") or 0 for o in objects.values())
    summary = {
        "n_objects": len(objects),
        "total_size_bytes": total if objects else None,
        "loaders_duration_s": _sum_or_none(p.get("duration_s") for p in loaders.values()),
        "process_rss_bytes": baseline.get("process_rss_bytes"),
    }
    for kind, info in objects.items():
        summary[f"{kind}_class"] = info.get("module_class") or info.get("class")
        summary[f"{kind}_size_bytes"] = info.get("size_bytes")
    return StepReport(
        kind="models",
        node_id=node_id,
        summary=summary,
        details={"objects": objects, "loaders": loaders, "memory_baseline": baseline},
        findings=tuple(findings),
        monitor_errors=tuple(errors),
        created_unix_s=time.time(),
    )


def _sum_or_none(values):
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def ui_text(step: StepReport) -> str:
    parts = []
    for kind in INPUT_KINDS:
        if f"{kind}_class" in step.summary:
            parts.append(
                f"{kind}: {step.summary[f'{kind}_class']} {format_bytes(step.summary[f'{kind}_size_bytes'])}"
            )
    if step.summary.get("loaders_duration_s") is not None:
        parts.append(f"loaders {step.summary['loaders_duration_s']:.2f} s")
    return " | ".join(parts) or "nothing connected"


class PipelineMonitorModels(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="PipelineMonitorModels",
            display_name="Pipeline Monitor: Models",
            category="pipeline_monitor",
            description="Passes MODEL, CLIP and VAE through unchanged and reports their state, size, "
            "devices and patches, and what loading them cost.",
            inputs=[
                io.Model.Input("model", optional=True),
                io.Clip.Input("clip", optional=True),
                io.Vae.Input("vae", optional=True),
            ],
            outputs=[
                io.Model.Output(display_name="model"),
                io.Clip.Output(display_name="clip"),
                io.Vae.Output(display_name="vae"),
            ],
            hidden=[io.Hidden.unique_id, io.Hidden.prompt],
            # An output node so the report is made even when nothing downstream uses the outputs.
            is_output_node=True,
        )

    @classmethod
    def execute(cls, model=None, clip=None, vae=None) -> io.NodeOutput:
        hidden = getattr(cls, "hidden", None)
        node_id = getattr(hidden, "unique_id", None)
        prompt = getattr(hidden, "prompt", None)
        ui = None
        try:
            step = analyse_models(node_id, {"model": model, "clip": clip, "vae": vae}, prompt)
            record_step(step)
            ui = {"text": [ui_text(step)]}
        except Exception as exc:  # monitoring never fails the prompt
            log.exception("pipeline monitor: models analysis failed")
            record_step(
                StepReport(kind="models", node_id=node_id, monitor_errors=(f"{type(exc).__name__}: {exc}",))
            )
        return io.NodeOutput(model, clip, vae, ui=ui)

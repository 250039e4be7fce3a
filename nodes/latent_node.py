"""PipelineMonitorLatent: passthrough for a LATENT from anywhere (step kind `latent`)."""

from __future__ import annotations

import logging
import time

from comfy_api.latest import io

from ..monitors.latent.analysis import analyse_latent, latent_ui_text
from ..monitors.report import StepReport
from .node_support import loader_profiles, record_step

log = logging.getLogger(__name__)


def latent_step(node_id: str | None, latent, prompt) -> StepReport:
    summary, details, findings = analyse_latent(latent)
    # Which node made the latent (EmptyLatentImage, a sampler, a VAE encode) and what it cost.
    source = loader_profiles(node_id, prompt, ("latent",)).get("latent")
    if source is not None:
        details["source"] = source
        summary["source_class"] = source.get("class_type")
    return StepReport(
        kind="latent",
        node_id=node_id,
        summary=summary,
        details=details,
        findings=tuple(findings),
        created_unix_s=time.time(),
    )


class PipelineMonitorLatent(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="PipelineMonitorLatent",
            display_name="Pipeline Monitor: Latent",
            category="pipeline_monitor",
            description="Passes a LATENT through unchanged and reports its shape, image/video kind, the "
            "latent family its channels suggest, dtype, device, size, value statistics with NaN/Inf "
            "counts and its noise mask.",
            inputs=[io.Latent.Input("latent")],
            outputs=[io.Latent.Output(display_name="latent")],
            hidden=[io.Hidden.unique_id, io.Hidden.prompt],
            # An output node so the report is made even when nothing downstream uses the output.
            is_output_node=True,
        )

    @classmethod
    def execute(cls, latent) -> io.NodeOutput:
        hidden = getattr(cls, "hidden", None)
        node_id = getattr(hidden, "unique_id", None)
        prompt = getattr(hidden, "prompt", None)
        ui = None
        try:
            step = latent_step(node_id, latent, prompt)
            record_step(step)
            ui = {"text": [latent_ui_text(step.summary)]}
        except Exception as exc:  # monitoring never fails the prompt
            log.exception("pipeline monitor: latent analysis failed")
            record_step(
                StepReport(kind="latent", node_id=node_id, monitor_errors=(f"{type(exc).__name__}: {exc}",))
            )
        return io.NodeOutput(latent, ui=ui)

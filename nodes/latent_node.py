"""PipelineMonitorLatent: passthrough for a LATENT from anywhere (step kind `latent`)."""

from __future__ import annotations

from comfy_api.latest import io

from ..monitors.latent import STAGE
from ..monitors.latent.report import build_latent_step
from .node_support import hidden_inputs, run_monitor
from .runtime import get_runtime


class PipelineMonitorLatent(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id=STAGE.node,
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
        node_id, prompt = hidden_inputs(cls)
        _, ui = run_monitor(
            STAGE.kind, node_id, lambda: build_latent_step(node_id, latent, prompt, get_runtime().recorder)
        )
        return io.NodeOutput(latent, ui=ui)

"""PipelineMonitorModels: passthrough for MODEL / CLIP / VAE right after the loaders (step kind `models`)."""

from __future__ import annotations

from comfy_api.latest import io

from ..monitors.models import STAGE
from ..monitors.models.report import build_models_step
from .node_support import hidden_inputs, run_monitor
from .runtime import get_runtime


class PipelineMonitorModels(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id=STAGE.node,
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
        node_id, prompt = hidden_inputs(cls)
        inputs = {"model": model, "clip": clip, "vae": vae}
        _, ui = run_monitor(
            STAGE.kind, node_id, lambda: build_models_step(node_id, inputs, prompt, get_runtime().recorder)
        )
        return io.NodeOutput(model, clip, vae, ui=ui)

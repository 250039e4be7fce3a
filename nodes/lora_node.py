"""PipelineMonitorLora: passthrough after LoRA loaders; did the LoRA apply, and how much (step `lora`)."""

from __future__ import annotations

from comfy_api.latest import io

from ..monitors.lora import STAGE
from ..monitors.lora.report import build_lora_step
from .deferred_work import defer_for
from .lora_keys import calculate_weight, lora_path, recompute_coverage
from .node_support import hidden_inputs, run_monitor
from .runtime import get_runtime


class PipelineMonitorLora(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id=STAGE.node,
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
        node_id, prompt = hidden_inputs(cls)
        recorder = get_runtime().recorder

        def build():
            return build_lora_step(
                node_id,
                prompt,
                model,
                clip,
                model_before,
                clip_before,
                recorder=recorder,
                lora_path=lora_path,
                coverage=recompute_coverage,
                calculate=calculate_weight,
                returned=(model, clip),
                defer=defer_for(recorder),  # a first file's figures come after the prompt
            )

        _, ui = run_monitor(STAGE.kind, node_id, build)
        return io.NodeOutput(model, clip, ui=ui)

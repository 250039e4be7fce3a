"""PipelineMonitorConditioning: passthrough for CONDITIONING after the text encoders (step kind `conditioning`)."""

from __future__ import annotations

from comfy_api.latest import io

from ..monitors.conditioning import STAGE
from ..monitors.conditioning.prompt_text import input_types_from_spec
from ..monitors.conditioning.report import build_conditioning_step
from .node_support import hidden_inputs, run_monitor
from .runtime import get_runtime


def comfy_input_types(class_type: str) -> dict[str, str] | None:
    """input name -> type name ("STRING", "CLIP", "CONDITIONING", "COMBO"...) of a node class."""
    import nodes as comfy_nodes  # ComfyUI's nodes.py: this package's own is only reached relatively

    class_def = comfy_nodes.NODE_CLASS_MAPPINGS.get(class_type)
    if class_def is None:
        return None
    return input_types_from_spec(class_def.INPUT_TYPES())


MIB = 1024**2


class PipelineMonitorConditioning(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id=STAGE.node,
            display_name="Pipeline Monitor: Conditioning",
            category="pipeline_monitor",
            description="Passes CONDITIONING (and CLIP) through unchanged and reports what the text "
            "encoder produced: shapes, encoder family, value statistics, the prompt text, what encoding "
            "cost, and problems such as NaN or positive/negative mismatches.",
            inputs=[
                io.Conditioning.Input("positive"),
                io.Conditioning.Input("negative", optional=True),
                io.Clip.Input(
                    "clip", optional=True, tooltip="The CLIP that encoded the prompts: names the encoder."
                ),
                io.Model.Input(
                    "model",
                    optional=True,
                    tooltip="The diffusion model: its id, class and device at encode time are recorded.",
                ),
                io.Int.Input(
                    "memory_budget_mib",
                    default=0,
                    min=0,
                    max=1024 * 1024,
                    optional=True,
                    tooltip="Memory one text encode node may add (MiB); above it the report has a "
                    "warning. 0: no check.",
                ),
            ],
            outputs=[
                io.Conditioning.Output(display_name="positive"),
                io.Conditioning.Output(display_name="negative"),
                io.Clip.Output(display_name="clip"),
            ],
            hidden=[io.Hidden.unique_id, io.Hidden.prompt],
            # An output node so the report is made even when nothing downstream uses the outputs.
            is_output_node=True,
        )

    @classmethod
    def execute(cls, positive, negative=None, clip=None, model=None, memory_budget_mib=0) -> io.NodeOutput:
        node_id, prompt = hidden_inputs(cls)

        def build():
            recorder = get_runtime().recorder
            return build_conditioning_step(
                node_id,
                prompt,
                positive,
                negative,
                clip,
                recorder=recorder,
                input_types=comfy_input_types,
                model=model,
                memory_budget_bytes=(memory_budget_mib or 0) * MIB,
            )

        _, ui = run_monitor(STAGE.kind, node_id, build)
        return io.NodeOutput(positive, negative, clip, ui=ui)

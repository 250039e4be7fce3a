"""PipelineMonitorConditioning: passthrough for CONDITIONING after the text encoders (step kind `conditioning`)."""

from __future__ import annotations

import logging

from comfy_api.latest import io

from ..monitors.conditioning.analysis import analyse_conditioning, ui_lines
from ..monitors.conditioning.prompt_text import trace_text_encoders
from ..monitors.report import StepReport
from .node_support import record_step
from .runtime import get_runtime

log = logging.getLogger(__name__)


def comfy_input_types(class_type: str) -> dict[str, str] | None:
    """input name -> type name ("STRING", "CLIP", "CONDITIONING", "COMBO"...) of a node class."""
    import nodes as comfy_nodes  # ComfyUI's nodes.py: this package's own is only reached relatively

    class_def = comfy_nodes.NODE_CLASS_MAPPINGS.get(class_type)
    if class_def is None:
        return None
    spec = class_def.INPUT_TYPES()
    types = {}
    for section in ("required", "optional"):
        for name, info in (spec.get(section) or {}).items():
            kind = info[0] if isinstance(info, (list, tuple)) and info else None
            types[name] = kind if isinstance(kind, str) else "COMBO"
    return types


def encode_profile(node_id: str) -> dict:
    """The per-node profile row of a text encode node of this prompt (time, peaks, cached)."""
    recorder = get_runtime().recorder
    profile = recorder.node_profile(node_id)
    if profile is not None:
        return profile.to_dict()
    # The encoder produced its output before this node runs; if the profile did not see it run,
    # ComfyUI served it from its cache.
    cached = True if recorder.profile_enabled and recorder.active_prompt_id is not None else None
    return {"node_id": node_id, "duration_s": None, "peak_rss_bytes": None, "cached": cached}


def trace_sides(node_id, prompt, sides) -> dict:
    traces = {}
    for side in sides:
        trace = trace_text_encoders(prompt, node_id, side, input_types=comfy_input_types)
        for encoder in trace["encoders"]:
            encoder["profile"] = encode_profile(encoder["node_id"])
        traces[side] = trace
    return traces


class PipelineMonitorConditioning(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="PipelineMonitorConditioning",
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
    def execute(cls, positive, negative=None, clip=None) -> io.NodeOutput:
        hidden = getattr(cls, "hidden", None)
        node_id = getattr(hidden, "unique_id", None)
        prompt = getattr(hidden, "prompt", None)
        ui = None
        try:
            sides = ("positive",) if negative is None else ("positive", "negative")
            step = analyse_conditioning(
                node_id, positive, negative, clip, trace_sides(node_id, prompt, sides)
            )
            record_step(step)
            ui = {"text": ui_lines(step)}
        except Exception as exc:  # monitoring never fails the prompt
            log.exception("pipeline monitor: conditioning analysis failed")
            record_step(
                StepReport(
                    kind="conditioning", node_id=node_id, monitor_errors=(f"{type(exc).__name__}: {exc}",)
                )
            )
        return io.NodeOutput(positive, negative, clip, ui=ui)

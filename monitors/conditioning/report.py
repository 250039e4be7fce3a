"""The `conditioning` step: both sides described, with the prompt texts and encode nodes found upstream."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from ..engine.upstream_memory import step_memory
from ..report import StepReport
from .analysis import analyse_conditioning
from .details import CONDITIONING_DETAILS
from .prompt_text import trace_text_encoders

STEP_KIND = "conditioning"


def trace_sides(node_id, prompt, sides, recorder=None, input_types: Callable | None = None) -> dict:
    """side -> the text encoders and texts upstream of that input, each encoder with its profile row."""
    traces = {}
    for side in sides:
        trace = trace_text_encoders(prompt, node_id, side, input_types=input_types)
        for encoder in trace["encoders"]:
            encoder["profile"] = None if recorder is None else recorder.profile_row(encoder["node_id"])
        traces[side] = trace
    return traces


def build_conditioning_step(
    node_id: str | None,
    prompt: Mapping | None,
    positive,
    negative=None,
    clip=None,
    *,
    recorder=None,
    input_types: Callable[[str], dict | None] | None = None,
    model=None,
    memory_budget_bytes: int | None = None,
) -> StepReport:
    """`input_types(class_type)` names the input types of a node class (None: by input name only)."""
    sides = ("positive",) if negative is None else ("positive", "negative")
    traces = trace_sides(node_id, prompt, sides, recorder, input_types)
    step = analyse_conditioning(
        node_id, positive, negative, clip, traces, model=model, memory_budget_bytes=memory_budget_bytes
    )
    # the picture over the text encode nodes' own spans (monitors/engine/upstream_memory.py)
    details = CONDITIONING_DETAILS.build(**step.details, **step_memory(recorder, node_id))
    return dataclasses.replace(step, details=details)

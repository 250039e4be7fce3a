"""Helpers for the conditioning monitor's ComfyUI tests: tiny CLIPs, running the node, an executor."""

from __future__ import annotations

import importlib
import uuid

import pytest
from testing_pack.conditioning_nodes import (
    PMTestConditioning,
    PMTestConditioningId,
    PMTestTinyClip,
    make_tiny_clip,
)

from tests.comfyui.conftest import classic_executor

NODE = "PipelineMonitorConditioning"
TEST_NODES = {
    "PMTestConditioning": PMTestConditioning,
    "PMTestConditioningId": PMTestConditioningId,
    "PMTestTinyClip": PMTestTinyClip,
}


@pytest.fixture(scope="session")
def sdxl_clip(comfy):
    """A tiny SDXL-class CLIP (SDXLClipModel: CLIP-L 32 + CLIP-G 64 -> [1,77k,96], pooled 64)."""
    return make_tiny_clip("sdxl", seed=5)


def encode(comfy, clip, text):
    """CONDITIONING from ComfyUI's own CLIPTextEncode."""
    return comfy.nodes.NODE_CLASS_MAPPINGS["CLIPTextEncode"]().encode(clip, text)[0]


def run_node(comfy, runtime, node_id="9", prompt=None, **inputs):
    """Run the monitor node inside a recorder run; -> (NodeOutput, its step as a dict)."""
    node = comfy.nodes.NODE_CLASS_MAPPINGS[NODE]
    runtime.recorder.begin_run(f"pm-conditioning-{uuid.uuid4().hex[:8]}", prompt)
    try:
        hidden = {"UNIQUE_ID": node_id, "PROMPT": prompt}
        output = node.PREPARE_CLASS_CLONE({"hidden_inputs": hidden}).execute(**inputs)
    finally:
        report = runtime.recorder.end_run("success")
    steps = [s for s in report.to_dict()["steps"] if s["kind"] == "conditioning"]
    assert len(steps) == 1, report.steps
    return output, steps[0]


def codes(step, level=None):
    return [f["code"] for f in step["findings"] if level is None or f["level"] == level]


@pytest.fixture
def executor(comfy, monkeypatch):
    """ComfyUI's real PromptExecutor, with the test-only nodes registered for the test."""

    primitive = importlib.import_module("comfy_extras.nodes_primitive").StringMultiline
    primitive.GET_SCHEMA()  # what ComfyUI's loader does for a V3 node
    for name, cls in {**TEST_NODES, "PrimitiveStringMultiline": primitive}.items():
        monkeypatch.setitem(comfy.nodes.NODE_CLASS_MAPPINGS, name, cls)
    return classic_executor(comfy)


def execute(executor, prompt: dict, outputs) -> str:
    prompt_id = str(uuid.uuid4())
    executor.execute(prompt, prompt_id, {}, list(outputs))
    assert executor.success, executor.status_messages[-1:]
    return prompt_id

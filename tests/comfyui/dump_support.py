"""Helpers for the latent and dump nodes' ComfyUI tests: run a node in a recorder run, the folders."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def run_node(comfy, runtime, class_type, kind, node_id="9", prompt=None, **inputs):
    """Run a pack node inside a recorder run; -> (NodeOutput, list of its steps as dicts)."""
    node = comfy.nodes.NODE_CLASS_MAPPINGS[class_type]
    runtime.recorder.begin_run(f"pm-{kind}-{uuid.uuid4().hex[:8]}", prompt)
    try:
        hidden = {"UNIQUE_ID": node_id, "PROMPT": prompt}
        output = node.PREPARE_CLASS_CLONE({"hidden_inputs": hidden}).execute(**inputs)
    finally:
        # as the profile hook does at a prompt's end: the dumps written on the writer thread first
        comfy.pack_module("monitors.dumps.writer").finish_pending_writes()
        report = runtime.recorder.end_run("success")
    return output, [s for s in report.to_dict()["steps"] if s["kind"] == kind]


def output_dir() -> Path:
    import folder_paths

    return Path(folder_paths.get_output_directory())


def dumps_dir() -> Path:
    return output_dir() / "pipeline_monitor" / "dumps"


def files_under(root: Path) -> set[str]:
    """Every file below root (relative paths); the dumps folder's own files are prefixed."""
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def codes(step, level=None):
    return [f["code"] for f in step["findings"] if level is None or f["level"] == level]

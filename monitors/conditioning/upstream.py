"""The nodes a `conditioning` step describes, for its memory picture
(monitors/engine/upstream_memory.py): the text encode nodes (the nodes fed by a CLIP) behind the
monitor's positive / negative inputs."""

from __future__ import annotations

from collections.abc import Mapping

from .prompt_text import trace_text_encoders


def upstream_node_ids(prompt: Mapping, node_id: str) -> list[str]:
    return [
        encoder["node_id"]
        for side in ("positive", "negative")
        for encoder in trace_text_encoders(prompt, node_id, side)["encoders"]
    ]

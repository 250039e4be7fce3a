"""The nodes a `lora` step describes, for its memory picture (monitors/engine/upstream_memory.py):
the LoRA loaders stacked on the monitor's model / clip paths (not the checkpoint loader below them)."""

from __future__ import annotations

from collections.abc import Mapping

from .coverage import upstream_loaders


def upstream_node_ids(prompt: Mapping, node_id: str) -> list[str]:
    return [
        loader["node_id"] for name in ("model", "clip") for loader in upstream_loaders(prompt, node_id, name)
    ]

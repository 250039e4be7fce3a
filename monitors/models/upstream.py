"""The nodes a `models` step describes, for its memory picture (monitors/engine/upstream_memory.py):
the nodes feeding the monitor's model / clip / vae inputs (the loaders)."""

from __future__ import annotations

from collections.abc import Mapping


def upstream_node_ids(prompt: Mapping, node_id: str) -> list[str]:
    node = prompt.get(node_id)
    inputs = node.get("inputs") if isinstance(node, Mapping) else None
    if not isinstance(inputs, Mapping):
        return []
    found = []
    for name in ("model", "clip", "vae"):
        link = inputs.get(name)
        if isinstance(link, (list, tuple)) and len(link) == 2:
            found.append(str(link[0]))
    return found

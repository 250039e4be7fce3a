"""The loaders a `models` step describes (monitors/models/upstream.py): links only, in input order."""

from __future__ import annotations

from monitors.models.upstream import upstream_node_ids


def test_the_nodes_feeding_model_clip_and_vae():
    prompt = {
        "9": {"inputs": {"vae": ["4", 2], "model": ("1", 0), "clip": "not a link", "seed": ["7", 0]}},
        "8": {"inputs": {"model": ["1", 0, "extra"], "clip": [3], "vae": 5}},
        "7": {"class_type": "NoInputs"},
        "6": "not a node",
    }
    assert upstream_node_ids(prompt, "9") == ["1", "4"]
    assert upstream_node_ids(prompt, "8") == []
    assert upstream_node_ids(prompt, "7") == []
    assert upstream_node_ids(prompt, "6") == []
    assert upstream_node_ids(prompt, "missing") == []

"""The declaration of a run report's `subgraphs[]` (monitors/engine/subgraphs.py SubgraphRollup):
one roll-up per subgraph instance that ran. From it come the schema's `subgraph` definition, the
panel's SUBGRAPH_FIELDS, the HTML report's and the CSV's columns and the metrics reference's rows;
a unit test keeps it and the dataclasses the same."""

from __future__ import annotations

from ..detail_fields import DetailGroup
from ..summary_fields import SummaryField as F

_DESCENDANTS = "over every node row below the instance, nested subgraphs included"

SUBGRAPH_GPU_PEAK = DetailGroup(
    "gpu_peaks",
    "subgraph GPU peaks",
    f"per device: the highest torch allocator and process device memory figures {_DESCENDANTS}",
    (
        F("device", "device", None, "the torch device (cuda:0)", "string", nullable=False),
        F(
            "peak_allocated_bytes",
            "GPU allocated peak",
            "bytes",
            f"highest node GPU allocated peak {_DESCENDANTS}; absolute",
            "integer",
        ),
        F(
            "peak_allocated_above_start_bytes",
            "GPU allocated added",
            "bytes",
            f"highest GPU allocated a node added above its start, {_DESCENDANTS}",
            "integer",
        ),
        F(
            "peak_process_used_bytes",
            "process device memory peak",
            "bytes",
            f"highest process device memory (NVML, per process: outside torch too) {_DESCENDANTS}; "
            "null where no node measured it",
            "integer",
        ),
        F(
            "peak_aimdo_used_bytes",
            "dynamic VRAM peak",
            "bytes",
            f"highest VRAM comfy-aimdo held {_DESCENDANTS}; null where no node measured it",
            "integer",
        ),
    ),
    repeated="list",
    nullable=False,
)

SUBGRAPH_ROW = DetailGroup(
    "subgraphs",
    "subgraph",
    "one roll-up per subgraph instance the prompt ran (compound node ids such as 54:73), nested ones "
    "included: wall-clock time from its first node's start to its last node's end, and its nodes' figures",
    (
        F("id", "subgraph id", None, "the compound id prefix of the instance (54, 54:62)", "string", nullable=False),
        F("parent_id", "parent subgraph", None, "the enclosing instance's id; null at the top level", "string"),
        F(
            "name",
            "subgraph name",
            None,
            "the instance's title in the UI workflow, else its definition's name",
            "string",
        ),
        F(
            "name_unknown_reason",
            "name unknown",
            None,
            "why name is null (no UI workflow with the prompt, the instance or definition not in it)",
            "string",
        ),
        F("node_ids", "nodes", None, "every node below the instance that ran or was cached", "array", nullable=False),
        F("n_cached", "cached nodes", None, "of node_ids, the nodes served from the cache", "integer", nullable=False),
        F("start_offset_s", "start", "s", "seconds after the prompt's start when its first node started", "number"),
        F(
            "wall_s",
            "subgraph wall time",
            "s",
            "first node start to last node end (wall-clock, not a sum: nodes outside it that ran in between count)",
            "number",
        ),
        F("wall_unknown_reason", "wall time unknown", None, "why wall_s is null (every node cached)", "string"),
        F("node_time_sum_s", "node time sum", "s", "the sum of its nodes' times", "number"),
        F("peak_rss_bytes", "peak RSS", "bytes", f"highest node peak RSS {_DESCENDANTS}; absolute", "integer"),
        F(
            "peak_rss_above_start_bytes",
            "peak RSS added",
            "bytes",
            f"highest RSS a node added above its start, {_DESCENDANTS}",
            "integer",
        ),
        SUBGRAPH_GPU_PEAK,
    ),
    repeated="list",
    nullable=False,
)

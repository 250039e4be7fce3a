"""Subgraph roll-ups: every figure of a prompt's node rows summed up per subgraph instance.

Current ComfyUI frontends flatten a subgraph into the API prompt with compound node ids: `"54:73"`
is node 73 inside the subgraph instance 54, `"54:62:174"` node 174 inside instance 62 inside 54.
Each prefix is one instance that ran; its roll-up covers every descendant node row (nested
instances included): wall-clock time (first descendant start to last descendant end, not a sum),
the sum of the node times, the cached count and the peaks over the descendants.

Names come from the UI workflow the frontend sends along (`extra_data.extra_pnginfo.workflow`,
gathered by nodes/profile_hook.py): an instance node's `type` is its definition's uuid in
`definitions.subgraphs` (at the root and, nested, inside a definition); the instance's own `title`
wins over the definition's `name`. Pure: no ComfyUI, no probe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..node_fields import NodeProfile
from ..report import sum_known, to_jsonable

SEPARATOR = ":"
MAX_SUBGRAPHS = 1000
MAX_NAME_CHARS = 200

NO_WORKFLOW_REASON = "the prompt came without its UI workflow (extra_pnginfo.workflow), e.g. queued by a script"
ALL_CACHED_REASON = "no node of the subgraph ran this prompt (all cached)"

# The node-row figures rolled up as the highest value over the descendants: a new one is its
# node-row key here, a field of the same name on SubgraphRollup (SubgraphGpuPeak) and its
# declaration in monitors/vocabulary/subgraph_fields.py.
NODE_PEAKS = ("peak_rss_bytes", "peak_rss_above_start_bytes")
GPU_PEAKS = (
    "peak_allocated_bytes",
    "peak_allocated_above_start_bytes",
    "peak_process_used_bytes",
    "peak_aimdo_used_bytes",
)


@dataclass(frozen=True)
class SubgraphGpuPeak:
    device: str
    peak_allocated_bytes: int | None = None
    peak_allocated_above_start_bytes: int | None = None
    peak_process_used_bytes: int | None = None  # the process's device memory (NVML), where measured
    peak_aimdo_used_bytes: int | None = None  # dynamic VRAM's own figure, where measured

    def to_dict(self) -> dict:
        return {k: to_jsonable(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class SubgraphRollup:
    id: str  # the compound prefix: "54", "54:62"
    parent_id: str | None
    name: str | None
    name_unknown_reason: str | None
    node_ids: tuple[str, ...]
    n_cached: int
    start_offset_s: float | None
    wall_s: float | None
    wall_unknown_reason: str | None
    node_time_sum_s: float | None
    peak_rss_bytes: int | None = None
    peak_rss_above_start_bytes: int | None = None
    gpu_peaks: tuple[SubgraphGpuPeak, ...] = ()

    def to_dict(self) -> dict:
        return {k: to_jsonable(v) for k, v in self.__dict__.items()}


def subgraph_prefixes(node_id: str) -> list[str]:
    """The instances a node sits in, outermost first: "54:62:174" -> ["54", "54:62"]."""
    parts = str(node_id).split(SEPARATOR)
    return [SEPARATOR.join(parts[: i + 1]) for i in range(len(parts) - 1)]


def parent_of(subgraph_id: str) -> str | None:
    head, _, _ = subgraph_id.rpartition(SEPARATOR)
    return head or None


# -- names ---------------------------------------------------------------------------------------


def _definitions(graph: Mapping, found: dict[str, Mapping]) -> None:
    """uuid -> definition, from `definitions.subgraphs` of the graph and of every definition."""
    definitions = graph.get("definitions")
    listed = definitions.get("subgraphs") if isinstance(definitions, Mapping) else None
    for definition in listed if isinstance(listed, list) else ():
        if isinstance(definition, Mapping) and isinstance(definition.get("id"), str):
            if definition["id"] not in found:
                found[definition["id"]] = definition
                _definitions(definition, found)


def _node(graph: Mapping | None, node_id: str) -> Mapping | None:
    nodes = graph.get("nodes") if isinstance(graph, Mapping) else None
    for node in nodes if isinstance(nodes, list) else ():
        if isinstance(node, Mapping) and str(node.get("id")) == node_id:
            return node
    return None


def _text(value) -> str | None:
    return value.strip()[:MAX_NAME_CHARS] if isinstance(value, str) and value.strip() else None


def subgraph_names(workflow: Mapping | None, ids: Iterable[str]) -> dict[str, tuple[str | None, str | None]]:
    """subgraph id -> (name, why it is unknown) from the UI workflow: each prefix's last part is an
    instance node of the graph its parent instance's definition holds (the root for the outermost)."""
    ids = sorted(set(ids), key=lambda s: s.count(SEPARATOR))
    if not isinstance(workflow, Mapping):
        return {i: (None, NO_WORKFLOW_REASON) for i in ids}
    definitions: dict[str, Mapping] = {}
    _definitions(workflow, definitions)
    graphs: dict[str | None, Mapping | None] = {None: workflow}  # instance id -> its definition
    names = {}
    for subgraph_id in ids:
        parent = parent_of(subgraph_id)
        local_id = subgraph_id.rpartition(SEPARATOR)[2]
        graph = graphs.get(parent)
        node = _node(graph, local_id)
        definition = definitions.get(node.get("type")) if node is not None else None
        graphs[subgraph_id] = definition
        if graph is None:
            names[subgraph_id] = (None, f"the definition of the enclosing subgraph {parent} is not in the workflow")
        elif node is None:
            names[subgraph_id] = (None, f"node {local_id} is not in the workflow's graph")
        elif definition is None:
            names[subgraph_id] = (None, f"the workflow holds no subgraph definition {str(node.get('type'))[:80]}")
        else:
            name = _text(node.get("title")) or _text(definition.get("name"))
            names[subgraph_id] = (name, None if name else "neither the instance nor its definition has a name")
    return names


# -- roll-ups ------------------------------------------------------------------------------------


def _highest(values) -> int | None:
    known = [v for v in values if isinstance(v, (int, float))]
    return int(max(known)) if known else None


def _gpu_peaks(rows: Sequence[NodeProfile]) -> tuple[SubgraphGpuPeak, ...]:
    by_device: dict[str, list] = {}
    for row in rows:
        for peak in row.gpu_peaks:
            by_device.setdefault(peak.device, []).append(peak)
    return tuple(
        SubgraphGpuPeak(device, **{f: _highest(getattr(p, f) for p in peaks) for f in GPU_PEAKS})
        for device, peaks in sorted(by_device.items())
    )


def _rollup(subgraph_id: str, rows: Sequence[NodeProfile], name: tuple[str | None, str | None]) -> SubgraphRollup:
    timed = [
        (r.start_offset_s, r.start_offset_s + r.duration_s)
        for r in rows
        if r.start_offset_s is not None and r.duration_s is not None
    ]
    start = min(t[0] for t in timed) if timed else None
    return SubgraphRollup(
        id=subgraph_id,
        parent_id=parent_of(subgraph_id),
        name=name[0],
        name_unknown_reason=name[1],
        node_ids=tuple(r.node_id for r in rows),
        n_cached=sum(1 for r in rows if r.cached),
        start_offset_s=start,
        wall_s=max(t[1] for t in timed) - start if timed else None,
        wall_unknown_reason=None if timed else ALL_CACHED_REASON,
        node_time_sum_s=sum_known(r.duration_s for r in rows),
        **{f: _highest(getattr(r, f) for r in rows) for f in NODE_PEAKS},
        gpu_peaks=_gpu_peaks(rows),
    )


def subgraph_rollups(nodes: Sequence[NodeProfile], workflow: Mapping | None = None) -> tuple[SubgraphRollup, ...]:
    """One roll-up per subgraph instance with a node row below it, in the order its first
    descendant appears in the rows (an enclosing instance before the ones inside it); at most
    MAX_SUBGRAPHS. `workflow`: the prompt's UI workflow, for the names."""
    members: dict[str, list[NodeProfile]] = {}
    for row in nodes:
        for prefix in subgraph_prefixes(row.node_id):
            if prefix in members or len(members) < MAX_SUBGRAPHS:
                members.setdefault(prefix, []).append(row)
    names = subgraph_names(workflow, members)
    return tuple(_rollup(i, rows, names[i]) for i, rows in members.items())

"""Per-node figures from the torch profiler's events: which node launched each op and kernel.

Pure functions over event objects shaped like torch's `FunctionEvent` (name, id, thread,
time_range.start/.end in microseconds, device_type, cpu_parent, linked_correlation_id), so tests
feed fakes. Each executed node is one `record_function` range (see session.py); an op belongs to
the node whose range encloses it, a kernel to the node of the op that launched it (its
`linked_correlation_id` is that op's `id`).

Per node: wall time (its ranges), host op time (the ops directly under its range, their children
included), device time (its kernels), the share of its wall time the GPU was busy with its
kernels, the top operations and the host-device synchronisations the profiler saw.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

US = 1_000_000.0
N_TOP_OPS = 5
# CUDA runtime calls that make the host wait for the device (the profiler records them as host
# events under the op that called them).
SYNC_CALLS = frozenset(
    {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy"}
)
OUTSIDE_OPS = "(kernels launched outside torch ops)"
NO_CUDA_REASON = "no CUDA activity was profiled: this prompt ran without a CUDA device in use"


def is_device_event(event) -> bool:
    kind = getattr(event, "device_type", "CPU")
    return str(getattr(kind, "name", kind)).upper() != "CPU"


@dataclass
class NodeTotals:
    node_id: str
    class_type: str | None
    windows: list[tuple[float, float]] = field(default_factory=list)  # its ranges, microseconds
    host_us: float = 0.0
    device_us: float = 0.0
    n_ops: int = 0
    n_syncs: int = 0
    kernels: list[tuple[float, float]] = field(default_factory=list)
    ops: dict[str, list[float]] = field(default_factory=dict)  # name -> [calls, host_us, device_us]

    @property
    def wall_us(self) -> float:
        return sum(end - start for start, end in self.windows)

    def op(self, name: str) -> list[float]:
        entry = self.ops.get(name)
        if entry is None:
            entry = self.ops[name] = [0, 0.0, 0.0]
        return entry


def _span(event) -> tuple[float, float]:
    return float(event.time_range.start), float(event.time_range.end)


def attribute(events: Iterable, ranges: Mapping[str, tuple[str, str | None]]) -> dict[str, NodeTotals]:
    """node id -> its totals. `ranges`: record_function name -> (node id, class type)."""
    nodes: dict[str, NodeTotals] = {}
    owner: dict[int, tuple[NodeTotals, object] | None] = {}  # id(event) -> (node, its top-level op)
    by_correlation: dict[int, tuple[NodeTotals, object]] = {}
    device_events = []

    def owner_of(event):
        key = id(event)
        if key in owner:
            return owner[key]
        parent = getattr(event, "cpu_parent", None)
        if parent is None:
            found = None
        elif parent.name in ranges:
            found = (node_of(parent), event)
        else:
            found = owner_of(parent)
        owner[key] = found
        return found

    def node_of(range_event) -> NodeTotals:
        node_id, class_type = ranges[range_event.name]
        totals = nodes.get(node_id)
        if totals is None:
            totals = nodes[node_id] = NodeTotals(node_id, class_type)
        return totals

    for event in events:
        if is_device_event(event):
            device_events.append(event)
            continue
        if event.name in ranges:
            node_of(event).windows.append(_span(event))
            by_correlation[getattr(event, "id", -1)] = (node_of(event), None)  # kernels launched outside ops
            continue
        found = owner_of(event)
        if found is None:
            continue
        node, top = found
        if event.name in SYNC_CALLS:
            node.n_syncs += 1
        if top is event:
            start, end = _span(event)
            node.host_us += end - start
            node.n_ops += 1
            entry = node.op(event.name)
            entry[0] += 1
            entry[1] += end - start
        if not getattr(event, "linked_correlation_id", 0):
            by_correlation[getattr(event, "id", -1)] = found
    for kernel in device_events:
        found = by_correlation.get(getattr(kernel, "linked_correlation_id", 0))
        if found is None:
            continue
        node, top = found
        start, end = _span(kernel)
        node.device_us += end - start
        node.kernels.append((start, end))
        node.op(OUTSIDE_OPS if top is None else top.name)[2] += end - start
    return nodes


def busy_us(intervals: list[tuple[float, float]], windows: list[tuple[float, float]]) -> float:
    """Microseconds of `windows` covered by the union of `intervals`."""
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    total = 0.0
    for w_start, w_end in windows:
        for start, end in merged:
            total += max(0.0, min(end, w_end) - max(start, w_start))
    return total


def top_ops(node: NodeTotals, by_device: bool, n: int = N_TOP_OPS) -> list[dict]:
    """The node's top-level ops by device time (by host time without CUDA), with their share of it."""
    column = 2 if by_device else 1
    whole = node.device_us if by_device else node.host_us
    ranked = sorted(node.ops.items(), key=lambda item: (-item[1][column], item[0]))[:n]
    return [
        {
            "name": name,
            "n_calls": int(calls),
            "total_s": (device if by_device else host) / US,
            "host_s": host / US,
            "device_s": device / US if by_device else None,
            "share_pct": 100.0 * (device if by_device else host) / whole if whole > 0 else None,
        }
        for name, (calls, host, device) in ranked
    ]


def node_row(node: NodeTotals, cuda: bool) -> dict:
    """One row of the deep profile's `details.nodes` (fields declared in summary.py)."""
    wall_us = node.wall_us
    device_reason = None if cuda else NO_CUDA_REASON
    busy = None
    if cuda and wall_us > 0:
        busy = 100.0 * busy_us(node.kernels, node.windows) / wall_us
    return {
        "node_id": node.node_id,
        "class_type": node.class_type,
        "wall_s": wall_us / US,
        "host_op_time_s": node.host_us / US,
        "device_time_s": node.device_us / US if cuda else None,
        "device_time_unknown_reason": device_reason,
        "gpu_busy_pct": busy,
        "gpu_busy_unknown_reason": device_reason
        if not cuda
        else (None if busy is not None else "no wall time"),
        "n_syncs": node.n_syncs if cuda else None,
        "n_syncs_unknown_reason": device_reason,
        "n_ops": node.n_ops,
        "top_ops_by": "device" if cuda else "host",
        "top_ops": top_ops(node, by_device=cuda),
    }


def node_rows(nodes: Mapping[str, NodeTotals], cuda: bool) -> list[dict]:
    """Rows in the order the nodes first ran."""
    ordered = sorted(nodes.values(), key=lambda n: min((w[0] for w in n.windows), default=float("inf")))
    return [node_row(n, cuda) for n in ordered]


def _sum(rows: list[dict], name: str):
    values = [r[name] for r in rows if r.get(name) is not None]
    return sum(values) if values else None


def totals(rows: list[dict], cuda: bool) -> dict:
    """The summary figures over the node rows."""
    wall = _sum(rows, "wall_s")
    device = _sum(rows, "device_time_s") if cuda else None
    busy = None
    if cuda and wall:
        busy = sum((r["gpu_busy_pct"] or 0.0) * r["wall_s"] for r in rows) / wall
    slowest = max(rows, key=lambda r: r.get("wall_s") or 0.0, default=None)
    return {
        "n_nodes_profiled": len(rows),
        "nodes_wall_s": wall,
        "host_op_time_s": _sum(rows, "host_op_time_s"),
        "device_time_s": device,
        "gpu_busy_pct": busy,
        "n_syncs": _sum(rows, "n_syncs") if cuda else None,
        "slowest_node": None
        if slowest is None
        else f"#{slowest['node_id']} {slowest['class_type'] or ''}".strip(),
    }

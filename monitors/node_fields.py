"""A node row (`nodes[]` of a report) and its GPU peaks: the records the engine makes, each figure
declared once on its field (label, unit, description; its JSON type from its annotation). From them
come `NODE_ROW` and `GPU_PEAK` in the language of monitors/detail_fields.py (stages embed node rows
in their details), the schema's `node` and `gpu_peak`, the panel's labels
(web/lib/vocabulary.generated.mjs `NODE_FIELDS`) and the node rows' rows of
docs/metrics-reference.md. Code that reads one figure of a row names it through node_key /
gpu_peak_key, so a renamed figure fails at import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from .detail_fields import DetailGroup
from .summary_fields import SummaryField

GPU_TIME_CAVEAT = (
    "GPU span (gpu_time_s) is the time between CUDA events recorded on the current stream of the "
    "current device when the node starts and ends: the node's span on that stream, idle time included. "
    "A node that waits for the GPU (a save, a loader that synchronises) gets its whole wall time; it also "
    "counts work queued before the node that was still running, and misses the node's kernels on other "
    "streams or devices. Wall time is when the host ran the node."
)
GPU_BUSY_CAVEAT = (
    "GPU busy (gpu_busy_s) is the time a kernel ran on that device within the node's window, from NVML's "
    "utilization samples: an idle node shows about 0. It counts other processes' kernels on the same GPU, "
    "is good to about one sampling period (1/6 s to 1 s) at each end, and is unknown for a node shorter "
    "than that period."
)
GPU_TIME_NO_CUDA = "no CUDA device in use by this process"

_ROW = "row figure"
_GROUP = "row group"
ANNOTATION_JSON_TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def _meta(label: str, unit: str | None, description: str, choices, json_type) -> dict:
    return {
        _ROW: {
            "label": label,
            "unit": unit,
            "description": description,
            "choices": choices,
            "json_type": json_type,
        }
    }


def required(label: str, unit: str | None, description: str, *, choices=None, json_type=None) -> Any:
    """A figure every row has (given first, in order, when the row is made)."""
    return field(metadata=_meta(label, unit, description, choices, json_type))


def row_figure(
    label: str, unit: str | None, description: str, *, choices=None, json_type=None, default=None
) -> Any:
    """A figure a row may leave unknown (None by default). `json_type`: where the annotation's is
    not the schema's (a change of whole bytes written as a number)."""
    return field(default=default, metadata=_meta(label, unit, description, choices, json_type))


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, tuple):
        return [_plain(v.to_dict() if hasattr(v, "to_dict") else v) for v in value]
    return value


class _RowRecord:
    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def declared(record: type, groups: Mapping[str, DetailGroup] | None = None) -> tuple:
    """The record's fields as detail declarations, in order (a nested row: its group)."""
    out = []
    for f in fields(record):
        if _GROUP in f.metadata:
            out.append((groups or {})[f.name])
            continue
        meta = f.metadata[_ROW]
        annotation = str(f.type)
        base, _, none = annotation.partition(" | ")
        json_type = meta["json_type"] or ANNOTATION_JSON_TYPES[base]
        nullable = none == "None"
        out.append(
            SummaryField(
                f.name,
                meta["label"],
                meta["unit"],
                meta["description"],
                json_type,
                nullable=nullable,
                choices=meta["choices"],
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class GpuPeak(_RowRecord):
    """Per device the node used: torch allocator peaks (reset at the node's start) and counters (read
    by the span anyway: they cost nothing more), and this process's device memory beside torch's
    counters (monitors/probes/aimdo.py, nvml.py), None with the reason."""

    device: str = required("device", None, "the torch device (cuda:0)")
    peak_allocated_bytes: int | None = required(
        "GPU allocated peak",
        "bytes",
        "highest memory held by tensors while the node ran; absolute: includes what other work left allocated",
    )
    peak_reserved_bytes: int | None = required(
        "GPU reserved peak", "bytes", "highest memory reserved by the caching allocator while the node ran"
    )
    peak_allocated_above_start_bytes: int | None = row_figure(
        "GPU allocated added",
        "bytes",
        "allocated peak minus allocated at the node's start: what the node itself added",
    )
    peak_reserved_above_start_bytes: int | None = row_figure(
        "GPU reserved added", "bytes", "reserved peak minus reserved at the node's start"
    )
    allocated_start_bytes: int | None = row_figure(
        "GPU allocated at start",
        "bytes",
        "torch allocator counter of the device allocated at the node's start",
    )
    allocated_end_bytes: int | None = row_figure(
        "GPU allocated at end", "bytes", "torch allocator counter of the device allocated at the node's end"
    )
    allocated_change_bytes: int | None = row_figure("GPU allocated change", "bytes", "end minus start")
    reserved_start_bytes: int | None = row_figure(
        "GPU reserved at start", "bytes", "torch allocator counter of the device reserved at the node's start"
    )
    reserved_end_bytes: int | None = row_figure(
        "GPU reserved at end", "bytes", "torch allocator counter of the device reserved at the node's end"
    )
    reserved_change_bytes: int | None = row_figure("GPU reserved change", "bytes", "end minus start")
    peak_allocated_at_s: float | None = row_figure(
        "GPU allocated peak time", "s", "seconds after the node's start"
    )
    peak_reserved_at_s: float | None = row_figure(
        "GPU reserved peak time", "s", "seconds after the node's start"
    )
    peak_process_used_bytes: int | None = row_figure(
        "process device memory peak",
        "bytes",
        "this process's device memory as the driver counts it (NVML, per process): torch's reserved blocks, allocations outside torch (dynamic VRAM's, cuMem) and the CUDA context; the highest reading at the node's start, end and the sampler's ticks",
    )
    process_used_unknown_reason: str | None = row_figure(
        "process device memory unknown",
        None,
        "why peak_process_used_bytes is null (no NVML, the process not in NVML's list: another PID namespace)",
    )
    peak_aimdo_used_bytes: int | None = row_figure(
        "dynamic VRAM peak",
        "bytes",
        "VRAM comfy-aimdo holds (dynamic VRAM's weights and cast buffers, outside torch's counters), by its own count; the highest reading while the node ran",
    )
    aimdo_used_unknown_reason: str | None = row_figure(
        "dynamic VRAM unknown",
        None,
        "why peak_aimdo_used_bytes is null (dynamic VRAM off, comfy-aimdo without the figure)",
    )


@dataclass(frozen=True)
class NodeProfile(_RowRecord):
    """One row per node the prompt ran or took from the cache: cheap figures only (process RSS and
    torch allocator counters); what the node itself added is its peak above its start."""

    node_id: str = required("node id", None, "the node's id in the prompt")
    class_type: str | None = required("node class", None, "the node's class")
    status: str = required(
        "status",
        None,
        "executed, cached, error or interrupted",
        choices=("executed", "cached", "error", "interrupted"),
    )
    cached: bool = required("cached", None, "ComfyUI took the node's outputs from its cache")
    start_offset_s: float | None = row_figure("start", "s", "seconds after the prompt's start")
    duration_s: float | None = row_figure("node time", "s", "ComfyUI progress hook, node start to finish")
    peak_rss_bytes: int | None = row_figure(
        "peak RSS",
        "bytes",
        "the process's highest RSS while the node ran, its baseline included (VmHWM reset at the node's start)",
    )
    peak_rss_method: str | None = row_figure(
        "peak RSS method",
        None,
        "kernel_hwm (VmHWM, exact) or sampled (the sampler's highest tick)",
        choices=("kernel_hwm", "sampled"),
    )
    rss_change_bytes: int | None = row_figure(
        "RSS change", "bytes", "RSS at the node's end minus at its start", json_type="number"
    )
    gpu_peaks: tuple[GpuPeak, ...] = field(default=(), metadata={_GROUP: True})
    title: str | None = row_figure("title", None, "the node's title in the workflow")
    peak_rss_above_start_bytes: int | None = row_figure(
        "peak RSS above start",
        "bytes",
        "peak RSS minus RSS at the node's start: what the node itself added (peak_rss_bytes is the process's, baseline included)",
    )
    rss_start_bytes: int | None = row_figure("RSS at start", "bytes", "process RSS at the node's start")
    rss_end_bytes: int | None = row_figure("RSS at end", "bytes", "process RSS at the node's end")
    peak_rss_at_s: float | None = row_figure(
        "peak RSS time",
        "s",
        "seconds after the node's start when the RSS peak was seen (kernel_hwm: when it was read)",
    )
    gpu_time_s: float | None = row_figure("GPU span", "s", GPU_TIME_CAVEAT)
    gpu_time_unknown_reason: str | None = row_figure(
        "GPU span unknown",
        None,
        "why gpu_time_s is null (no CUDA device in use, CUDA initialised during the node, events unreadable, read only at the prompt's end); null for cached nodes",
    )
    gpu_busy_s: float | None = row_figure("GPU busy", "s", GPU_BUSY_CAVEAT)
    gpu_busy_unknown_reason: str | None = row_figure(
        "GPU busy unknown",
        None,
        "why gpu_busy_s is null (the node shorter than NVML's sampling period, no NVML, no sample after the node yet, no CUDA device in use); null for cached nodes",
    )
    weights_loaded_bytes: int | None = row_figure(
        "weights loaded",
        "bytes",
        "model weights the model manager loaded while the node ran (ComfyUI's loaded_size() after minus before, run.model_residency's events); null: none moved",
    )
    weights_unloaded_bytes: int | None = row_figure(
        "weights unloaded",
        "bytes",
        "model weights unloaded while the node ran (to make room, or an explicit free); null: none moved",
    )
    weights_moved_s: float | None = row_figure(
        "weights moved time",
        "s",
        "seconds of the node's time spent loading, unloading and patching model weights",
    )


GPU_PEAK = DetailGroup(
    "gpu_peaks",
    "GPU peaks",
    "per device the node used: torch allocator peaks (reset at the node's start) and counters",
    declared(GpuPeak),
    repeated="list",
    nullable=False,
)

NODE_ROW = DetailGroup(
    "nodes",
    "node row",
    "one row per node the prompt ran or took from the cache: cheap figures only (process RSS and torch "
    "allocator counters)",
    declared(NodeProfile, {"gpu_peaks": GPU_PEAK}),
    repeated="list",
    nullable=False,
)


def node_key(name: str) -> str:
    """A declared node-row key, for code that reads one figure: an undeclared name fails at import."""
    if NODE_ROW.key(name) is None:
        raise KeyError(f"node rows declare no key {name!r}")
    return name


def gpu_peak_key(name: str) -> str:
    """A declared key of a node row's GPU peak (`peak_allocated_bytes`), as node_key."""
    if GPU_PEAK.key(name) is None:
        raise KeyError(f"GPU peaks declare no key {name!r}")
    return name


def node_gpu_peak(node: Mapping, name: str = "peak_allocated_bytes") -> int | float | None:
    """The highest value of a declared GPU-peak figure over a node row's devices (a row read back
    from a report); None when no device reported it."""
    key = gpu_peak_key(name)
    values = [p.get(key) for p in node.get(GPU_PEAK.name) or () if isinstance(p, Mapping)]
    values = [v for v in values if isinstance(v, (int, float))]
    return max(values) if values else None

"""The figures of a node row (`nodes[]`, monitors.report.NodeProfile) and of its GPU peaks
(GpuPeak), declared in the language of monitors/detail_fields.py, since stages embed node rows in
their details. From this one declaration come the `node` and `gpu_peak` definitions of the schema,
the panel's labels (web/lib/vocabulary.generated.mjs `NODE_FIELDS`) and the node rows' rows of
docs/metrics-reference.md; a unit test keeps the declaration and the dataclasses the same. Code that
reads one figure of a row names it through node_key / gpu_peak_key, so a renamed figure fails at
import.
"""

from __future__ import annotations

from collections.abc import Mapping

from .detail_fields import DetailGroup
from .report import GPU_BUSY_CAVEAT, GPU_TIME_CAVEAT
from .summary_fields import SummaryField as F

_TORCH = "torch allocator counter of the device"


def _gpu(counter: str, what: str) -> tuple[F, ...]:
    return (
        F(
            f"{counter}_start_bytes",
            f"GPU {what} at start",
            "bytes",
            f"{_TORCH} {what} at the node's start",
            "integer",
        ),
        F(
            f"{counter}_end_bytes",
            f"GPU {what} at end",
            "bytes",
            f"{_TORCH} {what} at the node's end",
            "integer",
        ),
        F(f"{counter}_change_bytes", f"GPU {what} change", "bytes", "end minus start", "integer"),
    )


GPU_PEAK = DetailGroup(
    "gpu_peaks",
    "GPU peaks",
    "per device the node used: torch allocator peaks (reset at the node's start) and counters",
    (
        F("device", "device", None, "the torch device (cuda:0)", "string", nullable=False),
        F(
            "peak_allocated_bytes",
            "GPU allocated peak",
            "bytes",
            "highest memory held by tensors while the node ran; absolute: includes what other work left allocated",
            "integer",
        ),
        F(
            "peak_reserved_bytes",
            "GPU reserved peak",
            "bytes",
            "highest memory reserved by the caching allocator while the node ran",
            "integer",
        ),
        F(
            "peak_allocated_above_start_bytes",
            "GPU allocated added",
            "bytes",
            "allocated peak minus allocated at the node's start: what the node itself added",
            "integer",
        ),
        F(
            "peak_reserved_above_start_bytes",
            "GPU reserved added",
            "bytes",
            "reserved peak minus reserved at the node's start",
            "integer",
        ),
        *_gpu("allocated", "allocated"),
        *_gpu("reserved", "reserved"),
        F("peak_allocated_at_s", "GPU allocated peak time", "s", "seconds after the node's start", "number"),
        F("peak_reserved_at_s", "GPU reserved peak time", "s", "seconds after the node's start", "number"),
        F(
            "peak_process_used_bytes",
            "process device memory peak",
            "bytes",
            "this process's device memory as the driver counts it (NVML, per process): torch's reserved "
            "blocks, allocations outside torch (dynamic VRAM's, cuMem) and the CUDA context; the highest "
            "reading at the node's start, end and the sampler's ticks",
            "integer",
        ),
        F(
            "process_used_unknown_reason",
            "process device memory unknown",
            None,
            "why peak_process_used_bytes is null (no NVML, the process not in NVML's list: another PID "
            "namespace)",
            "string",
        ),
        F(
            "peak_aimdo_used_bytes",
            "dynamic VRAM peak",
            "bytes",
            "VRAM comfy-aimdo holds (dynamic VRAM's weights and cast buffers, outside torch's counters), "
            "by its own count; the highest reading while the node ran",
            "integer",
        ),
        F(
            "aimdo_used_unknown_reason",
            "dynamic VRAM unknown",
            None,
            "why peak_aimdo_used_bytes is null (dynamic VRAM off, comfy-aimdo without the figure)",
            "string",
        ),
    ),
    repeated="list",
    nullable=False,
)

NODE_ROW = DetailGroup(
    "nodes",
    "node row",
    "one row per node the prompt ran or took from the cache: cheap figures only (process RSS and torch "
    "allocator counters)",
    (
        F("node_id", "node id", None, "the node's id in the prompt", "string", nullable=False),
        F("class_type", "node class", None, "the node's class", "string"),
        F(
            "status",
            "status",
            None,
            "executed, cached, error or interrupted",
            "string",
            nullable=False,
            choices=("executed", "cached", "error", "interrupted"),
        ),
        F(
            "cached",
            "cached",
            None,
            "ComfyUI took the node's outputs from its cache",
            "boolean",
            nullable=False,
        ),
        F("start_offset_s", "start", "s", "seconds after the prompt's start", "number"),
        F("duration_s", "node time", "s", "ComfyUI progress hook, node start to finish", "number"),
        F(
            "peak_rss_bytes",
            "peak RSS",
            "bytes",
            "the process's highest RSS while the node ran, its baseline included (VmHWM reset at the node's start)",
            "integer",
        ),
        F(
            "peak_rss_method",
            "peak RSS method",
            None,
            "kernel_hwm (VmHWM, exact) or sampled (the sampler's highest tick)",
            "string",
            choices=("kernel_hwm", "sampled"),
        ),
        F("rss_change_bytes", "RSS change", "bytes", "RSS at the node's end minus at its start", "number"),
        GPU_PEAK,
        F("title", "title", None, "the node's title in the workflow", "string"),
        F(
            "peak_rss_above_start_bytes",
            "peak RSS above start",
            "bytes",
            "peak RSS minus RSS at the node's start: what the node itself added (peak_rss_bytes is the "
            "process's, baseline included)",
            "integer",
        ),
        F("rss_start_bytes", "RSS at start", "bytes", "process RSS at the node's start", "integer"),
        F("rss_end_bytes", "RSS at end", "bytes", "process RSS at the node's end", "integer"),
        F(
            "peak_rss_at_s",
            "peak RSS time",
            "s",
            "seconds after the node's start when the RSS peak was seen (kernel_hwm: when it was read)",
            "number",
        ),
        F("gpu_time_s", "GPU span", "s", GPU_TIME_CAVEAT, "number"),
        F(
            "gpu_time_unknown_reason",
            "GPU span unknown",
            None,
            "why gpu_time_s is null (no CUDA device in use, CUDA initialised during the node, events "
            "unreadable, read only at the prompt's end); null for cached nodes",
            "string",
        ),
        F("gpu_busy_s", "GPU busy", "s", GPU_BUSY_CAVEAT, "number"),
        F(
            "gpu_busy_unknown_reason",
            "GPU busy unknown",
            None,
            "why gpu_busy_s is null (the node shorter than NVML's sampling period, no NVML, no sample after "
            "the node yet, no CUDA device in use); null for cached nodes",
            "string",
        ),
        F(
            "weights_loaded_bytes",
            "weights loaded",
            "bytes",
            "model weights the model manager loaded while the node ran (ComfyUI's loaded_size() after minus "
            "before, run.model_residency's events); null: none moved",
            "integer",
        ),
        F(
            "weights_unloaded_bytes",
            "weights unloaded",
            "bytes",
            "model weights unloaded while the node ran (to make room, or an explicit free); null: none moved",
            "integer",
        ),
        F(
            "weights_moved_s",
            "weights moved time",
            "s",
            "seconds of the node's time spent loading, unloading and patching model weights",
            "number",
        ),
    ),
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

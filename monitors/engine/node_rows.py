"""Node rows: a NodeProfile made from a closed span (a node of a prompt, a stage of a profiled
session), and what a node row says the node itself needed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..node_fields import GpuPeak, NodeProfile


def node_profile_from_span(
    node_id,
    class_type,
    title,
    status,
    result,
    run_started_unix_s,
    gpu_time_unknown_reason=None,
    device_memory_reasons: Callable[[int], Mapping[str, str | None]] | None = None,
) -> NodeProfile:
    """A per-node (or per-stage) row from a closed span (a monitors.engine.span.SpanResult).
    `device_memory_reasons`: device index -> why each process device memory figure is unknown
    (Probes.device_memory_unknown_reasons)."""
    rss_change = result.changes.get("process_rss_bytes")
    devices = sorted({metric.split(".")[0] for metric in result.peaks if metric.startswith("cuda:")})
    return NodeProfile(
        node_id=node_id,
        class_type=class_type,
        title=title,
        status=status,
        cached=False,
        start_offset_s=result.start_unix_s - run_started_unix_s,
        duration_s=result.duration_s,
        peak_rss_bytes=result.peak_rss_bytes,
        peak_rss_method=result.peak_rss_method,
        rss_change_bytes=None if rss_change is None else rss_change.delta,
        gpu_peaks=tuple(_gpu_peak(result, d, device_memory_reasons) for d in devices),
        peak_rss_above_start_bytes=_int_or_none(result.above_start("process_rss_bytes")),
        rss_start_bytes=None if rss_change is None else _int_or_none(rss_change.before),
        rss_end_bytes=None if rss_change is None else _int_or_none(rss_change.after),
        peak_rss_at_s=_peak_at_s(result, "process_rss_bytes"),
        gpu_time_unknown_reason=gpu_time_unknown_reason,
    )


def _peak_at_s(result, metric: str) -> float | None:
    peak = result.peaks.get(metric)
    return None if peak is None else peak.at_s


def _gpu_peak(result, device: str, device_memory_reasons=None) -> GpuPeak:
    changes = {c: result.changes.get(f"{device}.{c}") for c in ("allocated_bytes", "reserved_bytes")}

    def part(counter: str, name: str):
        change = changes[counter]
        return None if change is None else _int_or_none(getattr(change, name))

    return GpuPeak(
        device,
        _int_or_none(result.peak(f"{device}.allocated_bytes")),
        _int_or_none(result.peak(f"{device}.reserved_bytes")),
        _int_or_none(result.above_start(f"{device}.allocated_bytes")),
        _int_or_none(result.above_start(f"{device}.reserved_bytes")),
        allocated_start_bytes=part("allocated_bytes", "before"),
        allocated_end_bytes=part("allocated_bytes", "after"),
        allocated_change_bytes=part("allocated_bytes", "delta"),
        reserved_start_bytes=part("reserved_bytes", "before"),
        reserved_end_bytes=part("reserved_bytes", "after"),
        reserved_change_bytes=part("reserved_bytes", "delta"),
        peak_allocated_at_s=_peak_at_s(result, f"{device}.allocated_bytes"),
        peak_reserved_at_s=_peak_at_s(result, f"{device}.reserved_bytes"),
        **_device_memory(result, device, device_memory_reasons),
    )


def _device_memory(result, device: str, device_memory_reasons) -> dict:
    """The process device memory peaks of one device, each None with its reason where unknown."""
    figures = {}
    reasons = None
    for name in ("process_used", "aimdo_used"):
        peak = _int_or_none(result.peak(f"{device}.{name}_bytes"))
        reason = None
        if peak is None:
            if reasons is None:
                reasons = _reasons_of(device, device_memory_reasons)
            reason = reasons.get(f"{name}_bytes") or "not read while the node ran"
        figures[f"peak_{name}_bytes"], figures[f"{name}_unknown_reason"] = peak, reason
    return figures


def _reasons_of(device: str, device_memory_reasons) -> Mapping[str, str | None]:
    if device_memory_reasons is None:
        return {}
    try:
        return device_memory_reasons(_device_index(device))
    except Exception as exc:
        return dict.fromkeys(("process_used_bytes", "aimdo_used_bytes"), f"{type(exc).__name__}: {exc}")


def _device_index(device: str) -> int:
    return int(device.rsplit(":", 1)[-1]) if ":" in device else 0


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)


def node_memory_above_start(node: Mapping[str, Any]) -> int | float | None:
    """What a node row says the node itself needed: its largest GPU allocated peak above its start,
    else its RSS peak above its start; None for rows without these figures (cached, older reports)."""
    gpu = [
        p.get("peak_allocated_above_start_bytes")
        for p in node.get("gpu_peaks") or []
        if isinstance(p, Mapping) and isinstance(p.get("peak_allocated_above_start_bytes"), (int, float))
    ]
    if gpu:
        return max(gpu)
    rss = node.get("peak_rss_above_start_bytes")
    return rss if isinstance(rss, (int, float)) else None

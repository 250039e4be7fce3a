"""What the text encoding cost, over every encode node of the prompt: total time, the memory each
encoder added (from its per-node profile row), the check against a memory budget, and the
diffusion model's identity at encode time when the monitor is given the MODEL."""

from __future__ import annotations

from collections.abc import Mapping

from ..engine.node_rows import node_memory_above_start
from ..models.state import describe_model
from ..report import format_bytes, sum_known

NO_MODEL_REASON = "no MODEL connected to the conditioning monitor (connect it to record the diffusion model)"
NO_BUDGET_REASON = "no memory budget set (memory_budget_mib is 0)"


def _gpu_figure(profile: Mapping, key: str) -> int | None:
    values = [
        p.get(key)
        for p in profile.get("gpu_peaks") or ()
        if isinstance(p, Mapping) and isinstance(p.get(key), (int, float))
    ]
    return max(values) if values else None


def encoder_impact(encoder: Mapping, sides: list[str]) -> dict:
    """One encode node's time and memory impact, from its profile row (None where it was not seen)."""
    profile = encoder.get("profile") or {}
    return {
        "node_id": encoder.get("node_id"),
        "class_type": encoder.get("class_type"),
        "sides": sides,
        "cached": profile.get("cached"),
        "duration_s": profile.get("duration_s"),
        "memory_above_start_bytes": node_memory_above_start(profile),
        "peak_rss_bytes": profile.get("peak_rss_bytes"),
        "peak_rss_above_start_bytes": profile.get("peak_rss_above_start_bytes"),
        "peak_rss_at_s": profile.get("peak_rss_at_s"),
        "rss_change_bytes": profile.get("rss_change_bytes"),
        "peak_gpu_allocated_above_start_bytes": _gpu_figure(profile, "peak_allocated_above_start_bytes"),
        "gpu_allocated_change_bytes": _gpu_figure(profile, "allocated_change_bytes"),
        "peak_gpu_reserved_above_start_bytes": _gpu_figure(profile, "peak_reserved_above_start_bytes"),
        "gpu_reserved_change_bytes": _gpu_figure(profile, "reserved_change_bytes"),
    }


def describe_encode(sides: Mapping[str, Mapping], memory_budget_bytes: int | None) -> tuple[dict, list]:
    """(details.encode, findings as (level, message, code)) over the distinct encode nodes of all sides."""
    by_node: dict[str, dict] = {}
    side_names: dict[str, list[str]] = {}
    for where, side in sides.items():
        for encoder in side.get("encoders") or ():
            node_id = str(encoder.get("node_id"))
            by_node.setdefault(node_id, encoder)
            side_names.setdefault(node_id, []).append(where)
    encoders = [encoder_impact(e, side_names[n]) for n, e in by_node.items()]
    total_s = sum_known(e["duration_s"] for e in encoders)
    above = [e["memory_above_start_bytes"] for e in encoders if e["memory_above_start_bytes"] is not None]
    peak_above = max(above) if above else None
    findings = []
    exceeded = None
    if memory_budget_bytes and peak_above is not None:
        exceeded = peak_above > memory_budget_bytes
        for e in encoders:
            used = e["memory_above_start_bytes"]
            if used is not None and used > memory_budget_bytes:
                findings.append(
                    (
                        "warning",
                        f"text encode node {e['node_id']} ({e['class_type']}) needed {format_bytes(used)}, "
                        f"above the memory budget of {format_bytes(memory_budget_bytes)}",
                        "memory_budget_exceeded",
                    )
                )
    if not memory_budget_bytes:
        budget_reason = NO_BUDGET_REASON
    elif peak_above is None:
        budget_reason = "no encode node's memory was measured (cached, or not profiled)"
    else:
        budget_reason = None
    encode = {
        "total_s": total_s,
        "n_encoders": len(encoders),
        "peak_above_start_bytes": peak_above,  # what the budget is checked against: GPU, else RSS
        "peak_gpu_allocated_above_start_bytes": _largest(encoders, "peak_gpu_allocated_above_start_bytes"),
        "peak_rss_above_start_bytes": _largest(encoders, "peak_rss_above_start_bytes"),
        "encoders": encoders,
        "memory_budget": {
            "budget_bytes": memory_budget_bytes or None,
            "exceeded": exceeded,
            "unknown_reason": budget_reason,
        },
    }
    return encode, findings


def _largest(encoders: list[dict], key: str) -> int | None:
    values = [e[key] for e in encoders if isinstance(e.get(key), (int, float))]
    return max(values) if values else None


def describe_diffusion_model(model) -> dict:
    """The diffusion model's id, class and device as the encode saw them; None with a reason without one."""
    if model is None:
        return {
            "object_id": None,
            "class": None,
            "module_class": None,
            "device": None,
            "unknown_reason": NO_MODEL_REASON,
        }
    try:
        info = describe_model(model)
    except Exception as exc:  # a model that cannot be described still leaves its class
        return {
            "object_id": id(model),
            "class": type(model).__name__,
            "module_class": None,
            "device": None,
            "unknown_reason": f"describing the model failed: {type(exc).__name__}: {exc}",
        }
    return {
        "object_id": info.get("object_id"),
        "class": info.get("class"),
        "module_class": info.get("module_class"),
        "model_type": info.get("model_type"),
        "device": info.get("device"),
        "load_device": info.get("load_device"),
        "patches_uuid": info.get("patches_uuid"),
        "unknown_reason": None,
    }

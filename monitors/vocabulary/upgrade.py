"""Reports of schema versions 1 to 3 in the current names: the v1 -> v2 key renames each kind
declares, the v2 -> v3 split of a figure whose meaning changed with the machine, and the v3 -> v4
input rate of the VAE step in MiB (it was in 10^6 bytes)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import report as run_report
from .registry import vocabulary


def upgrade_summary(kind: str, summary: Mapping[str, Any], from_version: int) -> dict:
    vocab = vocabulary(kind)
    if vocab is None or from_version >= 2:
        return dict(summary)
    renames = vocab.v1_renames
    return {renames.get(k, k): v for k, v in summary.items()}


def _largest_of_encoders(details: Any, key: str) -> int | float | None:
    encode = details.get("encode") if isinstance(details, Mapping) else None
    encoders = encode.get("encoders") if isinstance(encode, Mapping) else None
    values = [
        e.get(key) for e in encoders or () if isinstance(e, Mapping) and isinstance(e.get(key), (int, float))
    ]
    return max(values) if values else None


def _upgrade_v2_summary(kind: str, summary: dict, details: Any) -> dict:
    """Version 2 -> 3: a figure whose meaning changed with the machine is split by what it is,
    from the per-encoder figures the step's details kept."""
    if kind == "conditioning" and "encode_peak_above_start_bytes" in summary:
        summary.pop("encode_peak_above_start_bytes")
        for key in ("peak_gpu_allocated_above_start_bytes", "peak_rss_above_start_bytes"):
            summary[f"encode_{key}"] = _largest_of_encoders(details, key)
    return summary


MB_PER_MIB = 1024**2 / 1e6


def _upgrade_v3_summary(kind: str, summary: dict) -> dict:
    """Version 3 -> 4: the VAE step's input rate in MiB per second (was 10^6 bytes per second)."""
    if kind == "vae_encode" and "input_mb_per_s" in summary:
        rate = summary.pop("input_mb_per_s")
        summary["input_mib_per_s"] = rate / MB_PER_MIB if isinstance(rate, (int, float)) else rate
    return summary


def upgrade_report(report: Mapping[str, Any]) -> dict:
    """A report of schema_version 1, 2 or 3 in the current names (a copy); others as they are."""
    version = report.get("schema_version")
    if version not in (1, 2, 3):
        return dict(report)
    out = dict(report)
    out["steps"] = [
        {
            **step,
            "summary": _upgrade_v3_summary(
                step.get("kind"),
                _upgrade_v2_summary(
                    step.get("kind"),
                    upgrade_summary(step.get("kind"), step.get("summary") or {}, version),
                    step.get("details"),
                )
                if version < 3
                else dict(step.get("summary") or {}),
            ),
        }
        if isinstance(step, Mapping)
        else step
        for step in report.get("steps") or []
    ]
    out["schema_version"] = run_report.SCHEMA_VERSION
    return out

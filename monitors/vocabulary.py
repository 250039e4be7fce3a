"""One metric vocabulary: every step kind declares its summary fields once, here and in
`monitors/<kind>/summary.py`, and everything else is derived from that declaration: the per-kind
`summary` definitions of `schemas/run_report.schema.json`, the labels and units of the HTML report
and of the panel (`web/lib/vocabulary.generated.mjs`), the node's UI text, and the v1 -> v2 key
renames applied when an older report is read.

The declarations are written in `monitors/summary_fields.py`'s terms; `python -m
monitors.generated_files --write` regenerates the schema, the panel module and
docs/metrics-reference.md from them (`--check` exits 1 when one is stale; a unit test does the same).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

from . import report as run_report
from .summary_fields import StepKindVocabulary, SummaryField

MISSING = "–"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- registry -------------------------------------------------------------------------------------


_REGISTRY: dict[str, StepKindVocabulary] | None = None


def registry() -> dict[str, StepKindVocabulary]:
    """kind -> its declaration, in the order of monitors.report.STEP_KINDS."""
    global _REGISTRY
    if _REGISTRY is None:
        # Imported on first use: importing monitors.profiling runs its whole API, which renders
        # HTML with this module.
        from .conditioning.summary import CONDITIONING
        from .deep_profile.summary import DEEP_PROFILE
        from .dumps.summary import TENSOR_COMPARE, TENSOR_DUMP
        from .latent.summary import LATENT
        from .lora.summary import LORA
        from .models.summary import MODELS
        from .profiling.summary import PROFILING
        from .vae.summary import VAE_ENCODE

        kinds = (
            MODELS, LORA, CONDITIONING, VAE_ENCODE, LATENT, TENSOR_DUMP, TENSOR_COMPARE, PROFILING, DEEP_PROFILE
        )
        by_kind = {k.kind: k for k in kinds}
        if tuple(by_kind) != tuple(run_report.STEP_KINDS):
            raise RuntimeError(f"vocabulary kinds {tuple(by_kind)} differ from STEP_KINDS {run_report.STEP_KINDS}")
        _REGISTRY = by_kind
    return _REGISTRY


def vocabulary(kind: str) -> StepKindVocabulary | None:
    return registry().get(kind)


def summary_field(kind: str, name: str) -> SummaryField | None:
    vocab = vocabulary(kind)
    return None if vocab is None else vocab.field(name)


def names(kind: str) -> tuple[str, ...]:
    return registry()[kind].names


def key(kind: str, name: str) -> str:
    """A declared summary key, for code that reads one figure (exporters): a name the kind does not
    declare fails at import instead of reading None forever."""
    if summary_field(kind, name) is None:
        raise KeyError(f"{kind!r} declares no summary key {name!r}")
    return name


# -- the memory picture of a step (monitors.span.memory_picture) ---------------------------------

# The rows a step's "Memory" table shows, in order: where each figure sits in `details.memory`
# (`group` None: at the top; "system_ram": under it; "gpu": in each entry of `gpus`, one row per
# device), its label, and the reason key of `unknown_reasons` that explains it when unread. One
# declaration for the panel (generated into web/lib/vocabulary.generated.mjs) and the HTML report.
MEMORY_ROWS: tuple[dict[str, Any], ...] = (
    {"group": None, "field": "process_rss_bytes", "label": "process RSS", "reason": None,
     "description": "resident memory of this process"},
    {"group": "system_ram", "field": "used_bytes", "label": "RAM used", "reason": "system_ram",
     "description": "system RAM in use (all processes)"},
    {"group": "system_ram", "field": "available_bytes", "label": "RAM available", "reason": "system_ram",
     "description": "system RAM available; its extreme is the low point, not a peak"},
    {"group": "gpu", "field": "allocated_bytes", "label": "allocated", "reason": None,
     "description": "torch allocator: memory held by tensors"},
    {"group": "gpu", "field": "reserved_bytes", "label": "reserved", "reason": None,
     "description": "torch allocator: memory reserved by its caching allocator"},
    {"group": "gpu", "field": "nvml_used_bytes", "label": "NVML used", "reason": "gpu_nvml",
     "description": "device memory in use as NVML reports it (all processes)"},
)
MEMORY_NOT_READ_REASON = "not read by this span"

# The GPU figures of a node row: short label (a column) and what each measures (its title).
NODE_GPU_FIGURES = {
    "gpu_time_s": {"label": "GPU span", "description": run_report.GPU_TIME_CAVEAT},
    "gpu_busy_s": {"label": "GPU busy", "description": run_report.GPU_BUSY_CAVEAT},
}


# -- formatting (HTML report and node text; web/lib/format.mjs mirrors it) -------------------------


def format_bytes(n: int | float | None) -> str:
    return MISSING if n is None else run_report.format_bytes(n)


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return MISSING
    a = abs(seconds)
    if a < 1:
        return f"{seconds * 1000:.1f} ms" if a < 0.01 else f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s" if a < 120 else f"{seconds / 60:.1f} min"


def _plain_number(value: float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    a = abs(value)
    if a != 0 and (a < 1e-3 or a >= 1e6):
        return f"{value:.3e}"
    return f"{value:.4g}"


def unit_of_key(name: str) -> str | None:
    """The unit a name implies, for keys that are not declared (run-level figures, unknown kinds)."""
    if name.endswith("_per_s"):
        return "per_s"
    if name.endswith("_bytes"):
        return "bytes"
    if name.endswith("_s"):
        return "s"
    if name.endswith("_pct"):
        return "pct"
    if name.endswith("_ratio"):
        return "ratio"
    return None


def format_with_unit(unit: str | None, value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return MISSING
        if unit == "bytes":
            return format_bytes(value)
        if unit == "s":
            return format_seconds(value)
        if unit == "pct":
            return f"{value:.1f} %"
        if unit == "fraction":
            return f"{100 * value:.2f} %"
        if unit == "ratio":
            return f"{_plain_number(value)}×"
        if unit == "per_s":
            return f"{_plain_number(value)}/s"
        return _plain_number(value)
    if isinstance(value, str):
        return value
    if (
        isinstance(value, (list, tuple))
        and len(value) <= 8
        and all(v is None or isinstance(v, (int, float, str, bool)) for v in value)
    ):
        return "[" + ", ".join("null" if v is None else str(v) for v in value) + "]"
    text = json.dumps(value, default=str)
    return text if len(text) <= 160 else text[:159] + "…"


def format_value(field_or_key: SummaryField | str, value: Any) -> str:
    """A value for people with its unit: a declared field's unit, else the unit its name implies."""
    if isinstance(field_or_key, SummaryField):
        return format_with_unit(field_or_key.unit, value)
    return format_with_unit(unit_of_key(field_or_key), value)


def label_from_key(name: str) -> str:
    """A label for keys no kind declares: the name without its unit suffix, `n_x` -> `x (count)`."""
    key = name
    for suffix in ("_bytes", "_pct", "_ratio", "_s"):
        if suffix == "_s" and key.endswith("_per_s"):
            break
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
            break
    if key.startswith("n_") and len(key) > 2:
        return key[2:].replace("_", " ") + " (count)"
    return key.replace("_", " ")


def label(kind: str | None, name: str) -> str:
    declared = summary_field(kind, name) if kind else None
    return declared.label if declared else label_from_key(name)


def format_summary_value(kind: str | None, name: str, value: Any) -> str:
    declared = summary_field(kind, name) if kind else None
    return format_value(declared or name, value)


def ordered_keys(kind: str, summary: Mapping[str, Any]) -> list[str]:
    """Declared keys in declaration order, then any others in report order."""
    vocab = vocabulary(kind)
    declared = [n for n in vocab.names if n in summary] if vocab else []
    return declared + [k for k in summary if k not in declared]


def headline_lines(kind: str, summary: Mapping[str, Any]) -> list[str]:
    """`label: value` for each headline figure that is known, in declared order."""
    vocab = vocabulary(kind)
    if vocab is None or not summary:
        return []
    return [
        f"{f.label}: {format_value(f, summary[f.name])}"
        for f in vocab.fields
        if f.headline and summary.get(f.name) is not None
    ]


def headline_text(kind: str, summary: Mapping[str, Any]) -> str:
    """A node's UI text: its kind's headline figures, one per line."""
    lines = headline_lines(kind, summary)
    return "\n".join(lines) if lines else "no figures"


MAX_PROBLEM_LINES = 5


def step_text(step) -> str:
    """A monitor node's UI text: its kind's headline figures, then the first warnings and errors
    (a fallback or a dummy latent must show on the node, not only in the report)."""
    problems = [f.message for f in step.findings if f.level in ("warning", "error")]
    return "\n".join([headline_text(step.kind, step.summary), *problems[:MAX_PROBLEM_LINES]])


# -- schema versions ------------------------------------------------------------------------------


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


def upgrade_report(report: Mapping[str, Any]) -> dict:
    """A report of schema_version 1 or 2 in the current names (a copy); other versions as they are."""
    version = report.get("schema_version")
    if version not in (1, 2):
        return dict(report)
    out = dict(report)
    out["steps"] = [
        {
            **step,
            "summary": _upgrade_v2_summary(
                step.get("kind"),
                upgrade_summary(step.get("kind"), step.get("summary") or {}, version),
                step.get("details"),
            ),
        }
        if isinstance(step, Mapping)
        else step
        for step in report.get("steps") or []
    ]
    out["schema_version"] = run_report.SCHEMA_VERSION
    return out

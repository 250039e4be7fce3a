"""Run reports: frozen dataclasses -> plain dicts -> JSON (written atomically) and a log summary.

One vocabulary for Python, JSON and the panel: units in names (`_bytes`, `_s`, `_pct`), counts as
`n_...`, unknown as None. Each step kind's summary keys are declared once in monitors/<room>/summary.py
and its stage registered in monitors/vocabulary/stages.py. Bump SCHEMA_VERSION on any incompatible change, declare the key
renames there, and regenerate `schemas/run_report.schema.json` (python -m monitors.vocabulary.generated_files --write).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import re
import tempfile
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .node_fields import NodeProfile

# 2: unit suffixes on summary keys (e.g. model_relative_change -> model_relative_change_ratio);
# 3: one meaning per name: conditioning's encode_peak_above_start_bytes (GPU allocated on a GPU,
# RSS on a CPU) split into encode_peak_gpu_allocated_above_start_bytes and
# encode_peak_rss_above_start_bytes; node rows gain gpu_busy_s; the VAE step its free-memory
# manager and the driver's free memory. Older reports are read through
# monitors.vocabulary.upgrade.upgrade_report.
# 4: the VAE step's input rate in MiB, as every other figure (input_mib_per_s, 2^20 bytes; was
# input_mb_per_s, 10^6 bytes); reports gain the subgraph roll-ups, the model residency and, per
# GPU of a node row, the process's device memory.
SCHEMA_VERSION = 4
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4)

RUN_STATUSES = ("running", "success", "error", "interrupted")
NODE_STATUSES = ("executed", "cached", "error", "interrupted")
FINDING_LEVELS = ("info", "warning", "error")
# The step kinds are the registered stages' (monitors/vocabulary/stages.py: STAGES, step_kinds()).


_PLAIN_TYPES = frozenset({str, int, bool, type(None)})


def to_jsonable(value: Any) -> Any:
    """Dataclasses, mappings and sequences -> plain JSON types; non-finite floats -> None."""
    # Most values of a report are plain already: decided by exact type first, since every run's
    # report is converted at its end and that cost grows with its node rows.
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is dict:
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_dict"):
            return to_jsonable(value.to_dict())
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, numbers.Integral):  # numpy and other number types: numbers, not their text
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    text = str(value)
    if OBJECT_REPR.search(text):
        # A default repr's memory address means nothing to a reader: name the type instead.
        return f"{type(value).__module__}.{type(value).__qualname__}"
    return text


# What no report may carry: an object's default repr (`<function f at 0x7f...>`, `<X object at 0x...>`).
OBJECT_REPR = re.compile(r"<.*? at 0x[0-9a-fA-F]+>|object at 0x[0-9a-fA-F]+")


def _fields_dict(obj) -> dict:
    return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


@dataclass(frozen=True)
class Finding:
    level: str  # info | warning | error
    message: str
    code: str | None = None

    def to_dict(self) -> dict:
        return _fields_dict(self)


@dataclass(frozen=True)
class StepReport:
    kind: str
    node_id: str | None
    summary: Mapping[str, Any] = field(default_factory=dict)  # key figures, shown first
    details: Mapping[str, Any] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    monitor_errors: tuple[str, ...] = ()  # what monitoring itself failed to do
    created_unix_s: float | None = None
    cached: bool = False  # the node was cached: this is the step from the run that executed it
    # Figures still being computed after the prompt (monitors/engine/deferred_steps.py): the step is
    # re-stored with them, or with `unfinished_reason` when that work could not finish.
    pending: bool = False
    unfinished_reason: str | None = None

    def to_dict(self) -> dict:
        return _fields_dict(self)


@dataclass(frozen=True)
class RunReport:
    prompt_id: str
    status: str
    started_unix_s: float
    finished_unix_s: float | None
    duration_s: float | None
    nodes: tuple[NodeProfile, ...] = ()
    steps: tuple[StepReport, ...] = ()
    span: Mapping[str, Any] | None = None  # SpanResult.to_dict() of the whole prompt
    system: Mapping[str, Any] = field(default_factory=dict)
    error: Mapping[str, Any] | None = None
    monitor_errors: tuple[str, ...] = ()
    profile_enabled: bool = True
    schema_version: int = SCHEMA_VERSION
    # The workflow the prompt was queued from ({name, id, name_unknown_reason}); None when the
    # prompt came without one (a script posting API-format JSON).
    workflow: Mapping[str, Any] | None = None
    # The widget inputs that changed since the last run of the same workflow (see
    # monitors/engine/input_changes.py); None in reports made before it was recorded.
    input_changes: Mapping[str, Any] | None = None
    # The ComfyUI symbols the pack uses that this ComfyUI lacks (the start-up self-check,
    # nodes/seams.py): the monitors using them report less or fail. Empty when all were found.
    missing_seams: tuple[str, ...] = ()
    # One roll-up per subgraph instance that ran (monitors/engine/subgraphs.py SubgraphRollup).
    subgraphs: tuple = ()
    # Loads, unloads and LoRA patches of model weights and what they cost, with findings naming
    # the cause (monitors/engine/model_residency.py, declared in engine/residency_fields.py);
    # None in reports made before it was recorded.
    model_residency: Mapping[str, Any] | None = None
    # False while a step is pending (its figures come after the prompt); absent in older reports.
    complete: bool = True

    @property
    def peak_rss_bytes(self) -> int | None:
        return None if not self.span else self.span.get("peak_rss_bytes")

    def to_dict(self) -> dict:
        return _fields_dict(self)

    def summary_dict(self) -> dict:
        """The row shown in run lists."""
        return run_summary(self.to_dict())


def run_summary(report: Mapping[str, Any]) -> dict:
    """The run-list row of a report dict (a new report, or one read back from disk)."""
    nodes = [n for n in report.get("nodes") or () if isinstance(n, Mapping)]
    steps = [s for s in report.get("steps") or () if isinstance(s, Mapping)]
    def highest(figure: str):
        values = [
            p.get(figure)
            for n in nodes
            for p in n.get("gpu_peaks") or ()
            if isinstance(p, Mapping) and isinstance(p.get(figure), (int, float))
        ]
        return max(values) if values else None

    levels = [f.get("level") for s in steps for f in s.get("findings") or () if isinstance(f, Mapping)]
    n_monitor_problems = sum(len(s.get("monitor_errors") or ()) for s in steps)
    span = report.get("span") if isinstance(report.get("span"), Mapping) else {}
    workflow = report.get("workflow") if isinstance(report.get("workflow"), Mapping) else {}
    return {
        "schema_version": report.get("schema_version"),
        "prompt_id": report.get("prompt_id"),
        "status": report.get("status"),
        "started_unix_s": report.get("started_unix_s"),
        "duration_s": report.get("duration_s"),
        "peak_rss_bytes": span.get("peak_rss_bytes"),
        "peak_gpu_allocated_bytes": highest("peak_allocated_bytes"),
        # this process's device memory beside torch's (GpuPeak): what a card must hold for the run
        "peak_process_used_bytes": highest("peak_process_used_bytes"),
        "peak_aimdo_used_bytes": highest("peak_aimdo_used_bytes"),
        "n_nodes": len(nodes),
        "n_cached": sum(1 for n in nodes if n.get("cached")),
        "step_kinds": sorted({str(s.get("kind")) for s in steps}),
        "workflow_name": workflow.get("name"),
        "workflow_id": workflow.get("id"),
        "n_errors": levels.count("error"),
        "n_warnings": levels.count("warning") + n_monitor_problems,
        "input_changes": _summary_input_changes(report.get("input_changes")),
        "complete": report.get("complete") is not False,
    }


SUMMARY_INPUT_CHANGES = 4  # changes a run-list row carries; the report has the whole list


def _summary_input_changes(changes) -> dict | None:
    if not isinstance(changes, Mapping):
        return None
    listed = changes.get("changes")
    return {
        "first_run": changes.get("first_run"),
        "n_changes": changes.get("n_changes"),
        "changes": list(listed[:SUMMARY_INPUT_CHANGES]) if isinstance(listed, list) else None,
        "unknown_reason": changes.get("unknown_reason"),
    }


def write_json_atomic(path: str, data: Mapping[str, Any], compact: bool = False, durable: bool = True) -> None:
    """Write JSON so readers see either the old file or the whole new one, never a partial file.
    `compact`: one line, by the json module's C encoder (an indented file takes its pure-Python
    encoder, several times the time, holding the GIL the prompt's threads need: the run store's
    background writes are compact). `durable`: flushed to the disk before it replaces the old
    file, so a power cut leaves one or the other; without it the file may be lost in a power cut
    (never half-read: the rename is still atomic), and the disk's flush no longer follows
    every write (the run store: one report per prompt, shown from memory meanwhile)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    text = json.dumps(to_jsonable(data), indent=None if compact else 1, allow_nan=False)
    fd, tmp_path = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        try:
            os.unlink(tmp_path)
        except OSError:
            pass
        raise


def sum_known(values) -> int | float | None:
    """Sum of the values that are known; None when none is (unknown is not zero)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


MAX_TRACEBACK_CHARS = 8000


def failed_step(kind: str, node_id: str | None, exc: BaseException) -> StepReport:
    """The step a monitor leaves when building its report raised: the error, its traceback in details."""
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return StepReport(
        kind=kind,
        node_id=None if node_id is None else str(node_id),
        details={"traceback": trace[-MAX_TRACEBACK_CHARS:]},
        monitor_errors=(f"{type(exc).__name__}: {exc}",),
        created_unix_s=time.time(),
    )


def format_bytes(n: int | float | None) -> str:
    if n is None:
        return "unknown"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.1f} {unit}"
        n /= 1024
    return f"{sign}{n:.1f} TiB"


def format_run_summary(report: RunReport) -> str:
    """A concise one-paragraph summary for the log."""
    duration = "unknown time" if report.duration_s is None else f"{report.duration_s:.2f} s"
    method = (report.span or {}).get("peak_rss_method")
    parts = [
        f"Pipeline Monitor: prompt {report.prompt_id} {report.status} in {duration}",
        f"peak RSS {format_bytes(report.peak_rss_bytes)}" + (f" ({method})" if method else ""),
    ]
    executed = [n for n in report.nodes if not n.cached]
    if report.nodes:
        parts.append(f"{len(report.nodes)} nodes ({len(report.nodes) - len(executed)} cached)")
    timed = [n for n in executed if n.duration_s is not None]
    if timed:
        slowest = max(timed, key=lambda n: n.duration_s)
        parts.append(f"slowest #{slowest.node_id} {slowest.class_type} {slowest.duration_s:.2f} s")
    if report.steps:
        parts.append("steps: " + ", ".join(s.kind for s in report.steps))
    if report.error:
        parts.append(f"error in node {report.error.get('node_id')}: {report.error.get('exception_type')}")
    if report.monitor_errors:
        parts.append(f"{len(report.monitor_errors)} monitoring problem(s)")
    return "; ".join(parts)

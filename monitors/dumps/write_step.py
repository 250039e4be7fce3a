"""The write part of the `tensor_dump` step: the checks before anything is written, the step while
its file is being written (details.write.state `pending`), and the step once written or not.

details.write: state (`pending`, `written`, `not_written`), background (written by the writer
thread, writer.py), in_prompt_s (the node's time on the write), written_unix_s (when the file was
complete), copy_wait_s (the writer's wait for the device copies), reason (why not written, or why
written in the prompt).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..report import Finding, StepReport
from .collect import CollectedTensors
from .details import TENSOR_DUMP_DETAILS
from .files import DumpPlan, plan_dump
from .names import DumpError, DumpNameError, DumpTooLargeError
from .summary import TensorDumpSummary
from .writer import DumpTicket, DumpWriter, WriteOutcome

ROUTE = "/pipeline_monitor/dumps/"


def start_write(
    writer: DumpWriter,
    directory: str,
    name: str,
    collected: CollectedTensors,
    metadata: Mapping,
    npy: bool,
    pending_stats: Mapping | None = None,
) -> tuple[DumpPlan | None, DumpTicket | None, list[Finding]]:
    """(plan, ticket, []) once the dump is handed to the writer, or (None, None, [why not])."""
    try:
        plan = plan_dump(directory, name, collected, npy)
    except (DumpError, OSError) as exc:  # anything else is the monitor failing: a failed step
        return None, None, [_error_finding(exc)]
    return plan, writer.write(plan, collected, metadata, pending_stats), []


def pending_step(step: StepReport, plan: DumpPlan) -> StepReport:
    summary = TensorDumpSummary(**{**step.summary, "file_name": plan.file_name, "written": None})
    write = TENSOR_DUMP_DETAILS.key("write").build(state="pending", background=True)
    details = TENSOR_DUMP_DETAILS.build(**{**step.details, "write": write})
    return dataclasses.replace(step, summary=summary.to_dict(), details=details)


def finish_dump_step(step: StepReport, outcome: WriteOutcome) -> StepReport:
    """The step with what the write did: the file's figures, or why it was not written."""
    result = outcome.result
    findings = list(step.findings)
    write = {  # TENSOR_DUMP_DETAILS "write": built with it below
        "state": "written" if result is not None else "not_written",
        "background": outcome.background,
        "in_prompt_s": outcome.in_prompt_s,
        "written_unix_s": outcome.written_unix_s,
        "copy_wait_s": outcome.copy_wait_s,
        "reason": outcome.in_prompt_reason,
    }
    if outcome.in_prompt_reason is not None:
        message = f"Dump written in the prompt, not in the background: {outcome.in_prompt_reason}."
        findings.append(Finding("warning", message, "written_in_prompt"))
    summary = {**step.summary, "written": result is not None}
    details = {**step.details, "write": write}
    if outcome.described:  # statistics read back after the node returned
        details["tensors"], stats_findings = with_described(details.get("tensors") or {}, outcome.described)
        findings.extend(stats_findings)
    monitor_errors = step.monitor_errors
    if result is None:
        finding = _error_finding(outcome.error)
        findings.append(finding)
        write["reason"] = finding.message
        summary.update(file_name=None, file_bytes=None, write_s=None, n_npy_files=None)
        if not isinstance(outcome.error, (DumpError, OSError)):  # not the disk: the monitor failed
            monitor_errors = (*monitor_errors, f"dump writer: {type(outcome.error).__name__}: {outcome.error}")
    else:
        if result.replaced:
            findings.append(Finding("info", f"Replaced the earlier dump {result.file_name}.", "replaced"))
        summary.update(
            file_name=result.file_name,
            file_bytes=result.file_bytes,
            write_s=result.write_s,
            n_npy_files=len(result.npy_files),
        )
        details["download_url"] = ROUTE + result.file_name
        details["npy_files"] = list(result.npy_files)
        details["metadata"] = {k: v for k, v in result.metadata.items() if k != "tensors"}
    details["write"] = TENSOR_DUMP_DETAILS.key("write").build(**write)
    return dataclasses.replace(
        step,
        summary=TensorDumpSummary(**summary).to_dict(),
        details=TENSOR_DUMP_DETAILS.build(**details),
        findings=tuple(findings),
        monitor_errors=monitor_errors,
    )


def with_described(tensors: Mapping, described: Mapping) -> tuple[dict, list[Finding]]:
    """The tensors' descriptions with their statistics read back (`described`, by tensor), and the
    findings of those that hold NaN or Inf."""
    merged = dict(tensors)
    for name, stats in described.items():
        merged[name] = {**merged.get(name, {}), **stats}
    return merged, non_finite_findings({name: merged[name] for name in described})


def non_finite_findings(tensors: Mapping) -> list[Finding]:
    """A warning per tensor description with NaN or Inf values."""
    findings = []
    for name, info in tensors.items():
        if info.get("n_nan") or info.get("n_inf"):
            message = f"{name} holds {info['n_nan']} NaN and {info['n_inf']} Inf values."
            findings.append(Finding("warning", message, "non_finite"))
    return findings


def _error_finding(exc: Exception | None) -> Finding:
    if isinstance(exc, DumpError):
        code = (
            "name_refused"
            if isinstance(exc, DumpNameError)
            else "too_large"
            if isinstance(exc, DumpTooLargeError)
            else "not_written"
        )
        return Finding("error", str(exc), code)
    return Finding("error", f"Dump not written: {type(exc).__name__}: {exc}", "not_written")

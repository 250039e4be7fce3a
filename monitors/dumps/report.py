"""The `tensor_dump` and `tensor_compare` steps: write the tensors of a value to a dump, compare dumps.

Dumps live in one folder (the caller's); names are checked by names.dump_file_name before any
path is built.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from ..engine.prompt_info import upstream_node_ids
from ..numeric.describe import describe_deferred, describe_tensor_bounded
from ..report import Finding, StepReport
from .collect import CollectedTensors, collect_tensors, guess_encoder_family
from .compare import compare_dump_with, compare_dumps
from .details import TENSOR_COMPARE_DETAILS, TENSOR_DUMP_DETAILS
from .files import list_dumps
from .names import DUMP_SUFFIX, DumpError, dump_file_name
from .summary import TensorCompareSummary, TensorDumpSummary
from .write_step import finish_dump_step, non_finite_findings, pending_step, start_write, with_described
from .writer import DumpTicket, DumpWriter, read_stats

VALUE_INPUTS = ("conditioning", "latent", "image")
LIVE_VALUE = "(live value)"
NO_DUMPS = "(no dumps yet)"
# Tools and tests: every dump written in the caller's thread (the node uses writer.DUMP_WRITER).
INLINE_WRITER = DumpWriter(background=False)


def dump_names(directory: str) -> tuple[list[str], str | None]:
    """(names of the dumps in `directory` without their .safetensors suffix, None), or ([], why they
    could not be listed). Without the suffix: the frontend takes a combo value that ends in a model
    file's extension for a model file, and on a fresh install (no dump yet) it warned that the
    example's dump was a missing model. The compare accepts both forms (dump_file_name)."""
    try:
        return sorted(row["name"][: -len(DUMP_SUFFIX)] for row in list_dumps(directory)), None
    except Exception as exc:  # no output folder yet
        return [], f"dumps not listed: {type(exc).__name__}: {exc}"


def no_dump_message(lead: str, directory: str) -> str:
    # The combo shows NO_DUMPS both when there is none and when listing failed: say which.
    reason = dump_names(directory)[1]
    return lead if reason is None else f"{lead} ({reason})"


def file_state(directory: str, name: str) -> str:
    """A fingerprint of dump `name`: changes when the file is rewritten."""
    try:
        info = os.stat(os.path.join(directory, dump_file_name(name)))
        return f"{name}:{info.st_mtime_ns}:{info.st_size}"
    except Exception as exc:  # only a cache key: the compare step itself reports why the file is unusable
        return f"{name}:missing:{type(exc).__name__}"


def dump_name_problem(name: object) -> str | None:
    """Why `name` cannot name a dump, or None (checked when the prompt is validated and before writing)."""
    try:
        dump_file_name(name)
    except DumpError as exc:
        return str(exc)
    return None


def compare_inputs_problem(dump_a: str, dump_b: str, directory: str) -> str | None:
    """Why these two names cannot be compared, or None (checked when the prompt is validated)."""
    if dump_a == NO_DUMPS:
        return no_dump_message(
            "No dump to compare yet: write one with Pipeline Monitor: Tensor Dump first.", directory
        )
    names = (dump_a,) if dump_b == LIVE_VALUE else (dump_a, dump_b)
    return next((problem for problem in map(dump_name_problem, names) if problem is not None), None)


def upstream_sources(node_id, prompt) -> dict:
    """input name -> {node_id, class_type} of the node feeding that value input."""
    sources = {}
    for name, source_id in upstream_node_ids(node_id, prompt, VALUE_INPUTS).items():
        source = prompt.get(source_id) if isinstance(prompt, Mapping) else None
        class_type = source.get("class_type") if isinstance(source, Mapping) else None
        sources[name] = {"node_id": source_id, "class_type": class_type}
    return sources


# -- dump ----------------------------------------------------------------------------------------


def build_dump_step(
    node_id,
    prompt,
    values: Mapping,
    name: str,
    npy: bool,
    *,
    directory: str,
    prompt_id: str | None = None,
    prompt_id_unknown_reason: str | None = None,
    writer: DumpWriter | None = None,
) -> StepReport:
    """Write the tensors of `values` (conditioning / latent / image) to `directory` as dump `name`
    and return the finished step (waits for the file: tools and tests; the node takes
    start_dump_step). `prompt_id` goes into the dump's metadata; when it is unknown, why goes to
    monitor_errors."""
    step, ticket = start_dump_step(
        node_id,
        prompt,
        values,
        name,
        npy,
        directory=directory,
        writer=writer or INLINE_WRITER,
        prompt_id=prompt_id,
        prompt_id_unknown_reason=prompt_id_unknown_reason,
    )
    return step if ticket is None else finish_dump_step(step, ticket.wait())


def start_dump_step(
    node_id,
    prompt,
    values: Mapping,
    name: str,
    npy: bool,
    *,
    directory: str,
    writer: DumpWriter,
    prompt_id: str | None = None,
    prompt_id_unknown_reason: str | None = None,
) -> tuple[StepReport, DumpTicket | None]:
    """(the finished step, None), or (the step while `writer` writes the file, its ticket): then
    finish_dump_step(step, outcome) is the finished step (write_step.py)."""
    started = time.time()
    connected = [k for k in VALUE_INPUTS if values.get(k) is not None]
    collected = collect_tensors(**values)
    sources = upstream_sources(node_id, prompt)
    encoder_family = guess_encoder_family(values["conditioning"]) if values.get("conditioning") else None
    # The writer takes a host copy of every tensor: a GPU tensor's statistics are enqueued on the
    # device, a CPU tensor's left to that copy (describe_deferred), so the node never waits for
    # them; the rest are described now.
    deferred = {
        t: describe_deferred(v, host_copy_kept=True) if writer.background else (describe_tensor_bounded(v), None)
        for t, v in collected.tensors.items()
    }
    tensors = {t: description for t, (description, _) in deferred.items()}
    pending_stats = {t: pending for t, (_, pending) in deferred.items() if pending is not None}
    findings = _content_findings(collected.skipped, tensors)
    plan, ticket, monitor_errors = None, None, []
    if not connected:
        message = "Nothing connected: connect a CONDITIONING, LATENT or IMAGE to dump it."
        findings.append(Finding("info", message, "nothing_connected"))
    else:
        if prompt_id_unknown_reason is not None:
            monitor_errors.append(prompt_id_unknown_reason)
        metadata = {
            "prompt_id": prompt_id,
            "dump_node_id": node_id,
            "source_nodes": sources,
            "value_kinds": ",".join(connected),
            "encoder_family": encoder_family,
        }
        plan, ticket, write_findings = start_write(
            writer, directory, name, collected, metadata, npy, pending_stats
        )
        findings.extend(write_findings)
    if ticket is None and pending_stats:  # nothing handed to the writer: read them back now
        tensors, stats_findings = with_described(tensors, read_stats(pending_stats, collected.tensors))
        findings.extend(stats_findings)
    step = StepReport(
        kind="tensor_dump",
        node_id=node_id,
        summary=_dump_summary(collected, connected, encoder_family).to_dict(),
        details=TENSOR_DUMP_DETAILS.build(
            tensors=tensors, extras=collected.extras, skipped=collected.skipped, sources=sources
        ),
        findings=tuple(findings),
        monitor_errors=tuple(monitor_errors),
        created_unix_s=started,
    )
    if ticket is None:
        return step, None
    outcome = ticket.outcome  # read once: a later outcome reaches the caller through the ticket
    if outcome is not None:
        return finish_dump_step(step, outcome), None
    return pending_step(step, plan), ticket


def _content_findings(skipped: dict, tensors: dict) -> list[Finding]:
    """Values that are not tensors (not dumped) and tensors with NaN or Inf."""
    findings = []
    if skipped:
        listed = ", ".join(f"{k} ({v})" for k, v in list(skipped.items())[:8])
        findings.append(Finding("info", f"Not tensors, not dumped: {listed}.", "not_dumped"))
    return findings + non_finite_findings(tensors)


def _dump_summary(collected, connected: list[str], encoder_family: str | None) -> TensorDumpSummary:
    """The summary before the write (write_step.finish_dump_step fills in the file's figures)."""
    return TensorDumpSummary(
        file_name=None,
        written=False,
        n_tensors=len(collected.tensors),
        tensor_bytes=collected.total_bytes,
        file_bytes=None,
        write_s=None,
        n_npy_files=None,
        value_kinds=connected,
        encoder_family=encoder_family,
    )


def written_file_name(step: StepReport) -> str | None:
    """The file a dump step wrote or is writing, for the node's UI; None when nothing is written."""
    summary = step.summary or {}
    return summary.get("file_name") if summary.get("written") is not False else None


# -- compare -------------------------------------------------------------------------------------


def build_compare_step(
    node_id,
    dump_a: str,
    dump_b: str,
    rtol: float,
    atol: float,
    values: Mapping,
    *,
    directory: str,
    live_tensors: Mapping | None = None,
) -> StepReport:
    """Compare dump `dump_a` with dump `dump_b`, or with the live `values` when dump_b is LIVE_VALUE.
    `live_tensors`: the values' tensors collected already, in place of `values` (compare_step.py:
    their host copies, off the prompt)."""
    started = time.time()
    findings, result = [], None
    live = collect_tensors(**values) if live_tensors is None else CollectedTensors(tensors=dict(live_tensors))
    try:
        if dump_a == NO_DUMPS:
            raise DumpError(
                no_dump_message(
                    "No dump chosen: write one with Pipeline Monitor: Tensor Dump first.", directory
                )
            )
        name_a = dump_file_name(dump_a)
        if dump_b == LIVE_VALUE:
            if not live.tensors:
                raise DumpError(f"dump_b is {LIVE_VALUE}, but no CONDITIONING, LATENT or IMAGE is connected.")
            result = compare_dump_with(directory, name_a, live.tensors, rtol, atol)
        else:
            if live.tensors:
                findings.append(
                    Finding("info", "The live input is ignored: dump_b names a dump.", "live_ignored")
                )
            result = compare_dumps(directory, name_a, dump_file_name(dump_b), rtol, atol)
    except DumpError as exc:
        findings.append(Finding("error", str(exc), "compare_failed"))
    if result is not None:
        level = {"identical": "info", "close": "info", "different": "warning"}.get(result["status"], "error")
        findings.append(Finding(level, result["verdict"], result["status"]))
        summary = TensorCompareSummary(
            status=result["status"],
            verdict=result["verdict"],
            dump_a=dump_a,
            dump_b=dump_b,
            rtol=rtol,
            atol=atol,
            n_compared=result["n_compared"],
            n_different=result["n_different"],
            n_incompatible=result["n_incompatible"],
            max_abs_diff=result["max_abs_diff"],
            max_relative_error_ratio=result["max_relative_error"],
            min_cosine_similarity=result["min_cosine_similarity"],
        )
        details = {k: result[k] for k in ("tensors", "only_in_a", "only_in_b", "a", "b")}
    else:
        message = findings[-1].message if findings else "comparison failed"
        summary = TensorCompareSummary(
            status="error", verdict=f"error: {message}", dump_a=dump_a, dump_b=dump_b
        )
        details = {}
    return StepReport(
        kind="tensor_compare",
        node_id=node_id,
        summary=summary.to_dict(),
        details=TENSOR_COMPARE_DETAILS.build(**details),
        findings=tuple(findings),
        created_unix_s=started,
    )

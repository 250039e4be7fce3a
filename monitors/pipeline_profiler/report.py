"""The report of a profiled session: a RunReport like a ComfyUI prompt's, and its files.

Rows: one NodeProfile per stage call (class_type = stage name, title = e.g. "step 3"), so the
panel, the HTML report, the trace export and the CLI read both kinds of report alike. The
profiling API's own figures go into one step of kind `profiling` (summary: throughput and totals;
details: phases, diffusion steps, blocks, models, events, samples, config; findings: suggestions).
"""

from __future__ import annotations

import logging
import os
import sys
import time

from ..deep_profile.trace_ops import read_ops
from ..engine.span import memory_picture
from ..exporters.html import render_html
from ..exporters.trace import reports_to_trace
from ..profiler_step.details import PROFILING_DETAILS
from ..profiler_step.summary import ProfilingSummary
from ..report import Finding, RunReport, StepReport, format_run_summary, write_json_atomic
from . import usage
from .suggestions import suggest

log = logging.getLogger(__name__)

STEP_KIND = "profiling"


def _rate(count, seconds) -> float | None:
    return count / seconds if count and seconds else None


def _known_sum(values) -> int | None:
    known = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    return sum(known) if known else None


def _gpu_utilisation(snapshot) -> list | None:
    if snapshot is None or not snapshot.gpus:
        return None
    return [g.utilization_pct for g in snapshot.gpus]


def _max_gpu_peak(span_result) -> int | None:
    if span_result is None:
        return None
    values = [
        p.value
        for m, p in span_result.peaks.items()
        if m.endswith(".allocated_bytes") and p.value is not None
    ]
    return int(max(values)) if values else None


def _system(session) -> dict:
    system = {}
    try:
        system = dict(session.probes.system_info())
    except Exception as exc:
        session.note(f"system info unavailable: {type(exc).__name__}: {exc}")
    torch = sys.modules.get("torch")
    try:
        system["torch_num_threads"] = int(torch.get_num_threads()) if torch is not None else None
    except Exception as exc:
        system["torch_num_threads"] = None
        session.note(f"torch thread count unavailable: {type(exc).__name__}: {exc}")
    system.update(session.distributed)
    system["host"] = session.host_name()
    system["pid"] = os.getpid()
    system["source"] = "profiling_api"
    return system


def device_name(system: dict) -> str:
    names = [g.get("name") or g.get("device") for g in system.get("gpus") or []]
    if names:
        return ", ".join(str(n) for n in names)
    return f"CPU ({system.get('cpu_count') or '?'} logical cores)"


def build_report(session, status: str, error: dict | None, span_result, duration_s: float) -> RunReport:
    """The session's rows and one `profiling` step: what the session recorded (copied under its
    lock), then the details, the suggestions and the summary; the notes last, so that what
    building the report could not read (system info, a failing rule) is in it."""
    with session._lock:
        rows = tuple(sorted(session.rows, key=lambda r: int(r.node_id)))
        recorded = {
            "samples": {name: list(column) for name, column in session.samples.items()},
            "diffusion_steps": list(session.diffusion_steps),
            "blocks": list(session.blocks),
            "events": list(session.events),
            "stage_threads": dict(session.stage_threads),
        }
    system = _system(session)
    phases = session.phases.rows(duration_s)
    models = usage.tracker.models()
    details = _details(session, phases, models, recorded, span_result)
    span = None if span_result is None else span_result.to_dict()
    findings = _findings(session, {"duration_s": duration_s, "system": system, "span": span}, details, phases)
    summary = _summary(session, phases, models, len(recorded["events"]), span_result, system)
    with session._lock:
        monitor_errors = list(session.monitor_errors)
    step = StepReport(
        kind=STEP_KIND,
        node_id=None,
        summary=summary.to_dict(),
        details=PROFILING_DETAILS.build(**details),
        findings=tuple(findings),
        created_unix_s=time.time(),
    )
    report = RunReport(
        prompt_id=session.run_id,
        status=status,
        started_unix_s=session.started_unix_s,
        finished_unix_s=time.time(),
        duration_s=duration_s,
        nodes=rows,
        steps=(step,),
        span=span,
        system=system,
        error=error,
        monitor_errors=tuple(monitor_errors),
        profile_enabled=True,
    )
    _record_generation(session, status, duration_s, summary, details)
    log.info("%s", format_run_summary(report))
    return report


def _details(session, phases: list, models: list, recorded: dict, span_result) -> dict:
    """Phases, diffusion steps, blocks, models, events, samples, GPU use and memory, the config."""
    return {
        "tags": dict(session.tags),
        "phases": phases,
        "diffusion_steps": recorded["diffusion_steps"],
        "blocks": recorded["blocks"],
        "models": models,
        "events": recorded["events"],
        "samples": recorded["samples"],
        "stage_threads": recorded["stage_threads"],
        "gpu_utilization_before_pct": _gpu_utilisation(None if span_result is None else span_result.baseline),
        "gpu_utilization_after_pct": _gpu_utilisation(None if span_result is None else span_result.end),
        "config": session.config.to_dict(),
        # The named before/end/change/peak@time set every monitor step with a span carries.
        "memory": None if span_result is None else memory_picture(span_result),
    }


def _findings(session, run: dict, details: dict, phases: list) -> list[Finding]:
    """The suggestions for the run (duration, system, span) with this step's details."""
    draft = {**run, "steps": [{"kind": STEP_KIND, "details": details}]}
    try:
        return suggest(draft, phases)
    except Exception as exc:  # a rule that trips on odd data must not lose the report
        session.note(f"suggestions failed: {type(exc).__name__}: {exc}")
        return []


def _summary(session, phases: list, models: list, n_events: int, span_result, system: dict) -> ProfilingSummary:
    """Throughput and totals: stage calls, diffusion steps, blocks, frames, models, peaks."""
    totals = session.totals
    return ProfilingSummary(
        session=session.name,
        rank=session.distributed["rank"],
        world_size=session.distributed["world_size"],
        n_stage_calls=sum(p["n_calls"] for p in phases),
        n_stages=len(phases),
        slowest_stage=next((p["stage"] for p in phases if p["depth"] == 0), None),
        n_steps=totals["n_steps"],
        steps_total_s=totals["steps_s"] if totals["n_steps"] else None,
        steps_per_s=_rate(totals["n_steps"], totals["steps_s"]),
        n_blocks=totals["n_blocks"],
        blocks_per_s=_rate(totals["n_blocks"], totals["blocks_s"]),
        n_frames=totals["n_frames"] or None,
        frames_per_s=_rate(totals["n_frames"], totals["blocks_s"]),
        n_events=n_events,
        n_models=len(models),
        model_init_s=sum(m["init_s"] for m in models) if models else None,
        n_model_parameters=sum(m.get("n_parameters") or 0 for m in models) if models else None,
        # Unknown (None) where no model's bytes are known, e.g. figures given as a mapping without them
        model_parameter_bytes=_known_sum(m.get("parameter_bytes") for m in models),
        peak_rss_bytes=None if span_result is None else span_result.peak_rss_bytes,
        peak_gpu_allocated_bytes=_max_gpu_peak(span_result),
        device_name=device_name(system),
    )


def _record_generation(
    session, status: str, duration_s: float, summary: ProfilingSummary, details: dict
) -> None:
    """The run in the process's usage history (usage.py)."""
    usage.tracker.record_generation(
        name=session.name,
        run_id=session.run_id,
        duration_s=duration_s,
        status=status,
        peak_rss_bytes=summary.peak_rss_bytes,
        peak_gpu_allocated_bytes=summary.peak_gpu_allocated_bytes,
        gpu_utilization_before_pct=details["gpu_utilization_before_pct"],
        gpu_utilization_after_pct=details["gpu_utilization_after_pct"],
        device_name=summary.device_name,
    )


def write_report_files(session, report: RunReport) -> dict[str, str]:
    """JSON, HTML and trace files as configured; a failed write is logged, never raised."""
    cfg = session.config.report
    base = os.path.join(cfg.output_dir, report.prompt_id)
    data = report.to_dict()
    writers = []
    if session.config.writes_json:
        writers.append(("json", base + ".json", lambda path: write_json_atomic(path, data)))
    if session.config.writes_html:
        writers.append(("html", base + ".html", lambda path: _write_text(path, render_html(data))))
    if cfg.trace:
        writers.append(
            (
                "trace",
                base + ".trace.json",
                lambda path: write_json_atomic(
                    path, reports_to_trace([data], deep_ops={report.prompt_id: read_ops(base + ".json", report.prompt_id)})
                ),
            )
        )
    paths = {}
    for kind, path, write in writers:
        try:
            write(path)
            paths[kind] = path
        except Exception as exc:
            log.warning(
                "pipeline monitor: could not write the %s report %s: %s: %s",
                kind,
                path,
                type(exc).__name__,
                exc,
            )
    if paths:
        log.info("pipeline monitor: session %s reports: %s", session.name, ", ".join(paths.values()))
    return paths


def _write_text(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".tmp-{os.getpid()}-{os.path.basename(path)}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)

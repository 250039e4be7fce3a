"""A deep-profiled session of the pipeline profiler: `profile_session(..., deep=True)` profiles the
session with torch.profiler (monitors/deep_profile/), one `record_function` range per stage call,
and adds the same `deep_profile` step as a deep-profiled ComfyUI prompt (one row per stage call)."""

from __future__ import annotations

import dataclasses
import logging

from ..deep_profile.session import DeepProfiler, build_step

log = logging.getLogger(__name__)


def start(session) -> DeepProfiler | None:
    try:
        cuda = session.probes.torch_device_count() > 0
        return DeepProfiler(session.run_id, cuda).start()
    except Exception as exc:
        session.note(f"deep profile not started: {type(exc).__name__}: {exc}")
        return None


def finish(session, report):
    """The session's report with the `deep_profile` step added; the report unchanged on failure."""
    deep, session.deep = session.deep, None
    if deep is None or report is None:
        return report
    try:
        events = deep.stop()
        cfg = session.config.report
        reports_dir = cfg.output_dir if session.config.writes_json else None
        step = build_step(deep, events, None, reports_dir)
        return dataclasses.replace(report, steps=(*report.steps, step))
    except Exception as exc:
        log.warning(
            "pipeline monitor: deep profile of %s not added: %s: %s", session.name, type(exc).__name__, exc
        )
        return report

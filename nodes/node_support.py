"""The one skeleton every monitor node runs: build its step in monitors/, record it, give the UI text.

Monitoring never fails a prompt: an exception while building becomes a failed step (the error and
its traceback) in the report, and the node still returns its inputs as the very same objects.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping

from ..monitors.report import StepReport, failed_step
from ..monitors.vocabulary.headline import step_text
from .runtime import get_runtime

log = logging.getLogger(__name__)

def hidden_inputs(cls) -> tuple[str | None, Mapping | None]:
    """(node id, API-format prompt) that ComfyUI hands a V3 node."""
    hidden = getattr(cls, "hidden", None)
    return getattr(hidden, "unique_id", None), getattr(hidden, "prompt", None)


def record_step(step: StepReport) -> bool:
    try:
        attached = get_runtime().recorder.add_step(step)
    except Exception:
        log.exception("pipeline monitor: step not recorded")
        return False
    if not attached:
        log.debug(
            "pipeline monitor: %s step of node %s made outside a profiled prompt", step.kind, step.node_id
        )
    return attached


PENDING_NOTE = "figures come after the prompt, in the panel's report"


def run_monitor(
    kind: str, node_id: str | None, build: Callable[[], StepReport], pending_note: str = PENDING_NOTE
) -> tuple[StepReport, dict]:
    """Build the step, record it, and return it with the node's UI output; `pending_note`: the
    text's last line while the step is pending (its figures come later)."""
    try:
        step = build()
    except Exception as exc:  # monitoring never fails the prompt
        log.exception("pipeline monitor: %s monitor of node %s failed", kind, node_id)
        step = failed_step(kind, node_id, exc)
        record_step(step)
        return step, {"text": [f"{kind} monitor failed: {type(exc).__name__}: {exc}"]}
    try:
        text = step_text(step)
    except Exception as exc:  # the analysis stands; only its one-line summary is lost
        log.exception("pipeline monitor: %s text of node %s failed", kind, node_id)
        step = dataclasses.replace(
            step, monitor_errors=(*step.monitor_errors, f"ui text: {type(exc).__name__}: {exc}")
        )
        text = f"{kind}: see the report"
    if step.pending:  # the pack's frontend shows the finished text (deferred_work.send_step_text)
        text = f"{text}\n{kind}: {pending_note}"
    record_step(step)
    return step, {"text": [text]}

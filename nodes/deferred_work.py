"""The adapter side of steps finished after the prompt (monitors/engine/deferred_steps.py).

`defer_for(recorder)` hands a monitor node the function that registers its after-prompt job for the
running prompt (None outside a prompt, or with PIPELINE_MONITOR_DEFER=0: the work stays in the
prompt). When the job's step is finished, the client that queued the prompt gets the node's new
text (`pipeline_monitor.step_text`: ComfyUI shows a node's text as the node returned it, so the
pack's own frontend script puts the new one on the node); a comparison made on the dump writer's
thread sends its text the same way, and a cached node whose step finished after it returned gets
its finished text at each run's end (send_cached_step_texts). `executor_busy` is what a job
waits on: a prompt recorded as running, or prompts queued or running in ComfyUI's queue
(`PromptServer.instance.prompt_queue.get_tasks_remaining()`), so that a queue of prompts runs
before any deferred work.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from ..monitors.dumps.compare_step import compared_after_return
from ..monitors.engine.deferred_steps import DEFERRED, job_id_of
from ..monitors.vocabulary.headline import step_text
from .runtime import get_runtime

log = logging.getLogger(__name__)

ENV_DEFER = "PIPELINE_MONITOR_DEFER"  # "0": first-time analyses stay inside the prompt
STEP_TEXT_EVENT = "pipeline_monitor.step_text"


def executor_busy() -> bool:
    if get_runtime().recorder.active_prompt_id is not None:
        return True
    try:
        from server import PromptServer

        queue = getattr(PromptServer.instance, "prompt_queue", None)
        return queue is not None and queue.get_tasks_remaining() > 0
    except Exception as exc:  # no server (in-process use): the recorder alone says
        log.debug("pipeline monitor: ComfyUI's queue not read: %s", exc)
        return False


def defer_for(recorder) -> Callable | None:
    """`defer(work) -> job id | None` for the running prompt, or None (do the work now)."""
    if os.environ.get(ENV_DEFER, "1") == "0":
        return None
    prompt_id = recorder.active_prompt_id if recorder is not None else None
    if prompt_id is None:
        return None
    DEFERRED.busy, DEFERRED.on_finished = executor_busy, send_step_text
    context = step_text_context(recorder)
    return lambda work: DEFERRED.submit(prompt_id, work, context)


def step_text_context(recorder) -> dict:
    """Who gets a step's text when it finishes after its node returned (send_step_text): the
    running prompt and the client that queued it."""
    prompt_id = recorder.active_prompt_id if recorder is not None else None
    return {"prompt_id": prompt_id, "client_id": _queuing_client()}


def _queuing_client() -> str | None:
    """The client id of the running prompt (ComfyUI sets it on the server while it executes)."""
    try:
        from server import PromptServer

        client_id = getattr(PromptServer.instance, "client_id", None)
        return client_id if isinstance(client_id, str) else None
    except Exception:
        return None


def send_step_text(context: dict, step, send=None) -> bool:
    """The finished step's node text to the client that queued its prompt; whether it was sent."""
    client_id = context.get("client_id")
    if not client_id or step.node_id is None:
        return False
    data = {"prompt_id": context.get("prompt_id"), "node_id": str(step.node_id), "kind": step.kind,
            "text": [step_text(step)]}
    if send is None:
        from server import PromptServer

        send = PromptServer.instance.send_sync
    send(STEP_TEXT_EVENT, data, client_id)
    return True


def finished_after_return(step) -> bool:
    """Whether the step's figures came after its node returned (the node's text then said they
    would): a comparison made on the dump writer's thread, or a step finished after the prompt."""
    return compared_after_return(step) or job_id_of(step) is not None


def send_cached_step_texts(report, context: dict, send=None) -> int:
    """At a run's end: for each cached monitor node whose step finished after its node returned,
    ComfyUI showed the text the node returned back then (that the figures would follow); the client
    gets the finished text again. Returns how many were sent; never raises."""
    sent = 0
    for step in getattr(report, "steps", ()) or ():
        try:
            if step.cached and not step.pending and finished_after_return(step):
                sent += send_step_text(context, step, send)
        except Exception as exc:  # the report stands; only a node's text is not refreshed
            log.debug("pipeline monitor: cached step text not sent: %s", exc)
    return sent

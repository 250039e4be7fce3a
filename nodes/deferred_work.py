"""The adapter side of steps finished after the prompt (monitors/engine/deferred_steps.py).

`defer_for(recorder)` hands a monitor node the function that registers its after-prompt job for the
running prompt (None outside a prompt, or with PIPELINE_MONITOR_DEFER=0: the work stays in the
prompt). `executor_busy` is what a job waits on: a prompt recorded as running, or prompts queued or
running in ComfyUI's queue (`PromptServer.instance.prompt_queue.get_tasks_remaining()`), so that a
queue of prompts runs before any deferred work.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from ..monitors.engine.deferred_steps import DEFERRED
from .runtime import get_runtime

log = logging.getLogger(__name__)

ENV_DEFER = "PIPELINE_MONITOR_DEFER"  # "0": first-time analyses stay inside the prompt


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
    DEFERRED.busy = executor_busy
    return lambda work: DEFERRED.submit(prompt_id, work)

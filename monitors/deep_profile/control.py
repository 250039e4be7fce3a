"""Asking for a deep profile and running it over one prompt: a one-shot switch (panel button, API
route, `PIPELINE_MONITOR_DEEP_PROFILE=1` for the first prompt after start-up) and the controller
the ComfyUI adapter calls at a prompt's start, each node's start and finish, and the prompt's end.

Off, it costs one attribute read per node. Armed, the next prompt that starts takes the request
(the switch turns itself off) and is profiled; the prompt after it is plain again.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping

from .session import DeepProfiler, build_step

log = logging.getLogger(__name__)

ENV_VAR = "PIPELINE_MONITOR_DEEP_PROFILE"
ENV_TRUE = ("1", "true", "yes", "on", "next")


class DeepProfileSwitch:
    def __init__(self, environ: Mapping[str, str] | None = None):
        environ = os.environ if environ is None else environ
        self._armed = str(environ.get(ENV_VAR, "")).strip().lower() in ENV_TRUE
        self._lock = threading.Lock()
        self.last_prompt_id: str | None = None

    @property
    def armed(self) -> bool:
        return self._armed

    def set(self, armed: bool) -> None:
        with self._lock:
            self._armed = bool(armed)

    def take(self) -> bool:
        """Whether this prompt is to be profiled; the request is used up."""
        if not self._armed:  # the common case: no lock
            return False
        with self._lock:
            armed, self._armed = self._armed, False
        return armed


def last_plain_run(store, workflow_name: str | None, other_than: str) -> dict | None:
    """{prompt_id, duration_s} of the newest successful run of `workflow_name` that was not
    deep-profiled, or None."""
    if not workflow_name or store is None:
        return None
    for row in store.summaries():
        if row.get("prompt_id") == other_than or row.get("workflow_name") != workflow_name:
            continue
        if row.get("status") == "success" and "deep_profile" not in (row.get("step_kinds") or ()):
            return {"prompt_id": row.get("prompt_id"), "duration_s": row.get("duration_s")}
    return None


def preload_profiler() -> threading.Thread:
    """torch.profiler's first start in a process imports torch._dynamo (seconds on a small CPU):
    done on a thread of its own when a deep profile is asked for, not on the profiled prompt."""

    def load():
        try:
            import torch._dynamo  # noqa: F401
        except Exception as exc:
            log.debug("pipeline monitor: torch._dynamo not preloaded: %s", exc)

    thread = threading.Thread(target=load, name="pipeline-monitor-profiler-preload", daemon=True)
    thread.start()
    return thread


class DeepProfileController:
    def __init__(self, switch: DeepProfileSwitch | None = None, profiler_factory: Callable | None = None):
        self.switch = switch or DeepProfileSwitch()
        if self.switch.armed:  # armed by the environment: the first prompt need not pay the import
            preload_profiler()
        self.active: DeepProfiler | None = None
        self._factory = profiler_factory
        self._node_lookup: Callable | None = None

    def arm(self, armed: bool) -> None:
        """Ask for a deep profile of the next prompt (True) or take the request back."""
        self.switch.set(armed)
        if armed:
            preload_profiler()

    def state(self) -> dict:
        active = self.active
        return {
            "armed": self.switch.armed,
            "active_prompt_id": None if active is None else active.prompt_id,
            "last_prompt_id": self.switch.last_prompt_id,
        }

    def prompt_started(self, prompt_id: str, cuda: bool, node_lookup: Callable | None = None) -> bool:
        """Start the profiler when a deep profile was asked for; returns whether it did."""
        if self.active is not None:  # the previous prompt never ended: its profiler stops here
            self.active.stop()
            self.active = None
        if not self.switch.take():
            return False
        kwargs = {} if self._factory is None else {"profiler_factory": self._factory}
        self.active = DeepProfiler(str(prompt_id), cuda, **kwargs).start()
        self._node_lookup = node_lookup
        self.switch.last_prompt_id = str(prompt_id)
        return True

    def node_started(self, node_id) -> None:
        active = self.active
        if active is None:
            return
        class_type = None
        if self._node_lookup is not None:
            try:
                class_type = (self._node_lookup(str(node_id)) or (None, None))[0]
            except Exception:
                class_type = None
        active.node_started(str(node_id), class_type)

    def node_finished(self, node_id) -> None:
        active = self.active
        if active is not None:
            active.node_finished(str(node_id))

    def prompt_finished(self, recorder, workflow_name: str | None = None) -> bool:
        """Stop the profiler and add the `deep_profile` step to the recorder's open run."""
        active, self.active = self.active, None
        self._node_lookup = None
        if active is None:
            return False
        events = active.stop()
        store = getattr(recorder, "store", None)
        try:
            baseline = last_plain_run(store, workflow_name, active.prompt_id)
        except Exception as exc:
            log.warning("pipeline monitor: no baseline for the deep profile: %s", exc)
            baseline = None
        step = build_step(active, events, baseline, getattr(store, "reports_dir", None))
        return recorder.add_step(step)


_controller: DeepProfileController | None = None


def get_controller() -> DeepProfileController:
    global _controller
    if _controller is None:
        _controller = DeepProfileController()
    return _controller

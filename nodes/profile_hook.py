"""Per-node profile of every prompt, through ComfyUI's ProgressHandler seam.

ComfyUI builds a new progress registry for each prompt (`execution.reset_progress_state`), so
we wrap that name in `execution` with a `*args, **kwargs` wrapper that opens a run and
registers our handler; the handler's start/finish calls time and peak each node (a finish
without a start is a cached node). `PromptExecutor.execute_async` is wrapped the same way to
close the run with its final status. Feature-detected: if ComfyUI changed, one warning is
logged and the profile is off; nothing here ever raises into ComfyUI.

Newer ComfyUI seams not used here (checked against ComfyUI 0.33.0):
- the prompt lifecycle of cache providers (`comfy_execution.cache_provider`, on_prompt_start /
  on_prompt_end) cannot replace the execute_async wrapper: on_prompt_end gets the prompt id only
  (the run's status comes from the executor's status messages, its workflow from extra_data), the
  seam does not exist in 0.8, and registering a provider turns on external caching for every node
  (each cache miss and store serializes and hashes the node's cache key, and warns for keys that
  cannot be serialized): a cost and log lines on every prompt for nothing the pack needs;
- a progress "activity" signal (a node's model-loading time) is not in 0.33.0: a node's span still
  includes the loading of the models it uses, and ComfyUI's cleanup after the node (the model
  manager's loads and unloads are measured on their own: nodes/model_residency.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

from ..monitors.deep_profile import get_controller as deep_profile
from ..monitors.dumps.writer import finish_pending_writes
from ..monitors.engine.prompt_info import cached_node_ids, run_outcome, workflow_from_extra_data
from ..monitors.report import run_summary
from ..monitors.vocabulary.stages import upstream_walks
from . import headless, model_residency, seams
from .deferred_work import send_cached_step_texts, step_text_context
from .runtime import get_runtime

log = logging.getLogger(__name__)

HANDLER_NAME = "pipeline_monitor"
_WRAPPED = "__pipeline_monitor_wrapped__"
_handler_class = None

# The passthrough monitors whose work ran upstream, each with its stage's graph walk (the stages
# that declare one): their upstream nodes get a full-detail span and the step a memory picture of
# them (monitors/engine/upstream_memory.py).
UPSTREAM_WALKS = upstream_walks()


def _make_handler_class(progress):
    class PipelineMonitorProgressHandler(progress.ProgressHandler):
        def __init__(self, recorder):
            super().__init__(HANDLER_NAME)
            self.recorder = recorder

        def start_handler(self, node_id, *args, **kwargs):
            try:
                self.recorder.node_started(node_id)
            except Exception:
                log.exception("pipeline monitor: node start not recorded")
            deep_profile_call("node_started", node_id)  # its range inside the node's span

        def finish_handler(self, node_id, *args, **kwargs):
            deep_profile_call("node_finished", node_id)
            try:
                self.recorder.node_finished(node_id)
            except Exception:
                log.exception("pipeline monitor: node finish not recorded")

    return PipelineMonitorProgressHandler


def deep_profile_call(method: str, *args, **kwargs):
    """A call on the deep profile controller (monitors/deep_profile/control.py) that never raises."""
    try:
        return getattr(deep_profile(), method)(*args, **kwargs)
    except Exception:
        log.exception("pipeline monitor: deep profile %s failed", method)
        return None


def _prompt_args(args, kwargs):
    prompt_id = kwargs.get("prompt_id", args[0] if args else None)
    dynprompt = kwargs.get("dynprompt", args[1] if len(args) > 1 else None)
    return prompt_id, dynprompt


def _node_lookup(dynprompt):
    """(class_type, title) of a node the prompt expanded into while running (ids like 3.0.0.2)."""

    def lookup(node_id):
        node = dynprompt.get_node(node_id)
        meta = node.get("_meta") or {}
        return node.get("class_type"), meta.get("title")

    return lookup if callable(getattr(dynprompt, "get_node", None)) else None


def on_prompt_start(progress, *args, **kwargs) -> None:
    prompt_id, dynprompt = _prompt_args(args, kwargs)
    if prompt_id is None:
        return
    runtime = get_runtime()
    prompt = getattr(dynprompt, "original_prompt", None)
    runtime.recorder.missing_seams = seams.missing_seams()  # the start-up self-check's, in every report
    runtime.recorder.begin_run(
        str(prompt_id), prompt, node_lookup=_node_lookup(dynprompt), upstream_walks=UPSTREAM_WALKS
    )
    progress.add_progress_handler(_handler_class(runtime.recorder))
    cuda = runtime.recorder.probes.torch_device_count() > 0
    deep_profile_call("prompt_started", str(prompt_id), cuda, node_lookup=_node_lookup(dynprompt))
    # Sampled peaks (NVML, and RSS where the kernel refuses exact peaks) need the sampler.
    runtime.sampler.ensure_started()
    runtime.store.add_listener(announce_run)
    runtime.store.add_listener(headless.send_digest)
    attach_metrics(runtime)


def attach_metrics(runtime) -> None:
    """Count every run in the fleet metrics from the first prompt on, not from the first scrape."""
    try:
        from . import metrics

        if not metrics.PROMETHEUS_MISSING:
            metrics.get_fleet_metrics().attach(runtime.store)
    except Exception:
        log.exception("pipeline monitor: fleet metrics not attached")


def on_prompt_end(executor, extra_data=None) -> None:
    runtime = get_runtime()
    if runtime.recorder.active_prompt_id is None:
        return
    messages = getattr(executor, "status_messages", None) or []
    status, error = run_outcome(messages)
    workflow = workflow_from_extra_data(extra_data)
    model_residency.on_prompt_end(runtime.recorder)
    deep_profile_call("prompt_finished", runtime.recorder, (workflow or {}).get("name"))
    headless.remember_client(runtime.recorder.active_prompt_id, extra_data)
    finish_pending_writes()  # the dumps' steps say written (or why not) in the report
    context = step_text_context(runtime.recorder)
    report = runtime.recorder.end_run(
        status, error, cached_node_ids=cached_node_ids(messages), workflow=workflow, workflow_graph=ui_workflow(extra_data)
    )
    send_cached_step_texts(report, context)


def ui_workflow(extra_data) -> Mapping | None:
    """The UI workflow the frontend sends along with a prompt (its subgraph definitions name the
    report's subgraph roll-ups); None for a prompt queued without one."""
    pnginfo = extra_data.get("extra_pnginfo") if isinstance(extra_data, Mapping) else None
    graph = pnginfo.get("workflow") if isinstance(pnginfo, Mapping) else None
    return graph if isinstance(graph, Mapping) else None


def announce_run(report: Mapping) -> None:
    """A store listener: tell every open panel that a run finished (a broadcast of its run-list
    row, not the report). In a server the store calls it in its batches after the prompts
    (monitors/engine/store.py): the panel hears of a run within WRITE_QUIET_S of its end, or of several
    runs at once on a server that runs prompts back to back, and ComfyUI's own end-of-prompt
    messages go out first."""
    try:
        from server import PromptServer

        summary = get_runtime().store.summary(str(report.get("prompt_id"))) or run_summary(report)
        PromptServer.instance.send_sync("pipeline_monitor.run", summary)
    except Exception as exc:
        log.debug("pipeline monitor: run announcement not sent: %s", exc)


def install() -> bool:
    """Check every seam the pack uses (one warning names what is missing), then wrap the two
    seams of the profile once; returns whether the profile hook is active."""
    global _handler_class
    try:
        seams.check_once()
    except Exception:
        log.exception("pipeline monitor: the start-up check of ComfyUI's symbols failed")
    try:
        import execution
        from comfy_execution import progress
    except Exception as exc:
        log.warning(
            "pipeline monitor: per-node profile off, ComfyUI execution modules not importable (%s)", exc
        )
        return False
    missing = [
        name
        for name, ok in (
            ("execution.reset_progress_state", callable(getattr(execution, "reset_progress_state", None))),
            (
                "execution.PromptExecutor.execute_async",
                callable(getattr(getattr(execution, "PromptExecutor", None), "execute_async", None)),
            ),
            ("progress.ProgressHandler", isinstance(getattr(progress, "ProgressHandler", None), type)),
            ("progress.add_progress_handler", callable(getattr(progress, "add_progress_handler", None))),
        )
        if not ok
    ]
    if missing:
        log.warning("pipeline monitor: per-node profile off, this ComfyUI lacks %s", ", ".join(missing))
        return False
    if getattr(execution.reset_progress_state, _WRAPPED, False):
        return True
    _handler_class = _make_handler_class(progress)

    original_reset = execution.reset_progress_state

    @functools.wraps(original_reset)
    def reset_progress_state(*args, **kwargs):
        result = original_reset(*args, **kwargs)
        try:
            on_prompt_start(progress, *args, **kwargs)
        except Exception:
            log.exception("pipeline monitor: could not start the run record")
        return result

    original_execute_async = execution.PromptExecutor.execute_async

    @functools.wraps(original_execute_async)
    async def execute_async(self, *args, **kwargs):
        # execute_async(prompt, prompt_id, extra_data={}, execute_outputs=[]) in ComfyUI 0.8
        extra_data = kwargs.get("extra_data", args[2] if len(args) > 2 else None)
        try:
            return await original_execute_async(self, *args, **kwargs)
        finally:
            try:
                on_prompt_end(self, extra_data)
            except Exception:
                log.exception("pipeline monitor: could not finish the run record")

    try:
        model_residency.install()  # loads, unloads and LoRA patches of model weights
    except Exception:
        log.exception("pipeline monitor: model residency seams not wrapped")
    deep_profile_call("state")  # made at start-up: PIPELINE_MONITOR_DEEP_PROFILE=1 preloads the profiler now
    setattr(reset_progress_state, _WRAPPED, True)
    setattr(execute_async, _WRAPPED, True)
    execution.reset_progress_state = reset_progress_state
    execution.PromptExecutor.execute_async = execute_async
    return True

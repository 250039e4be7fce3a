"""The `lora` step: did the LoRA(s) before the monitor apply, and how much.

Per side (MODEL, CLIP): the patches added since the base (parent chain) or against a `*_before`
object; per loader in the graph: its file, key coverage and strengths; paired hops and loaders,
and findings. Framework objects are duck-typed; file lookup and key coverage come in as callables.
This file gathers what the prompt reads (the loaders: LoraParts); step.py makes the step from it
and the analysed sides, in the prompt or, for a file seen the first time, after it (after_prompt.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from ..engine.upstream_memory import step_memory
from ..report import StepReport
from .after_prompt import pending_step
from .coverage import merge_loaders, upstream_loaders
from .file import lora_file_status
from .state_dicts import with_shared_state_dicts
from .step import LoraParts, analyse_one_side, caught_exception, finish_step

log = logging.getLogger(__name__)



def _returned(returned: tuple | None) -> dict:
    """Ids of the MODEL / CLIP the node hands on (a monitor hands on its inputs, the same objects)."""
    if returned is None:
        return {
            "model_object_id": None,
            "clip_object_id": None,
            "n_models": None,
            "unknown_reason": "the caller did not say what it returns",
        }
    model, clip = (tuple(returned) + (None, None))[:2]
    return {
        "model_object_id": None if model is None else id(model),
        "clip_object_id": None if clip is None else id(clip),
        "n_models": sum(1 for obj in (model, clip) if obj is not None),
        "unknown_reason": None,
    }


def analyse_loaders(
    node_id, prompt, model, clip, errors: list, recorder, lora_path, coverage, exceptions: list | None = None
) -> list[dict]:
    """The LoRA loaders upstream of the monitor, each with its file's status and key coverage;
    what fails goes to `errors` (one line) and `exceptions` (with the traceback)."""
    model_loaders = upstream_loaders(prompt, node_id, "model")
    clip_loaders = upstream_loaders(prompt, node_id, "clip") if clip is not None else []
    loaders = merge_loaders(model_loaders, clip_loaders)
    for loader in loaders:
        loader["file"], loader["coverage"] = None, None
        profile = None if recorder is None else recorder.node_profile(loader["node_id"])
        loader["profile"] = None if profile is None else profile.to_dict()
        try:
            status, index = lora_file_status(loader["lora_name"], lora_path(loader["lora_name"]))
            loader["file"] = status
            if (
                coverage is not None
                and status["exists"]
                and status["header_ok"] is not False
                and status.get("data_ok") is not False
                and not loader["skipped"]
            ):
                loader["coverage"] = coverage(
                    model if loader["on_model_path"] else None,
                    clip if loader["on_clip_path"] else None,
                    status["path"],
                    index,
                )
        except Exception as exc:
            errors.append(f"loader {loader['node_id']}: {type(exc).__name__}: {exc}")
            if exceptions is not None:
                exceptions.append(caught_exception(f"loader {loader['node_id']}", exc))
            log.warning("pipeline monitor: LoRA file check of node %s failed: %s", loader["node_id"], exc)
    return loaders


def _no_file(name: str | None) -> None:
    return None


@with_shared_state_dicts
def build_lora_step(
    node_id: str | None,
    prompt: Mapping | None,
    model,
    clip=None,
    model_before=None,
    clip_before=None,
    *,
    recorder=None,
    lora_path: Callable[[str | None], str | None] = _no_file,
    coverage: Callable | None = None,
    calculate: Callable | None = None,
    returned: tuple | None = None,
    defer: Callable | None = None,
) -> StepReport:
    """The `lora` step of the MODEL / CLIP given, against their patch history or the `*_before` objects.

    `recorder` (a RunRecorder) gives the loaders' profile rows; `lora_path` resolves a loader's
    lora_name to a file; `coverage(model, clip, path, header_index)` recomputes key coverage with
    the framework's own key mapping (none: coverage not computed); `returned`: the (MODEL, CLIP) the
    node hands on, for their ids. `defer(work)` (DEFERRED.submit for the running prompt): when a
    side's analysis is first-time work, the step comes back pending and `work` finishes it after
    the prompt (after_prompt.py).
    """
    started = time.perf_counter()
    # the loaders first (the sides reuse their files' figures); their errors are listed after the sides'
    loader_errors, loader_exceptions = [], []
    loaders = analyse_loaders(
        node_id, prompt, model, clip, loader_errors, recorder, lora_path, coverage, loader_exceptions
    )
    parts = LoraParts(
        node_id, clip, loaders, loader_errors, loader_exceptions, _returned(returned), step_memory(recorder, node_id)
    )
    pairs = (("model", model, model_before), ("clip", clip, clip_before))
    if defer is not None:
        try:
            pending = pending_step(parts, pairs, calculate, defer, started)
        except Exception as exc:  # the analysis is then made now, in the prompt
            log.warning("pipeline monitor: LoRA analysis not deferred: %s: %s", type(exc).__name__, exc)
            pending = None
        if pending is not None:
            return pending
    errors, exceptions, findings = [], [], []
    sides = {}
    for kind, after, before in pairs:
        side = analyse_one_side(kind, after, before, loaders, calculate, findings, errors, exceptions)
        if side is not None:
            sides[kind] = side
    return finish_step(parts, sides, errors, exceptions, findings, time.perf_counter() - started)



"""The LoRA step of a first file: returned pending in the prompt, finished after it.

In the prompt: the loaders (file status, key coverage), the check that a side is first-time work
(after_prompt.first_time_work), the base weights taken (after_prompt.take_base_weights) and both
ends of each side described (side.describe_ends: where the monitor stood, not where the sampler
left the model); the step comes back pending with those figures and a finding that says the rest
comes after the prompt. After it, on the deferred-steps worker (monitors/engine/deferred_steps.py), one slice per
side analyses the patches against the weights taken, then the whole step is made as the prompt
would have made it, with `details.deferred` (its time in and after the prompt).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable

from ..models.state import shared_module_memory
from ..report import Finding, StepReport
from .after_prompt import first_time_work, take_base_weights
from .details import LORA_DETAILS
from .side import describe_ends, patcher_of
from .state_dicts import shared_state_dicts
from .step import STEP_KIND, LoraParts, analyse_one_side, finish_step, loader_files, step_summary

AFTER_PROMPT_CODE = "lora_figures_after_prompt"
AFTER_PROMPT_MESSAGE = (
    "first analysis of this LoRA file on this model: the patch figures are computed after the prompt "
    "and come in this report when done (the node's text keeps the figures it had)"
)


def pending_step(parts: LoraParts, pairs, calculate, defer: Callable, started: float) -> StepReport | None:
    """The pending step, its sides handed to `defer` as a job; None when no side is first-time
    work or `defer` takes no more jobs (the caller analyses them now)."""
    if not any(
        after is not None and first_time_work(kind, after, before, loader_files(parts.loaders, kind))
        for kind, after, before in pairs
    ):
        return None
    lookups = {kind: take_base_weights(kind, after) for kind, after, _ in pairs if after is not None}
    # the ends as the monitor saw them: after the prompt a sampler has loaded and patched the model
    ends = {kind: _ends_now(kind, after, before) for kind, after, before in pairs if after is not None}
    loaders = copy.deepcopy(parts.loaders)  # the pending step's own: the work fills the parts' ones
    job = {"in_prompt_s": None}

    def work():
        return _finish_after_prompt(parts, pairs, calculate, lookups, ends, job)

    job_id = defer(work)
    if job_id is None:
        return None
    job["job_id"] = job_id
    in_prompt_s = job["in_prompt_s"] = time.perf_counter() - started
    # success is not known until the sides are analysed
    summary = dataclasses.replace(step_summary(loaders, {}, [], parts.returned_ids, in_prompt_s), success=None)
    deferred = {"job_id": job_id, "in_prompt_s": in_prompt_s, "after_prompt_s": None,
                "started_unix_s": None, "finished_unix_s": None}
    return StepReport(
        kind=STEP_KIND,
        node_id=parts.node_id,
        summary=summary.to_dict(),
        details=LORA_DETAILS.build(
            loaders=loaders,
            returned=parts.returned_ids,
            exceptions=list(parts.loader_exceptions),
            n_exceptions=len(parts.loader_exceptions),
            deferred=deferred,
            **parts.memory,
        ),
        findings=(Finding("info", AFTER_PROMPT_MESSAGE, AFTER_PROMPT_CODE),),
        monitor_errors=tuple(parts.loader_errors),
        created_unix_s=time.time(),
        pending=True,
    )


def _ends_now(kind: str, after, before) -> dict | None:
    """side.describe_ends now, in the prompt; None (described after it) for a side without
    patches or one that cannot be described: the analysis says why."""
    if not hasattr(patcher_of(kind, after), "patches"):
        return None
    try:
        return describe_ends(kind, after, before)
    except Exception:
        return None


def _finish_after_prompt(parts: LoraParts, pairs, calculate, lookups: dict, ends: dict, job: dict):
    """The job: one slice per side (the worker may yield between them), then the step."""
    started_unix_s, started = time.time(), time.perf_counter()
    errors, exceptions, findings = [], [], []
    sides = {}
    for kind, after, before in pairs:
        with shared_state_dicts(), shared_module_memory():
            side = analyse_one_side(
                kind, after, before, parts.loaders, calculate, findings, errors, exceptions,
                lookups.get(kind), ends.get(kind),
            )
        if side is not None:
            sides[kind] = side
        yield
    after_prompt_s = time.perf_counter() - started
    deferred = {
        "job_id": job.get("job_id"),
        "in_prompt_s": job["in_prompt_s"],
        "after_prompt_s": after_prompt_s,
        "started_unix_s": started_unix_s,
        "finished_unix_s": time.time(),
    }
    analysis_s = (job["in_prompt_s"] or 0.0) + after_prompt_s
    step = finish_step(parts, sides, errors, exceptions, findings, analysis_s, deferred)
    return dataclasses.replace(step, findings=(*step.findings, _done_finding()))


def _done_finding() -> Finding:
    return Finding(
        "info",
        "first analysis of this LoRA file on this model: these figures were computed after the prompt "
        "(the node's text showed none of them)",
        AFTER_PROMPT_CODE,
    )

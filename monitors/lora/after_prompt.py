"""The LoRA step of a first file: returned pending in the prompt, finished after it.

In the prompt: the loaders (file status, key coverage), the check that a side is first-time work
(first_time_work), the base weights taken (take_base_weights) and both ends of each side described
(side.describe_ends: where the monitor stood, not where the sampler left the model); the step comes
back pending with those figures and a finding that says the rest comes after the prompt. After it,
on the deferred-steps worker (monitors/engine/deferred_steps.py), one slice per side analyses the
patches against the weights taken, then the whole step is made as the prompt would have made it,
with `details.deferred` (its time in and after the prompt).

`first_time_work`: whether a side's patches have no row template yet (templates.py) on their
loaded module: a LoRA file this model has not seen, whose analysis reads every patched weight
(about 650 ms on the CPU's full-size SD1.5 bench). A repeat (a new strength) stays in the prompt.

`take_base_weights`: the side's base weights taken before the node returns, so that a read after
the prompt sees them as they were, never half-patched. ComfyUI patches a weight in one of two ways
(comfy/model_patcher.py patch_weight_to_device):
- replacing it (`set_attr_param`, the default): the module gets a new Parameter and the tensor it
  held stays as it was, kept as the patcher's backup. Taking it is keeping a detached alias of it
  (no copy): nothing ever writes into that storage, on the CPU as on CUDA. The alias keeps the
  storage alive until the job ends (on a GPU: that memory is freed when the job ends, not before).
- in place (a patcher with `weight_inplace_update`: `prev.data.copy_(patched)`, which no version
  counter sees): the weight is copied now. On CUDA the copy is enqueued on the current stream,
  where ComfyUI enqueues its later patching on the executor thread, so the copy reads the weight
  before any later patch (stream order) and the node does not wait for it; on the CPU the copy is
  made before the node returns. Copies are bounded by TAKE_COPY_ELEMENT_BUDGET; a weight past it
  is left unread, with the reason.
A weight whose version counter moved since it was taken (an in-place change torch saw) is refused
at the read, with the reason; inference tensors (ComfyUI's weights, loaded under inference mode)
keep no version counter, so for them the two rules above are the whole guarantee. Nothing here
reads a value back to the host.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable

from ..models.state import shared_module_memory
from ..report import Finding, StepReport
from .analysis import added_entries, base_weight_lookup, parent_chain, patches_of
from .caches import entry_files
from .details import LORA_DETAILS
from .patches import entry_tensors
from .side import describe_ends, patcher_of
from .state_dicts import shared_state_dicts
from .step import STEP_KIND, LoraParts, analyse_one_side, finish_step, loader_files, step_summary
from .templates import TEMPLATES

TAKE_COPY_ELEMENT_BUDGET = 1 << 28  # elements copied per side for patchers that patch in place
SAMPLED_ENTRIES = 8  # entries looked up per hop to tell a known file from a first one


class BaseWeightNotTaken(Exception):
    """A base weight the step could not take safely for its read after the prompt."""


def _hops(kind: str, after, before) -> list[tuple]:
    patcher = patcher_of(kind, after)
    if patcher is None or not hasattr(patcher, "patches"):
        return []
    if before is not None:
        return [(patcher, patcher_of(kind, before))]
    chain = parent_chain(patcher)
    return list(zip(chain[:-1], chain[1:], strict=True))


def first_time_work(kind: str, after, before=None, hop_files=None) -> bool:
    """True when a hop of the side adds patches none of whose first SAMPLED_ENTRIES entries with
    tensors has a template on the loaded module (found as RowPlan finds it: by the entry's file,
    caches.entry_files, or its tensors): its figures would be computed from the weights."""
    patcher = patcher_of(kind, after)
    templates = TEMPLATES.of(getattr(patcher, "model", None), create=False)
    pairs = _hops(kind, after, before)
    added_by_hop = [added_entries(patches_of(child), patches_of(parent)) for child, parent in pairs]
    files = entry_files(pairs, added_by_hop, hop_files) if before is None else {}
    for added in added_by_hop:
        sampled = []
        for key, entries in added.items():
            sampled.extend((str(key), e) for e in entries if entry_tensors(e))
            if len(sampled) >= SAMPLED_ENTRIES:
                break
        if not sampled:
            continue
        if templates is None or all(templates.get(k, e, files.get(id(e))) is None for k, e in sampled):
            return True
    return False


def take_base_weights(kind: str, after) -> Callable[[str], object]:
    """key -> the base weight as it was when taken (see the module's docstring)."""
    import torch

    patcher = patcher_of(kind, after)
    live = base_weight_lookup(patcher)
    copy = bool(getattr(patcher, "weight_inplace_update", False))
    budget = [TAKE_COPY_ELEMENT_BUDGET]
    taken: dict[str, tuple] = {}
    for key in patches_of(patcher):
        try:
            weight = live(key)
        except Exception as exc:
            taken[key] = (None, None, exc)
            continue
        if type(weight) not in (torch.Tensor, torch.nn.Parameter) or weight.device.type == "meta":
            taken[key] = (weight, None, None)  # read as it is (quantised, offloaded: no figure)
        elif copy and weight.numel() > budget[0]:
            reason = "base weight patched in place by ComfyUI and past the copy budget: not taken"
            taken[key] = (None, None, BaseWeightNotTaken(reason))
        elif copy:
            budget[0] -= weight.numel()
            taken[key] = (weight.detach().clone(), None, None)  # on CUDA: enqueued, not waited for
        else:
            alias = weight.detach()
            taken[key] = (alias, _version(alias), None)

    def lookup(key: str):
        weight, version, error = taken.get(key, (None, None, None))
        if error is not None:
            raise error
        if version is not None and _version(weight) != version:
            raise BaseWeightNotTaken("base weight changed in place after the prompt, before its read")
        return weight

    return lookup


def _version(tensor) -> int | None:
    """The tensor's version counter; None for an inference tensor (torch keeps none: ComfyUI loads
    its weights under inference mode), where only the replacement rule above holds."""
    try:
        return tensor._version
    except RuntimeError:
        return None


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
    # the ends as the monitor saw them: after the prompt a sampler has loaded and patched the model
    try:
        ends = {kind: _ends_now(kind, after, before) for kind, after, before in pairs if after is not None}
    except Exception:  # not describable now: the whole step in the prompt, which says why
        return None
    lookups = {kind: take_base_weights(kind, after) for kind, after, _ in pairs if after is not None}
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
    """side.describe_ends now, in the prompt; None for a side without patches (the analysis says
    so). Raises where a side cannot be described: describing it after the prompt would describe
    the model as the sampler left it."""
    if not hasattr(patcher_of(kind, after), "patches"):
        return None
    return describe_ends(kind, after, before)


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

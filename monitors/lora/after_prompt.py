"""What the LoRA step needs to finish its first analysis of a file after the prompt.

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

from collections.abc import Callable

from .analysis import added_entries, base_weight_lookup, parent_chain, patches_of
from .caches import entry_files
from .side import patcher_of
from .templates import TEMPLATES, entry_tensors

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

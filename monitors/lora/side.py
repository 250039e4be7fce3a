"""One side (MODEL or CLIP) of a LoRA step: baseline vs after, hop by hop along the parent chain.

With an explicit `before` there is one comparison; otherwise each clone in the `.parent` chain is a
hop (stacked loaders give one hop each) and the chain's oldest patcher is the baseline. Metadata
and identities only: the state dicts are compared by shape, dtype, device and storage, never by
copying a tensor. The result is plain data.
"""

from __future__ import annotations

from typing import Any

from ..models.state import describe_clip, describe_model
from ..numeric.device_figures import resolve
from ..numeric.tensor_stats import one_cpu_thread
from .analysis import (
    MATERIALISE_ELEMENT_BUDGET,
    MAX_LISTED_KEYS,
    RowPlan,
    added_entries,
    aggregate,
    base_weight_lookup,
    by_block,
    parent_chain,
    patches_of,
)
from .caches import Reuse, entry_files
from .state_dicts import LiveState, state_dict_of
from .weights import WeightPlan, leaf_parameter_rule

MAX_LISTED_NAMES = 200  # state-dict key names listed per change kind
PLACEMENT_FIELDS = (
    "device",
    "load_device",
    "offload_device",
    "dtype",
    "size_bytes",
    "resident_bytes",
    "loaded_weight_bytes",
    "weights_patched",
)


def patcher_of(kind: str, obj):
    """The ModelPatcher behind a MODEL (itself) or a CLIP (`.patcher`)."""
    return obj if kind == "model" else getattr(obj, "patcher", None)


def _describe(kind: str, obj, is_patcher: bool) -> dict[str, Any]:
    if kind == "clip" and not is_patcher:
        return describe_clip(obj)
    info = describe_model(obj)
    info["kind"] = "clip_patcher" if kind == "clip" else "model"
    return info


def not_patched_rule(patcher):
    """ComfyUI's loader patches parameters of leaf modules only (ModelPatcher._load_list): the
    rule applies where the patcher has that loader, feature-detected."""
    if not callable(getattr(patcher, "_load_list", None)):
        return None
    return leaf_parameter_rule(getattr(patcher, "model", None))


def describe_ends(kind: str, after, before=None) -> dict[str, Any]:
    """The side's two ends as the step describes them, read now: the baseline (`before`, or the
    oldest patcher of the chain) and the object after. A step analysed after the prompt takes them
    in the prompt, where the monitor stood (a sampler later loads and patches the same model)."""
    after_patcher = patcher_of(kind, after)
    if before is not None:
        baseline = _describe(kind, before, is_patcher=False)
    else:
        baseline = _describe(kind, parent_chain(after_patcher)[-1], is_patcher=True)
    return {"baseline": baseline, "after": _describe(kind, after, is_patcher=False)}


def analyse_side(
    kind: str, after, before=None, base_norms: bool = True, calculate=None, hop_files=None, reuse=None,
    lookup=None, described: dict | None = None,
) -> dict[str, Any]:
    """Everything the step reports for one side; `before` None means: walk the parent chain.

    `calculate(entries, weight, key)` is the framework's weight arithmetic (ComfyUI's
    calculate_weight): with it, patches whose change depends on the base weight get exact norms
    on a copy of that weight, within the read budget. `hop_files`: (file identity, strength) of
    the loaders that made the patching hops, nearest first (caches.file_identity), so that the
    figures of a file already analysed are reused; `reuse`: the caches (default: the pack's own);
    `lookup`: the base weights taken earlier (after_prompt.take_base_weights; default: read now);
    `described`: the ends as describe_ends took them earlier (default: described now).
    Every figure of the side is read back in two batches: the patches', then the weights'.
    """
    after_patcher = patcher_of(kind, after)
    if after_patcher is None or not hasattr(after_patcher, "patches"):
        return {"kind": kind, "analysed": False, "reason": f"{type(after).__name__} has no patches"}
    described = described or describe_ends(kind, after, before)
    baseline = described["baseline"]
    if before is not None:
        before_patcher = patcher_of(kind, before)
        pairs = [(after_patcher, before_patcher)]
        mode = "explicit"
    else:
        chain = parent_chain(after_patcher)
        pairs = list(zip(chain[:-1], chain[1:], strict=True))
        before_patcher = chain[-1]
        mode = "parent_chain"
    lookup = (lookup or base_weight_lookup(after_patcher)) if base_norms else None
    rule = not_patched_rule(after_patcher)
    budget = [MATERIALISE_ELEMENT_BUDGET]
    added_by_hop = [added_entries(patches_of(child), patches_of(parent)) for child, parent in pairs]
    files = entry_files(pairs, added_by_hop, hop_files) if mode == "parent_chain" else {}
    if reuse is None:
        reuse = Reuse(getattr(after_patcher, "model", None), files)
    else:
        reuse.files_by_entry = files
    hops, all_rows, patched_keys, all_added = _hops(pairs, added_by_hop, lookup, rule, reuse)
    # All hops together, each key's entries in the order ComfyUI applies them (its patches list)
    rows_by_key = _by_key(all_rows)
    ordered = {k: _in_patch_order(rows_by_key[str(k)], all_added[k], after_patcher) for k in all_added}
    overall_rows = [row for k in sorted(ordered, key=str) for row, _ in ordered[k]]
    overall_added = {str(k): [e for _, e in v] for k, v in ordered.items()}
    weights = _weights(hops, added_by_hop, overall_added, overall_rows, lookup, calculate, budget, reuse)
    overall_weights = weights[-1]
    for hop, hop_weights in zip(hops, weights[:-1], strict=True):
        rows = hop.pop("_rows")
        hop["totals"] = aggregate(rows, hop_weights)
        hop["by_block"] = by_block(rows, hop_weights)
    states = state_dicts(before_patcher, after_patcher)
    add_weight_figures(overall_weights[:MAX_LISTED_KEYS], states, before_patcher, after_patcher)
    after_info = described["after"]
    return {
        "kind": kind,
        "analysed": True,
        "mode": mode,
        "baseline": baseline,
        "after": after_info,
        "identity": identity_changes(kind, after, before, after_patcher, before_patcher, len(pairs)),
        "hops": hops,
        "overall": {
            "totals": aggregate(all_rows, overall_weights),
            "by_block": by_block(all_rows, overall_weights),
            "weights": overall_weights[:MAX_LISTED_KEYS],
            "weights_truncated": len(overall_weights) > MAX_LISTED_KEYS,
        },
        "reuse": reuse.to_dict(),
        "weight_modifications": weight_modifications(before_patcher, after_patcher, patched_keys, states),
        "placement_changes": placement_changes(baseline, after_info),
    }


def _hops(pairs, added_by_hop, lookup, rule, reuse) -> tuple:
    """The hops' rows, every patch figure read back at once."""
    plans = [RowPlan(added, lookup, rule, reuse) for added in added_by_hop]
    resolve([figure for plan in plans for figure in plan.figures()])
    hops, all_rows, patched_keys, all_added = [], [], set(), {}
    listed = [MAX_LISTED_KEYS]
    for index, ((child, parent), added, plan) in enumerate(zip(pairs, added_by_hop, plans, strict=True)):
        rows = plan.finish()
        removed = added_entries(patches_of(parent), patches_of(child))
        patched_keys.update(str(k) for k in added)
        all_rows.extend(rows)
        for key, entries in added.items():
            all_added.setdefault(key, []).extend(entries)
        shown = rows[: listed[0]]
        listed[0] -= len(shown)
        hops.append(
            {
                "index": index,
                "after_object_id": id(child),
                "before_object_id": id(parent),
                "after_patches_uuid": _str(getattr(child, "patches_uuid", None)),
                "patches_uuid_changed": getattr(child, "patches_uuid", None)
                != getattr(parent, "patches_uuid", None),
                "n_patch_keys_added": len(added),
                "n_entries_added": sum(len(v) for v in added.values()),
                "n_entries_removed": sum(len(v) for v in removed.values()),
                "_rows": rows,
                "keys": shown,
                "keys_truncated": len(shown) < len(rows),
            }
        )
    return hops, all_rows, patched_keys, all_added


def _weights(hops, added_by_hop, overall_added, overall_rows, lookup, calculate, budget, reuse) -> list:
    """Weight rows of each hop and of all hops together, every figure read back at once."""
    cache: dict = {}
    pending: dict = {}  # a weight with the same applied entries in a hop and overall: planned once
    with one_cpu_thread("cpu"):
        plans = [
            WeightPlan(
                _str_keys(added), _by_key(hop["_rows"]), lookup, calculate, budget, cache, reuse, pending
            )
            for hop, added in zip(hops, added_by_hop, strict=True)
        ]
        plans.append(
            WeightPlan(overall_added, _by_key(overall_rows), lookup, calculate, budget, cache, reuse, pending)
        )
    resolve([figure for plan in plans for figure in plan.figures()])
    return [plan.finish() for plan in plans]


def _str_keys(added: dict) -> dict:
    return {str(k): v for k, v in added.items()}


def _by_key(rows: list[dict]) -> dict[str, list]:
    found: dict[str, list] = {}
    for row in rows:
        found.setdefault(row["key"], []).append(row)
    return found


def _in_patch_order(key_rows: list[dict], entries: list, patcher) -> list[tuple]:
    """(row, entry) pairs of one key (its rows, in the order of `entries`) in the order of the
    patcher's own list for that key."""
    key = key_rows[0]["key"] if key_rows else None
    pairs = {id(e): (r, e) for r, e in zip(key_rows, entries, strict=True)}
    order = [id(e) for e in patches_of(patcher).get(key, ())]
    if not order and entries:  # a key that is not a str: the patcher's own key object
        order = [id(e) for k, v in patches_of(patcher).items() if str(k) == key for e in v]
    listed = set(order)
    ranked = [pairs[i] for i in order if i in pairs]
    return ranked + [p for i, p in pairs.items() if i not in listed]


def _str(value) -> str | None:
    return None if value is None else str(value)


def _n_patches(patcher) -> int | None:
    patches = getattr(patcher, "patches", None)
    return len(patches) if isinstance(patches, dict) else None


def identity_changes(kind, after, before, after_patcher, before_patcher, n_hops) -> dict[str, Any]:
    chain = parent_chain(after_patcher)
    after_keys, before_keys = set(patches_of(after_patcher)), set(patches_of(before_patcher))
    added = added_entries(patches_of(after_patcher), patches_of(before_patcher))
    info = {
        "same_object": after_patcher is before_patcher,
        "cloned": after_patcher is not before_patcher and any(p is before_patcher for p in chain),
        "module_shared": getattr(after_patcher, "model", None) is getattr(before_patcher, "model", None),
        "class_before": type(before_patcher).__name__,
        "class_after": type(after_patcher).__name__,
        "class_changed": type(before_patcher) is not type(after_patcher),
        "n_patches_before": _n_patches(before_patcher),
        "n_patches_after": _n_patches(after_patcher),
        "n_patch_keys_added": len(after_keys - before_keys),
        "n_patch_keys_removed": len(before_keys - after_keys),
        "n_entries_added": sum(len(v) for v in added.values()),
        "patches_uuid_before": _str(getattr(before_patcher, "patches_uuid", None)),
        "patches_uuid_after": _str(getattr(after_patcher, "patches_uuid", None)),
        "n_hops": n_hops,
    }
    info["uuid_changed"] = info["patches_uuid_before"] != info["patches_uuid_after"]
    if kind == "clip":
        info["clip_object_id_after"] = id(after)
        info["clip_object_id_before"] = None if before is None else id(before)
        info["clip_object_id_before_unknown_reason"] = (
            None
            if before is not None
            else "no clip_before connected: a CLIP clone keeps no reference to the CLIP it was cloned "
            "from, only its patcher's parent chain (baseline.object_id is the oldest patcher's id)"
        )
    else:
        # a MODEL is its patcher, so the chain's oldest patcher is the MODEL the first loader got
        info["model_object_id_after"] = id(after)
        info["model_object_id_before"] = id(before if before is not None else before_patcher)
    return info


def _state_dict(patcher) -> tuple[dict | None, str | None]:
    """(the patcher's module's state dict, why it is None): references to its tensors, no copies."""
    module = getattr(patcher, "model", None)
    if not hasattr(module, "state_dict"):
        return None, f"{type(module).__name__} has no state_dict"
    try:
        return state_dict_of(module), None
    except Exception as exc:
        return None, f"state_dict unreadable: {type(exc).__name__}: {exc}"


def state_dicts(before_patcher, after_patcher) -> tuple[tuple, tuple]:
    """((before, why), (after, why)) state dicts; read once when both patchers share their module."""
    after = _state_dict(after_patcher)
    if getattr(before_patcher, "model", None) is getattr(after_patcher, "model", None):
        return after, after
    return _state_dict(before_patcher), after


def _shape(state: dict | None, key: str) -> list[int] | None:
    if isinstance(state, LiveState):
        return state.shape(key)
    tensor = None if state is None else state.get(key)
    return None if tensor is None or not hasattr(tensor, "shape") else [int(d) for d in tensor.shape]


def _counts_by_name(patches: dict) -> dict[str, int]:
    return {str(k): len(v) for k, v in patches.items()}


def add_weight_figures(weights: list[dict], states, before_patcher, after_patcher) -> None:
    """Per weight row: its state-dict shape before and after, and how many patches each patcher holds
    for it (ComfyUI applies them all, in list order, when the model loads)."""
    (before_state, before_why), (after_state, after_why) = states
    before_counts = _counts_by_name(patches_of(before_patcher))
    after_counts = _counts_by_name(patches_of(after_patcher))
    for row in weights:
        key = row["key"]
        row["shape_before"] = _shape(before_state, key)
        row["shape_after"] = _shape(after_state, key)
        why = None
        if row["shape_before"] is None or row["shape_after"] is None:
            why = before_why or after_why or "no tensor under this key in the state dict"
        row["shape_unknown_reason"] = why
        row["n_patches_before"] = before_counts.get(key, 0)
        row["n_patches"] = after_counts.get(key, 0)


def _tensor_meta(tensor) -> tuple:
    try:
        pointer = tensor.data_ptr() if tensor.device.type != "meta" else None
    except Exception:
        pointer = None
    return (tuple(tensor.shape), str(tensor.dtype).replace("torch.", ""), str(tensor.device), pointer)


def _names(keys) -> dict[str, Any]:
    keys = sorted(keys)
    return {"count": len(keys), "keys": keys[:MAX_LISTED_NAMES], "truncated": len(keys) > MAX_LISTED_NAMES}


def weight_modifications(before_patcher, after_patcher, patched_keys, states=None) -> dict[str, Any]:
    """State-dict keys added/removed/modified and shape/dtype/device changes, from metadata only.

    `patched_keys` are the weights whose patches changed: they take a new value when the model is
    loaded. Two patchers over one module share every tensor, so only those can differ. `states`:
    state_dicts() when the caller has read them already.
    """
    before_module = getattr(before_patcher, "model", None)
    after_module = getattr(after_patcher, "model", None)
    states = states or state_dicts(before_patcher, after_patcher)
    (before_state, before_why), (after_state, after_why) = states
    reasons = {}
    if before_state is None:
        reasons["n_state_dict_keys_before"] = before_why
    if after_state is None:
        reasons["n_state_dict_keys_after"] = after_why
    result = {
        "module_shared": before_module is after_module,
        "n_state_dict_keys_before": None if before_state is None else len(before_state),
        "n_state_dict_keys_after": None if after_state is None else len(after_state),
        "unknown_reasons": reasons,
    }
    if before_module is after_module or before_state is None or after_state is None:
        result.update(
            added=_names(()),
            removed=_names(()),
            modified=_names(patched_keys),
            shape_changed=_names(()),
            dtype_changed=_names(()),
            device_changed=_names(()),
            storage_changed=_names(()),
        )
        return result
    before_meta = {k: _tensor_meta(v) for k, v in before_state.items()}
    after_meta = {k: _tensor_meta(v) for k, v in after_state.items()}
    common = before_meta.keys() & after_meta.keys()
    changed = {
        field: {k for k in common if before_meta[k][i] != after_meta[k][i]}
        for i, field in enumerate(("shape", "dtype", "device", "storage"))
    }
    result.update(
        added=_names(after_meta.keys() - before_meta.keys()),
        removed=_names(before_meta.keys() - after_meta.keys()),
        modified=_names(set(patched_keys) | set().union(*changed.values())),
        shape_changed=_names(changed["shape"]),
        dtype_changed=_names(changed["dtype"]),
        device_changed=_names(changed["device"]),
        storage_changed=_names(changed["storage"]),
    )
    return result


def placement_changes(before: dict, after: dict) -> dict[str, dict]:
    """field -> {before, after} for device, load/offload device, dtype and memory fields that differ."""
    return {
        field: {"before": before.get(field), "after": after.get(field)}
        for field in PLACEMENT_FIELDS
        if before.get(field) != after.get(field)
    }

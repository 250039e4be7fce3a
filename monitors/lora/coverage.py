"""LoRA loaders found in the prompt graph, key coverage of their files, and what to tell the user.

The graph is ComfyUI's API-format prompt ({id: {class_type, inputs}}); a link is [source_id, slot].
Walking up from the monitor's `model` (or `clip`) input through every node that has an input of
the same name finds the loaders in stack order, nearest first. Coverage is set arithmetic over file
keys: which ones the loader consumed (ComfyUI's load_lora rules, notes section 3) and which it
ignored. Plain data in, plain data out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, KeysView, Mapping
from typing import Any

from ..report import Finding
from .state_dicts import state_dict_of

LORA_LOADER_CLASSES = ("LoraLoader", "LoraLoaderModelOnly")
MAX_WALK = 256  # nodes visited per input walk
MAX_LISTED_UNMATCHED = 200
# Above this share of stray keys (unmatched, text-encoder keys aside) the LoRA was most likely made
# for another base model: an error. Below it, a warning naming the count (a LoRA with some extra
# modules, e.g. trained on a variant with more blocks, still does what it should on the rest).
UNMATCHED_FOREIGN_FRACTION = 0.5
# Suffixes load_lora consumes for every key it maps, besides what the adapters report (lora.py:40-89).
CONSUMED_SUFFIXES = ("alpha", "dora_scale", "diff", "diff_b", "set_weight", "w_norm")
TEXT_ENCODER_GROUPS = (
    "lora_te",
    "lora_te1",
    "lora_te2",
    "lora_te3",
    "lora_prior_te",
    "text_encoders",
    "text_encoder",
    "text_encoder_2",
)


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def is_lora_loader(node: Mapping) -> bool:
    inputs = node.get("inputs")
    return node.get("class_type") in LORA_LOADER_CLASSES or (
        isinstance(inputs, Mapping) and isinstance(inputs.get("lora_name"), str)
    )


def loader_info(node_id: str, node: Mapping) -> dict[str, Any]:
    inputs = node.get("inputs") if isinstance(node.get("inputs"), Mapping) else {}
    meta = node.get("_meta") if isinstance(node.get("_meta"), Mapping) else {}
    has_clip = "clip" in inputs
    strength_clip = _number(inputs.get("strength_clip")) if has_clip else 0.0
    strength_model = _number(inputs.get("strength_model"))
    return {
        "node_id": node_id,
        "class_type": node.get("class_type"),
        "title": meta.get("title") if isinstance(meta.get("title"), str) else None,
        "lora_name": inputs.get("lora_name") if isinstance(inputs.get("lora_name"), str) else None,
        "strength_model": strength_model,
        "strength_clip": strength_clip,
        "has_clip_input": has_clip,
        # LoraLoader returns its inputs untouched when both strengths are 0 (nodes.py:670)
        "skipped": strength_model == 0.0 and strength_clip == 0.0,
    }


def upstream_loaders(prompt: Mapping | None, node_id: str | None, input_name: str) -> list[dict]:
    """LoRA loaders feeding `input_name` of node `node_id`, nearest first."""
    if not isinstance(prompt, Mapping) or node_id is None:
        return []
    node = prompt.get(str(node_id))
    link = node.get("inputs", {}).get(input_name) if isinstance(node, Mapping) else None
    found, seen = [], set()
    while isinstance(link, (list, tuple)) and len(link) == 2 and len(seen) < MAX_WALK:
        source_id = str(link[0])
        source = prompt.get(source_id)
        if source_id in seen or not isinstance(source, Mapping):
            break
        seen.add(source_id)
        if is_lora_loader(source):
            found.append(loader_info(source_id, source))
        inputs = source.get("inputs")
        link = inputs.get(input_name) if isinstance(inputs, Mapping) else None
    return found


def merge_loaders(model_loaders: list[dict], clip_loaders: list[dict]) -> list[dict]:
    """One row per loader node, marked with the paths it sits on (model first, in stack order)."""
    merged: dict[str, dict] = {}
    for path, loaders in (("model", model_loaders), ("clip", clip_loaders)):
        for loader in loaders:
            row = merged.setdefault(
                loader["node_id"], {**loader, "on_model_path": False, "on_clip_path": False}
            )
            row[f"on_{path}_path"] = True
    return list(merged.values())


def attribute_hops(hops: list[dict], loaders: list[dict], strength_field: str) -> list[dict]:
    """Pair hops that changed patches with the (non-skipped) loaders, both nearest first.

    Loaders clone and call add_patches, which always re-rolls the patches UUID; other cloning
    nodes keep it. A pair is `consistent` when the hop's strengths equal the loader's.
    """
    patching = [h for h in hops if h["patches_uuid_changed"] or h["n_entries_added"]]
    active = [loader for loader in loaders if not loader["skipped"]]
    if len(patching) != len(active):
        return []
    pairs = []
    for hop, loader in zip(patching, active, strict=True):
        expected = loader.get(strength_field)
        strengths = hop["totals"]["strengths"]
        pairs.append(
            {
                "hop_index": hop["index"],
                "loader_node_id": loader["node_id"],
                "consistent": expected is None or not strengths or strengths == [expected],
            }
        )
    return pairs


# -- key coverage ---------------------------------------------------------------------------------


def consumed_keys(
    lora_keys: Iterable[str], mapped_names: Iterable[str], adapter_keys: Iterable[str]
) -> set[str]:
    """Keys load_lora consumes: the adapters' own plus alpha/dora/diff/set/norm keys of mapped names.

    Walks the file's keys (hundreds), not the key map's names (tens of thousands, each with every
    suffix: 114,000 string formats per step on a real-size model)."""
    present = set(lora_keys)
    mapped = mapped_names if isinstance(mapped_names, (set, frozenset, KeysView)) else set(mapped_names)
    consumed = set(adapter_keys) & present
    for key in present:
        name, dot, suffix = key.rpartition(".")
        if not dot or name not in mapped:
            continue
        if suffix in CONSUMED_SUFFIXES:
            consumed.add(key)
        elif suffix == "b_norm" and f"{name}.w_norm" in present:
            consumed.add(key)  # b_norm is only read together with w_norm
    return consumed


def key_group(key: str) -> str:
    """lora_unet, lora_te1, diffusion_model, text_encoders... : the family a file key belongs to."""
    head = key.split(".", 1)[0]
    if head.startswith("lycoris_"):
        return "lycoris"
    if head.startswith("lora_"):
        parts = head.split("_")
        return "_".join(parts[:3]) if parts[1] == "prior" else "_".join(parts[:2])
    return head


def key_coverage(file_keys: Iterable[str], consumed: set[str]) -> dict[str, Any]:
    keys = sorted(set(file_keys))
    unmatched = [k for k in keys if k not in consumed]
    n = len(keys)
    return {
        "n_file_keys": n,
        "n_matched_keys": n - len(unmatched),
        "n_unmatched_keys": len(unmatched),
        "matched_pct": 100.0 * (n - len(unmatched)) / n if n else None,
        "unmatched_keys": unmatched[:MAX_LISTED_UNMATCHED],
        "unmatched_truncated": len(unmatched) > MAX_LISTED_UNMATCHED,
        "unmatched_by_group": dict(Counter(key_group(k) for k in unmatched)),
        "n_unmatched_text_encoder_keys": sum(1 for k in unmatched if key_group(k) in TEXT_ENCODER_GROUPS),
    }


def _state_keys(module) -> set[str]:
    return (
        set(state_dict_of(module).keys()) if module is not None and hasattr(module, "state_dict") else set()
    )


def coverage_from_patches(
    file_keys: Iterable[str],
    origin: Mapping[int, str],
    converted: Mapping,
    key_map: Mapping,
    patch_dict: Mapping,
    model_module=None,
    clip_module=None,
) -> dict[str, Any]:
    """Key coverage from what ComfyUI's load_lora made of a file.

    `origin`: id(tensor) -> file key, taken before conversion (conversions keep tensor identities
    or hand views of them, but may rename keys in place; file_key_of); `converted`: the converted state dict; `key_map` and
    `patch_dict`: ComfyUI's key map and load_lora's result for the modules checked.
    """
    adapter_keys = set()
    for value in patch_dict.values():
        adapter_keys.update(getattr(value, "loaded_keys", ()) or ())
    consumed = consumed_keys(converted.keys(), key_map.keys(), adapter_keys)
    consumed_in_file = {file_key_of(converted[k], origin) for k in consumed} - {None}
    coverage = key_coverage(file_keys, consumed_in_file)
    targets = {k if isinstance(k, str) else k[0] for k in patch_dict}
    model_keys, clip_keys = _state_keys(model_module), _state_keys(clip_module)
    not_loaded = sorted(t for t in targets if t not in model_keys and t not in clip_keys)
    coverage.update(
        computed=True,
        model_checked=model_module is not None,
        clip_checked=clip_module is not None,
        n_target_weights=len(targets),
        n_model_targets=len(targets & model_keys),
        n_clip_targets=len(targets & clip_keys),
        n_targets_not_loaded=len(not_loaded),
        targets_not_loaded=not_loaded[:50],
        **slice_targets(patch_dict, model_module, clip_module),
    )
    return coverage


def file_key_of(tensor, origin: Mapping[int, str]) -> str | None:
    """The file key a converted tensor came from: the tensor itself, or the file's tensor it is a
    view of. A conversion that splits a fused adapter (ComfyUI 0.38's Krea2 `to_qkv` into q, k and
    v) hands slices of the file's tensor: each counts for its file key, so the fused key is
    matched. A tensor the conversion made anew (its `.row_offset` entries) has no file key."""
    key = origin.get(id(tensor))
    if key is None:
        base = getattr(tensor, "_base", None)
        key = None if base is None else origin.get(id(base))
    return key


def _slice_of(target) -> tuple[str, tuple[int, int, int]] | None:
    """(weight key, (dim, offset, length)) of a key-map target that patches part of a weight (one of
    q/k/v in a fused qkv weight), else None (a whole weight: a key, or (key, None, function))."""
    if not isinstance(target, tuple) or len(target) < 2 or not isinstance(target[1], tuple):
        return None
    part = target[1]
    if len(part) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in part):
        return None
    return str(target[0]), part


def slice_targets(patch_dict: Mapping, model_module=None, clip_module=None) -> dict[str, Any]:
    """Patches that target a slice `(key, (dim, offset, length))` of a weight, and those whose slice
    does not fit the weight's shape (ComfyUI would fail to apply them)."""
    slices = [found for found in (_slice_of(t) for t in patch_dict) if found is not None]
    shapes: dict[str, Any] = {}
    for module in (clip_module, model_module):
        if module is not None and hasattr(module, "state_dict"):
            shapes.update(state_dict_of(module))
    beyond = []
    for key, (dim, offset, length) in slices:
        shape = getattr(shapes.get(key), "shape", None)
        if shape is None:
            continue  # not loaded: counted with targets_not_loaded
        size = shape[dim] if -len(shape) <= dim < len(shape) else None
        if size is None or offset < 0 or length < 0 or offset + length > size:
            beyond.append(f"{key}: dim {dim}, {offset}..{offset + length} of {size}")
    return {
        "n_slice_targets": len(slices),
        "n_sliced_weights": len({key for key, _ in slices}),
        "n_slices_beyond_weight": len(beyond),
        "slices_beyond_weight": sorted(beyond)[:50],
    }


# -- findings -------------------------------------------------------------------------------------


def loader_findings(loader: Mapping, file_status: Mapping | None, coverage: Mapping | None) -> list[Finding]:
    """Errors and suggestions about one loader: its strengths, its file, its key coverage."""
    name = loader.get("lora_name") or f"of node {loader.get('node_id')}"
    where = f"LoRA {name} (node {loader.get('node_id')})"
    findings = _strength_findings(loader, where) + _file_findings(file_status, where)
    if coverage and coverage.get("n_file_keys"):
        findings += _target_findings(coverage, where) + _key_findings(loader, coverage, where)
    return findings


def _strength_findings(loader: Mapping, where: str) -> list[Finding]:
    if loader.get("skipped"):
        return [
            Finding(
                "warning",
                f"strength 0: {where} skipped, the loader passed its inputs unchanged",
                "lora_strength_zero",
            )
        ]
    if loader.get("strength_model") == 0.0:
        return [Finding("info", f"{where}: model strength 0, the model is unchanged", "lora_strength_zero")]
    return []


def _file_findings(file_status: Mapping | None, where: str) -> list[Finding]:
    if file_status is None or not file_status.get("error"):
        return []
    corrupt = file_status.get("header_ok") is False or file_status.get("data_ok") is False
    return [
        Finding(
            "error",
            f"{where}: {file_status['error']}" if corrupt else f"{where}: file not found in the loras folders",
            "lora_file_corrupt" if corrupt else "lora_file_missing",
        )
    ]


def _target_findings(coverage: Mapping, where: str) -> list[Finding]:
    """Patches whose target weight is missing from the model, or whose slice lies outside it."""
    findings = []
    if coverage.get("n_targets_not_loaded"):
        findings.append(
            Finding(
                "warning",
                f"{where}: {coverage['n_targets_not_loaded']} patched weights do not exist in the model "
                "(ComfyUI logs them as NOT LOADED), see targets_not_loaded",
                "lora_targets_not_loaded",
            )
        )
    if coverage.get("n_slices_beyond_weight"):
        findings.append(
            Finding(
                "warning",
                f"{where}: {coverage['n_slices_beyond_weight']} patches target a slice outside their weight "
                "(a fused qkv weight of another size), see slices_beyond_weight",
                "lora_slices_beyond_weight",
            )
        )
    return findings


def _key_findings(loader: Mapping, coverage: Mapping, where: str) -> list[Finding]:
    """The file's keys that matched nothing: none at all, text-encoder keys not checked, strays."""
    n, unmatched = coverage["n_file_keys"], coverage["n_unmatched_keys"]
    n_text = coverage["n_unmatched_text_encoder_keys"]
    if coverage["n_matched_keys"] == 0:
        return [
            Finding(
                "error",
                f"{where}: none of its {n} keys matched: this LoRA was made for another base model",
                "lora_no_key_matched",
            )
        ]
    if not unmatched:
        return []
    findings = []
    other = unmatched - (n_text if not coverage.get("clip_checked") else 0)
    if n_text and not coverage.get("clip_checked"):
        reason = (
            "LoraLoaderModelOnly ignores them"
            if not loader.get("has_clip_input")
            else "connect the loader's CLIP to the monitor to check them"
        )
        findings.append(
            Finding("info", f"{where}: {n_text} text-encoder keys not applied: {reason}", "lora_text_encoder_keys")
        )
    if other:
        foreign = other / n > UNMATCHED_FOREIGN_FRACTION
        hint = ": most keys are stray, this LoRA was made for another base model" if foreign else ""
        findings.append(
            Finding(
                "error" if foreign else "warning",
                f"{where}: {other} of {n} keys unmatched, ComfyUI ignores them{hint} (their names are in the report, by block)",
                "lora_keys_unmatched",
            )
        )
    return findings

"""What a LoRA patch entry is, read from ComfyUI's bookkeeping without computing anything: its type,
its tensors, what a cached figure must match, and whether its shapes fit the weight it patches.

An entry is ComfyUI's (strength_patch, patch_value, strength_model, offset, function); `patch_value`
is a weight adapter (`.name`, `.weights`), ("diff", (t,)), ("set", (t,)), ("model_as_lora", (t,)),
a bare (t,) or a merge list (analysis.py says more). The rest of the room builds on this file.
"""

from __future__ import annotations

from collections.abc import Mapping

ADAPTER_TYPES = ("lora", "loha", "lokr", "glora", "oft", "boft")


def classify_patch(value) -> str:
    """lora, loha, lokr, glora, oft, boft, diff, set, model_as_lora, merge or unknown."""
    name = getattr(value, "name", None)
    if isinstance(name, str) and hasattr(value, "weights"):
        return name.lower() if name.lower() in ADAPTER_TYPES else "unknown"
    if isinstance(value, list):
        return "merge"
    if isinstance(value, tuple):
        if len(value) == 1:
            return "diff"
        if len(value) == 2 and isinstance(value[0], str):
            return value[0] if value[0] in ("diff", "set", "model_as_lora") else "unknown"
    return "unknown"


def is_tensor(value) -> bool:
    return hasattr(value, "shape") and hasattr(value, "element_size") and hasattr(value, "numel")


def padded(values, length: int) -> list:
    values = list(values) if isinstance(values, (list, tuple)) else []
    return values + [None] * (length - len(values))


def float_or_none(value) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def diff_tensor(value):
    return value[0] if len(value) == 1 else (value[1][0] if value[1] else None)


def patch_tensors(value) -> list:
    """The tensors a patch value holds (adapter weights, diff/set tensors, merge lists)."""
    if hasattr(value, "weights") and hasattr(value, "name"):
        return [t for t in getattr(value, "weights", ()) or () if is_tensor(t)]
    if isinstance(value, list):
        found = []
        for item in value:
            inner = item[1] if isinstance(item, tuple) and len(item) > 1 else item
            found.extend(patch_tensors(inner) if not is_tensor(inner) else [inner])
        return found
    if isinstance(value, tuple):
        inner = value if len(value) == 1 else (value[1] if len(value) == 2 else ())
        return [t for t in (inner if isinstance(inner, tuple) else ()) if is_tensor(t)]
    return []


def entry_tensors(entry) -> list:
    """The tensors of a patch entry's value (patch_tensors)."""
    return patch_tensors(entry[1]) if len(entry) > 1 else []


def patch_signature(key: str, entry, tensors: list | None = None) -> tuple:
    """What a cached figure must match: weight key, patch type name, offset and tensor shapes/dtypes
    (`tensors`: the entry's, found already)."""
    value = entry[1] if len(entry) > 1 else None
    offset = entry[3] if len(entry) > 3 else None
    tensors = entry_tensors(entry) if tensors is None else tensors
    shapes = tuple((tuple(t.shape), str(t.dtype)) for t in tensors)
    return (key, classify_patch(value), tuple(offset) if offset else None, shapes)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _shape(t) -> tuple:
    return tuple(int(d) for d in t.shape)


def _flat_cols(t) -> int:
    return _numel(t.shape[1:])


def delta_shape_mismatch(patch_type: str, value, weight_shape: tuple) -> str | None:
    """Why this patch cannot be applied to a weight of `weight_shape` (None: it fits)."""
    weights = getattr(value, "weights", None)
    n = _numel(weight_shape)
    if patch_type == "lora":
        up, down, _alpha, mid, _dora, reshape = (list(weights) + [None] * 6)[:6]
        if mid is not None or reshape is not None:
            return None  # padded / Tucker forms: shapes follow other rules, left to ComfyUI
        if _flat_cols(up) != int(down.shape[0]):
            return f"up {list(_shape(up))} and down {list(_shape(down))} do not multiply"
        made = int(up.shape[0]) * _flat_cols(down)
        if made != n:
            return (
                f"file makes [{int(up.shape[0])}, {_flat_cols(down)}], model weight is {list(weight_shape)}"
            )
        return None
    if patch_type == "loha":
        w1a, w1b, _alpha, w2a, w2b, t1 = (list(weights) + [None] * 6)[:6]
        if t1 is not None:
            return None
        first = (int(w1a.shape[0]), int(w1b.shape[-1]))
        second = (int(w2a.shape[0]), int(w2b.shape[-1]))
        if first != second or _numel(first) != n:
            return f"file makes {list(first)} x {list(second)}, model weight is {list(weight_shape)}"
        return None
    if patch_type == "lokr":
        w1, w2, _alpha, w1_a, w1_b, w2_a, w2_b, t2 = (list(weights) + [None] * 8)[:8]
        if t2 is not None:
            return None
        left = _numel(w1.shape) if w1 is not None else int(w1_a.shape[0]) * _flat_cols(w1_b)
        right = _numel(w2.shape) if w2 is not None else int(w2_a.shape[0]) * _flat_cols(w2_b)
        if left * right != n:
            return f"file makes {left * right} elements, model weight is {list(weight_shape)}"
        return None
    if patch_type in ("oft", "boft"):
        blocks = weights[0]
        size = _numel(blocks.shape[:2]) if patch_type == "oft" else _numel(blocks.shape[1:3])
        if int(weight_shape[0]) != size if weight_shape else True:
            return f"file blocks cover {size} rows, model weight is {list(weight_shape)}"
        if patch_type == "boft" and weights[2] is None:
            return "BOFT without alpha: ComfyUI's calculate_weight fails on it"
        return None
    if patch_type == "diff":
        tensor = value[0] if len(value) == 1 else value[1][0]
        pad = len(value) == 2 and len(value[1]) > 1 and isinstance(value[1][1], Mapping)
        if not pad and _shape(tensor) != tuple(weight_shape):
            return f"file {list(_shape(tensor))}, model weight is {list(weight_shape)}"
    return None

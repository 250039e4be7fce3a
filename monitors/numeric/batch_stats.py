"""Statistics of a step's tensors with one read-back per device (the GPU rule: batch on the device,
read back once per step).

A step that describes several tensors (the conditioning's cond tensors, pooled outputs and extra
embeddings of both sides) wraps its work in `stats_read_back_once(tensors)`: every tensor's
reductions are queued first, their figures stacked and read back together, and
describe.describe_tensor_bounded takes a tensor's statistics from there. A tensor given twice (the
same CONDITIONING on both sides) is reduced once. The figures are value_stats' own: the same
kernels (tensor_stats.small_figures for small tensors, deferred_stats.enqueue_stats for a GPU's
whole-tensor path), finished by deferred_stats.finish_figures, which hands a tensor to value_stats
where its figures call for another path (NaN or Inf, sums that underflow or overflow). Tensors
value_stats reduces another way (integer, complex or empty tensors, large CPU tensors in chunks,
tensors above STATS_MAX_ELEMENTS) are left to it. The figures are kept for the block only, by
identity: no tensor can change between the read-back and its description (one thread, one step).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator
from typing import Any

from .deferred_stats import enqueue_stats, finish_figures
from .tensor_stats import FLOAT64_MAX_ELEMENTS, one_cpu_thread, small_figures

# id(tensor) -> (tensor, its value_stats) for the block of stats_read_back_once running now
_READ: contextvars.ContextVar[dict | None] = contextvars.ContextVar("pipeline_monitor_batch_stats", default=None)


def read_together(tensor) -> dict[str, Any] | None:
    """The tensor's value_stats read back with its step's others, or None (compute them)."""
    read = _READ.get()
    found = None if read is None else read.get(id(tensor))
    return found[1] if found is not None and found[0] is tensor else None


@contextlib.contextmanager
def stats_read_back_once(tensors: Iterable, max_elements: int) -> Iterator[int]:
    """Within the block, the statistics of `tensors` (those of at most `max_elements` values) come
    from one read-back per device; yields how many tensors were batched."""
    read = batch_value_stats(tensors, max_elements)
    token = _READ.set(read)
    try:
        yield len(read)
    finally:
        _READ.reset(token)


def batch_value_stats(tensors: Iterable, max_elements: int) -> dict[int, tuple[Any, dict]]:
    """id -> (tensor, value_stats) for the tensors whose reductions can be batched."""
    import torch

    queued: dict[Any, list] = {}  # device -> [(tensor, figures, n, acc)]
    seen: set[int] = set()
    with torch.no_grad(), one_cpu_thread("cpu"):
        for tensor in tensors:
            if id(tensor) in seen:
                continue
            seen.add(id(tensor))
            figures = _queue(tensor, max_elements)
            if figures is not None:
                queued.setdefault(tensor.device, []).append((tensor, *figures))
        read = {}
        for items in queued.values():
            values = torch.stack([figures for _, figures, _, _ in items]).tolist()  # the read-back
            for (tensor, _, n, acc), four in zip(items, values, strict=True):
                read[id(tensor)] = (tensor, finish_figures(four, n, acc, tensor))
    return read


def _queue(tensor, max_elements: int):
    """(float64 figures on the tensor's device, n, accumulation dtype), or None: value_stats' turn."""
    import torch

    if not all(hasattr(tensor, a) for a in ("is_floating_point", "numel", "device")):
        return None
    n = int(tensor.numel())
    if n == 0 or n > max_elements or not tensor.is_floating_point() or tensor.device.type == "meta":
        return None
    if n <= FLOAT64_MAX_ELEMENTS:
        return small_figures(tensor.detach().reshape(-1)), n, torch.float64
    pending = enqueue_stats(tensor)  # None on the CPU: value_stats reduces it in chunks
    return None if pending is None else (pending.figures, n, pending.acc)

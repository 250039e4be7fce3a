"""value_stats in two halves for a caller that must not wait for the device (the tensor dump,
monitors/dumps/): `enqueue_stats` queues the whole-tensor reductions a GPU takes and reads nothing
back; `finish_stats`, later and on another thread, reads the four figures back (once the stream has
passed them) and finishes as value_stats does. The same figures and error bound as value_stats.

Only value_stats' common GPU case is split: a floating tensor above FLOAT64_MAX_ELEMENTS. Where the
figures call for another path (NaN or Inf, sums that underflow or overflow), finish_stats runs
value_stats on the fallback tensor it is given: a host copy of the tensor as it was when enqueued
(the device tensor may have changed in place since). A CPU tensor's statistics are not enqueued
(`from_copy`): finish_stats computes them from that host copy, off the caller's thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import tensor_stats
from .tensor_stats import FLOAT64_MAX_ELEMENTS, _device_reductions, final_stats, value_stats


@dataclass(frozen=True)
class PendingStats:
    figures: Any  # float64 device tensor [min, max, sum, sum of squares]; None: from the copy
    n: int
    acc: Any  # the accumulation dtype


def from_copy(tensor) -> PendingStats:
    """Nothing enqueued: finish_stats computes the statistics from the copy it is given later (a
    CPU tensor whose caller keeps a host copy: the work moves off the caller's thread)."""
    return PendingStats(None, int(tensor.numel()), None)


def enqueue_stats(tensor, whole_tensor: bool | None = None) -> PendingStats | None:
    """The reductions queued on the tensor's device, nothing read back; None where value_stats
    would take a path other than the whole-tensor one (call value_stats then). `whole_tensor`:
    as value_stats' (None: by the tensor's device and type; True forces the GPU's path, tests)."""
    import torch

    n = int(tensor.numel())
    if n <= FLOAT64_MAX_ELEMENTS or not tensor.is_floating_point() or tensor.device.type == "meta":
        return None
    if not (tensor_stats._whole_tensor(tensor) if whole_tensor is None else whole_tensor):
        return None  # a CPU tensor: value_stats reduces it in chunks of ROW_ELEMENTS rows
    flat = tensor.detach().reshape(-1)
    acc = torch.float64 if flat.dtype == torch.float64 else torch.float32
    with torch.no_grad():
        figures = torch.stack([x.to(torch.float64) for x in _device_reductions(flat, acc)])
    return PendingStats(figures, n, acc)


def finish_stats(pending: PendingStats, fallback) -> dict[str, Any]:
    """value_stats' dict from the enqueued figures (one read-back), or value_stats(fallback)."""
    if pending.figures is None:  # from_copy: nothing was enqueued
        return value_stats(fallback)
    return finish_figures(pending.figures.tolist(), pending.n, pending.acc, fallback)


def finish_figures(figures, n: int, acc, fallback) -> dict[str, Any]:
    """value_stats' dict from the four figures read back ([min, max, sum, sum of squares] of `n`
    values accumulated in `acc`), or value_stats(fallback) where they call for another path."""
    stats: dict[str, Any] = {"min": None, "max": None, "mean": None, "std": None, "n_nan": 0, "n_inf": 0}
    lo, hi, total, squares = figures
    if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN or Inf: the masked path
        return value_stats(fallback)
    if not final_stats(stats, [lo], [hi], [total], [squares], n, acc):
        return value_stats(fallback)  # underflow or overflow: value_stats takes the exact path
    return stats

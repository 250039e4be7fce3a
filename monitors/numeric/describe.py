"""A tensor described for a report within a bound on the work: metadata always, value statistics
(tensor_stats.describe_tensor) only up to STATS_MAX_ELEMENTS.

Shared by the latent, conditioning and dump analysers.
"""

from __future__ import annotations

from typing import Any

from .batch_stats import read_together
from .deferred_stats import PendingStats, enqueue_stats, from_copy
from .tensor_stats import describe_tensor

# Above this many elements only metadata is reported: statistics of a 128 Mi-element tensor
# already take seconds on a CPU, and a reshaped view of an expanded tensor would be materialised.
STATS_MAX_ELEMENTS = 1 << 27


def describe_tensor_bounded(tensor) -> dict[str, Any]:
    """describe_tensor, or metadata only (statistics None) for tensors above STATS_MAX_ELEMENTS."""
    n = int(tensor.numel())
    if n <= STATS_MAX_ELEMENTS:
        info = describe_tensor(tensor, read_together(tensor))  # batch_stats.py: read back with its step's
        info["stats_skipped"] = False
        return info
    return _metadata(tensor, skipped=True)


def describe_deferred(tensor, host_copy_kept: bool = False) -> tuple[dict[str, Any], PendingStats | None]:
    """describe_tensor_bounded without waiting for the device: (metadata with the statistics None,
    their reductions enqueued: deferred_stats.finish_stats fills them in later), or (the whole
    description, None) where they cannot be deferred (small, integer or skipped tensors).
    `host_copy_kept`: the caller hands finish_stats a host copy of the tensor later, so a CPU
    tensor's statistics are computed from it then (deferred_stats.from_copy), not now."""
    if int(tensor.numel()) > STATS_MAX_ELEMENTS:
        return describe_tensor_bounded(tensor), None
    pending = enqueue_stats(tensor)  # None but on a GPU's whole-tensor path
    if pending is None and host_copy_kept and tensor.device.type == "cpu":
        pending = from_copy(tensor)
    if pending is None:
        return describe_tensor_bounded(tensor), None
    return _metadata(tensor, skipped=False), pending


def _metadata(tensor, skipped: bool) -> dict[str, Any]:
    n = int(tensor.numel())
    return {
        "shape": [int(s) for s in tensor.shape],
        "dtype": str(tensor.dtype).replace("torch.", ""),
        "device": str(tensor.device),
        "n_elements": n,
        "bytes": n * int(tensor.element_size()),
        "min": None,
        "max": None,
        "mean": None,
        "std": None,
        "n_nan": None,
        "n_inf": None,
        "stats_skipped": skipped,
    }

"""A tensor described for a report within a bound on the work: metadata always, value statistics
(tensor_stats.describe_tensor) only up to STATS_MAX_ELEMENTS.

Shared by the latent, conditioning and dump analysers.
"""

from __future__ import annotations

from typing import Any

from .tensor_stats import describe_tensor

# Above this many elements only metadata is reported: statistics of a 128 Mi-element tensor
# already take seconds on a CPU, and a reshaped view of an expanded tensor would be materialised.
STATS_MAX_ELEMENTS = 1 << 27


def describe_tensor_bounded(tensor) -> dict[str, Any]:
    """describe_tensor, or metadata only (statistics None) for tensors above STATS_MAX_ELEMENTS."""
    n = int(tensor.numel())
    if n <= STATS_MAX_ELEMENTS:
        info = describe_tensor(tensor)
        info["stats_skipped"] = False
        return info
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
        "stats_skipped": True,
    }

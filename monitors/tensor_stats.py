"""Statistics of one tensor, exact and in bounded extra memory (chunked), without keeping it.

Shared by the conditioning, latent, VAE and dump analysers. Statistics cover finite values only;
NaN and Inf are counted separately. Unknown is None (an empty tensor has no min).
"""

from __future__ import annotations

import math
from typing import Any

CHUNK_ELEMENTS = 1 << 22  # 4 Mi elements per pass: bounded temporary memory for any size


def describe_tensor(tensor) -> dict[str, Any]:
    """Shape, dtype, device, sizes and value statistics of a torch tensor."""
    info = {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype).replace("torch.", ""),
        "device": str(tensor.device),
        "n_elements": int(tensor.numel()),
        "bytes": int(tensor.numel() * tensor.element_size()),
    }
    info.update(value_stats(tensor))
    return info


def value_stats(tensor) -> dict[str, Any]:
    import torch

    stats: dict[str, Any] = {"min": None, "max": None, "mean": None, "std": None, "n_nan": 0, "n_inf": 0}
    n = int(tensor.numel())
    if n == 0 or tensor.is_complex() or tensor.device.type == "meta":
        return stats
    flat = tensor.detach().reshape(-1)
    is_float = flat.is_floating_point()
    total = 0.0
    total_sq = 0.0
    n_finite = 0
    lo = math.inf
    hi = -math.inf
    with torch.no_grad():
        for start in range(0, n, CHUNK_ELEMENTS):
            chunk = flat[start : start + CHUNK_ELEMENTS]
            chunk = chunk.to(torch.float64) if not is_float or chunk.dtype != torch.float64 else chunk
            if is_float:
                finite = torch.isfinite(chunk)
                n_nan = int(torch.isnan(chunk).sum())
                stats["n_nan"] += n_nan
                stats["n_inf"] += int((~finite).sum()) - n_nan
                chunk = chunk[finite]
            if chunk.numel() == 0:
                continue
            n_finite += int(chunk.numel())
            total += float(chunk.sum())
            total_sq += float((chunk * chunk).sum())
            lo = min(lo, float(chunk.min()))
            hi = max(hi, float(chunk.max()))
    if n_finite == 0:
        return stats
    mean = total / n_finite
    variance = max(0.0, total_sq / n_finite - mean * mean)
    stats.update(min=lo, max=hi, mean=mean, std=math.sqrt(variance))
    return stats

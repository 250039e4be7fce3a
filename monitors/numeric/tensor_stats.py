"""Statistics of one tensor in bounded extra memory (chunked), on the tensor's own device, without
keeping it.

Shared by the conditioning, latent, VAE and dump analysers. Statistics cover finite values only;
NaN and Inf are counted separately. Unknown is None (an empty tensor has no min).

Speed: one pass per chunk of CHUNK_ELEMENTS over floating tensors (`aminmax`, `sum`, the sum of
squares as row norms, each on the chunk while it is in cache, no copy of a float32 or float64 chunk),
accumulating in float32 (float64 for float64 tensors and tensors of at most FLOAT64_MAX_ELEMENTS);
float64 only for the final sums of the
per-chunk results, which are read back to the host once per tensor. NaN and Inf show up as a
non-finite chunk minimum or maximum (both propagate NaN); only then does a second pass count them,
masking with `where` instead of compacting, again with one read-back. Integer and bool tensors,
sums that overflow the accumulation type and values so small that their squares underflow it
(UNDERFLOW_SCALE) take the exact float64 path.

On the CPU, once fused_kernels.py has compiled them, full chunks take one fused kernel instead
(same figures, same bound: rows of ROW_ELEMENTS in float32, then float64). On a GPU the whole
tensor is reduced at once (aminmax, sums and norms of rows of DEVICE_ROW_ELEMENTS widened inside the
kernel: the same bound, see rows.py), one read-back per tensor; chunks there would only multiply
kernel launches, and short rows kept the reductions under memory speed.

Error bound (floating tensors; u = 2**-24 for float32 accumulation, 2**-53 for float64):
min, max, counts: exact. torch reduces a chunk as a tree (CPU: a cascade sum, at most 16 sequential
additions per level over <= 6 levels for 1 Mi elements, plus the thread combination; CUDA: a short
per-thread sequence, then a tree), so no element passes through more than M = SUM_CHAIN_BOUND
rounded additions, and each chunk sum is within M*u*sum(|x|) of the exact sum (first order); the
float32 sum of squares is row norms of ROW_ELEMENTS (at most M/2 additions each, plus the square
root's rounding), squared and summed in float64, so it stays within that M as well. The
float64 sum of the chunk results adds <= n_chunks * 2**-53 relative, negligible. Hence, with
A = mean(|x|) and Q = mean(x**2) over the finite values:
    |mean - exact| <= M*u*A
    |mean of squares - exact| <= (M+2)*u*Q      (+1 rounding of each square, +1 for underflow)
    |variance - exact| <= (M+2)*u*Q + 2*|mean|*M*u*A + (M*u*A)**2
    |std - exact| <= sqrt(that variance bound)
`stats_error_bound` computes these; the unit tests check them against a float64 reference. The
variance is E[x**2] - mean**2, so for values far from zero relative to their spread (mean**2 much
larger than the variance) the std's relative error grows by mean**2 / variance; the bound says so.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any

from .fused_kernels import KERNELS
from .rows import DEVICE_ROW_ELEMENTS, ROW_ELEMENTS, SUM_CHAIN_BOUND

CHUNK_ELEMENTS = 1 << 20  # 1 Mi elements per pass: bounded temporary memory, kept in cache
# On a GPU the masked and float64 paths (NaN/Inf, integers) take 16 Mi-element chunks: a few
# hundred MB of temporaries at most, and 16x fewer kernel launches than CPU-sized chunks.
DEVICE_CHUNK_ELEMENTS = 1 << 24
# Up to this size float64 accumulation costs next to nothing (the call's fixed cost dominates), and
# small tensors are where a caller compares figures by eye: they keep float64's precision.
FLOAT64_MAX_ELEMENTS = 1 << 16
# SUM_CHAIN_BOUND, ROW_ELEMENTS (CPU rows) and DEVICE_ROW_ELEMENTS (GPU rows): rows.py.
# Squares under the smallest normal number (float32 2**-126, float64 2**-1022) lose precision, each by
# less than that number, so mean(x**2) moves by less than it. With mean(x**2) >= peak**2 / n, that
# stays within one unit roundoff of mean(x**2) when peak**2 >= n * smallest_normal / u; below, the
# exact float64 path.
UNDERFLOW_SCALE = {"float32": 2.0**-126 / 2.0**-24, "float64": 2.0**-1022 / 2.0**-53}


# Torch's intra-op thread count belongs to the calling thread (an OpenMP setting of that thread):
# each thread keeps its own users and the count it found.
_threads_held = threading.local()


@contextlib.contextmanager
def one_cpu_thread(device_type: str):
    """Torch's intra-op threads limited to one while CPU chunks are reduced. Every kernel on a
    chunk ends in a thread-pool barrier; on a shared, loaded CPU that barrier waits for a
    descheduled worker, and the few kernels per chunk ran 15-50x slower than the same work on one
    thread (bench/tensor_stats.py on 2 busy cores), while one thread streams several GB/s.
    The count is the calling thread's own, so the limit is too: nested users on one thread share
    it, and the outermost puts back the count it found; other threads keep theirs."""
    if device_type != "cpu":
        yield
        return
    import torch

    users = getattr(_threads_held, "users", 0)
    # A thread already on one leaves torch alone: setting also sets the count new threads start on.
    if users == 0:
        _threads_held.saved = torch.get_num_threads()
        if _threads_held.saved != 1:
            torch.set_num_threads(1)
    _threads_held.users = users + 1
    try:
        yield
    finally:
        _threads_held.users -= 1
        if _threads_held.users == 0 and _threads_held.saved != 1:
            torch.set_num_threads(_threads_held.saved)


def describe_tensor(tensor, stats: dict[str, Any] | None = None) -> dict[str, Any]:
    """Shape, dtype, device, sizes and value statistics of a torch tensor (`stats`: its
    value_stats computed already, batch_stats.py)."""
    info = {
        "shape": list(tensor.shape),
        "dtype": str(tensor.dtype).replace("torch.", ""),
        "device": str(tensor.device),
        "n_elements": int(tensor.numel()),
        "bytes": int(tensor.numel() * tensor.element_size()),
    }
    info.update(value_stats(tensor) if stats is None else stats)
    return info


def stats_error_bound(mean_abs: float, mean_sq: float, mean: float, accumulate_float64: bool = False) -> dict:
    """The documented worst-case absolute errors of value_stats' mean and std (module docstring)."""
    unit = 2.0**-53 if accumulate_float64 else 2.0**-24
    mean_err = SUM_CHAIN_BOUND * unit * mean_abs
    var_err = (SUM_CHAIN_BOUND + 2) * unit * mean_sq + 2 * abs(mean) * mean_err + mean_err**2
    return {"mean": mean_err, "variance": var_err, "std": math.sqrt(var_err)}


def value_stats(tensor, whole_tensor: bool | None = None) -> dict[str, Any]:
    """min, max, mean, std, n_nan, n_inf of a tensor (module docstring). `whole_tensor`: None picks
    the path by the tensor's device (whole-tensor rows of DEVICE_ROW_ELEMENTS on a GPU, chunks on
    the CPU); True forces the GPU's path on any device (tests check its bound on CPU tensors)."""
    import torch

    stats: dict[str, Any] = {"min": None, "max": None, "mean": None, "std": None, "n_nan": 0, "n_inf": 0}
    n = int(tensor.numel())
    if n == 0 or tensor.is_complex() or tensor.device.type == "meta":
        return stats
    flat = tensor.detach().reshape(-1)
    if not flat.is_floating_point():
        return _exact_float64_stats(flat, stats)
    small = n <= FLOAT64_MAX_ELEMENTS
    acc = torch.float64 if small or flat.dtype == torch.float64 else torch.float32
    with torch.no_grad():
        if small:  # one chunk in float64, in as few calls as can be: a monitor step describes several
            with one_cpu_thread(flat.device.type):
                lo_s, hi_s, sum_s, sq_s = ([x] for x in _small_reductions(flat))
        else:
            whole = _whole_tensor(flat) if whole_tensor is None else whole_tensor
            if whole:  # a GPU: one kernel per figure over the whole tensor
                fused_parts, fused_elements = [_device_reductions(flat, acc)], n
            else:  # full chunks by the fused kernels once compiled (fused_kernels.py); the rest here
                fused_parts, fused_elements = KERNELS.stats_chunks(flat) if acc == torch.float32 else ([], 0)
            with one_cpu_thread(flat.device.type):
                mins, maxs, sums, sums_sq = _chunk_reductions(flat[fused_elements:], acc)
            for part in fused_parts:
                for figure, figures in zip(part, (mins, maxs, sums, sums_sq), strict=True):
                    figures.append(figure)
            lo_s, hi_s, sum_s, sq_s = torch.stack(
                [
                    torch.stack(mins).to(torch.float64),
                    torch.stack(maxs).to(torch.float64),
                    torch.stack(sums).to(torch.float64),
                    torch.stack(sums_sq).to(torch.float64),
                ]
            ).tolist()  # the one read-back of the common case
        n_finite = n
        if not all(map(math.isfinite, lo_s + hi_s)):
            with one_cpu_thread(flat.device.type):
                lo_s, hi_s, sum_s, sq_s, n_nan, n_finite = _masked_reductions(flat, acc)
            stats["n_nan"], stats["n_inf"] = n_nan, n - n_finite - n_nan
            if n_finite == 0:
                return stats
    if not final_stats(stats, lo_s, hi_s, sum_s, sq_s, n_finite, acc):
        return _exact_float64_stats(flat, stats)
    return stats


def final_stats(stats: dict, lo_s, hi_s, sum_s, sq_s, n_finite: int, acc) -> bool:
    """min, max, mean and std into `stats` from the read-back figures of finite values; False
    (nothing set) where the sums underflowed or overflowed `acc`: the exact float64 path's turn."""
    lo, hi = min(lo_s), max(hi_s)
    peak = max(-lo, hi)
    underflow = peak * peak < n_finite * UNDERFLOW_SCALE[str(acc).replace("torch.", "")]
    if underflow or not all(map(math.isfinite, sum_s + sq_s)):  # or overflow
        return False
    if lo == hi:  # every finite value equal: exact, whatever the rounding of the sums
        stats.update(min=lo, max=hi, mean=lo, std=0.0)
        return True
    mean = min(hi, max(lo, math.fsum(sum_s) / n_finite))
    variance = max(0.0, math.fsum(sq_s) / n_finite - mean * mean)
    stats.update(min=lo, max=hi, mean=mean, std=math.sqrt(variance))
    return True


# Types whose GPU reductions widen to float32 inside the kernel (no float32 copy of the tensor).
WHOLE_TENSOR_DTYPES = ("float32", "float16", "bfloat16", "float64")


def _whole_tensor(flat) -> bool:
    """Whether to reduce the whole tensor at once: on a GPU, where the chunking that bounds a CPU's
    temporaries only multiplies kernel launches (1 Gi elements: 22.7x one fused pass, issue 25)."""
    return flat.device.type not in ("cpu", "meta") and str(flat.dtype).replace("torch.", "") in (
        WHOLE_TENSOR_DTYPES
    )


def chunk_elements(flat) -> int:
    """Chunk length of the masked and float64 paths on the tensor's device."""
    return CHUNK_ELEMENTS if flat.device.type == "cpu" else DEVICE_CHUNK_ELEMENTS


def _device_reductions(flat, acc, row_elements: int = DEVICE_ROW_ELEMENTS) -> tuple:
    """min, max, sum and sum of squares of a whole GPU tensor as device scalars: aminmax in the
    tensor's type (exact), sums and norms of rows of `row_elements` widened to `acc` inside the
    kernel (no copy of a half-precision tensor), the row results summed in float64. Three passes
    over the tensor, each a long-row reduction at memory speed; within SUM_CHAIN_BOUND additions
    per element (rows.py says why a 16 Ki-element CUDA row is). Temporaries: the row results."""
    import torch

    n = int(flat.numel())
    full = n // row_elements * row_elements
    lo, hi = torch.aminmax(flat)
    sums, squares = [], []
    if full:
        rows = flat[:full].view(-1, row_elements)
        sums.append(rows.sum(dim=1, dtype=acc).sum(dtype=torch.float64))
        squares.append(torch.linalg.vector_norm(rows, dim=1, dtype=acc).to(torch.float64).square().sum())
    if full < n:
        tail = flat[full:]
        sums.append(tail.sum(dtype=acc).to(torch.float64))
        squares.append(torch.linalg.vector_norm(tail, dtype=acc).to(torch.float64).square())
    return lo.to(acc), hi.to(acc), torch.stack(sums).sum(), torch.stack(squares).sum()


def _small_reductions(flat) -> list[float]:
    """min, max, sum and sum of squares of a tensor of at most FLOAT64_MAX_ELEMENTS (one chunk: the
    kernels of _chunk_reductions' float64 path, the same figures), with one read-back."""
    return small_figures(flat).tolist()


def small_figures(flat):
    """_small_reductions' four figures as a float64 tensor on the tensor's device, not read back."""
    import torch

    values = flat.to(torch.float64)
    lo, hi = torch.aminmax(values)
    return torch.stack([lo, hi, values.sum(), (values * values).sum()])


def _chunk_reductions(flat, acc):
    """Per chunk, as device tensors (no host sync): min, max, sum and sum of squares. In float32
    the sum of squares is the norms of rows of ROW_ELEMENTS (torch.linalg.vector_norm: no squares
    written), squared and summed in float64: a whole-chunk vector_norm or torch.dot would accumulate
    long sequential runs on the CPU (1e-3 relative error at 4 Mi elements), a row at most
    ROW_ELEMENTS additions. In float64 (small tensors, compared by eye) squares go to a reused
    buffer summed by torch.sum's cascade sum."""
    import torch

    n = int(flat.numel())
    size = min(CHUNK_ELEMENTS, n)
    as_acc = torch.empty(size, dtype=acc, device=flat.device) if flat.dtype != acc else None
    squares = torch.empty(size, dtype=acc, device=flat.device) if acc == torch.float64 else None
    mins, maxs, sums, sums_sq = [], [], [], []
    for start in range(0, n, CHUNK_ELEMENTS):
        chunk = flat[start : start + CHUNK_ELEMENTS]
        length = int(chunk.numel())
        if as_acc is not None:  # half precision: one conversion, exact, then float32 kernels
            chunk = as_acc[:length].copy_(chunk)
        lo, hi = torch.aminmax(chunk)
        mins.append(lo)
        maxs.append(hi)
        sums.append(chunk.sum())
        if squares is not None:
            sums_sq.append(torch.mul(chunk, chunk, out=squares[:length]).sum())
        else:
            sums_sq.append(row_sum_of_squares(chunk))
    return mins, maxs, sums, sums_sq


def row_sum_of_squares(chunk):
    """Sum of squares of a 1-D chunk as a float64 scalar tensor on its device: norms of rows of
    ROW_ELEMENTS (and of the shorter tail) squared and summed in float64. Within (ROW_ELEMENTS + 2)
    roundings of the exact sum (the row's additions, each square, the square root)."""
    import torch

    length = int(chunk.numel())
    full = length // ROW_ELEMENTS * ROW_ELEMENTS
    norms = torch.linalg.vector_norm(chunk[:full].view(-1, ROW_ELEMENTS), dim=1)
    if full < length:
        norms = torch.cat([norms, torch.linalg.vector_norm(chunk[full:]).reshape(1)])
    return norms.to(torch.float64).square().sum()


def _masked_reductions(flat, acc):
    """The same over finite values only, with NaN and finite counts: non-finite values are
    replaced (0 for the sums, +-inf for min/max) instead of compacted. One read-back."""
    import torch

    parts = []
    size = chunk_elements(flat)
    for start in range(0, int(flat.numel()), size):
        chunk = flat[start : start + size]
        finite = torch.isfinite(chunk)
        zeroed = torch.where(finite, chunk, 0).to(acc)
        inf = torch.tensor(math.inf, dtype=acc, device=chunk.device)
        parts.append(
            torch.stack(
                [
                    torch.where(finite, zeroed, inf).amin(),
                    torch.where(finite, zeroed, -inf).amax(),
                    zeroed.sum(),
                    (zeroed * zeroed).sum(),
                    torch.isnan(chunk).sum().to(acc),
                    finite.sum().to(acc),
                ]
            ).to(torch.float64)
        )
    lo_s, hi_s, sum_s, sq_s, nan_s, finite_s = torch.stack(parts).T.tolist()
    n_finite = int(sum(finite_s))
    keep = [i for i, count in enumerate(finite_s) if count]  # chunks with no finite value have no min
    return (
        [lo_s[i] for i in keep],
        [hi_s[i] for i in keep],
        sum_s,
        sq_s,
        int(sum(nan_s)),
        n_finite,
    )


def _exact_float64_stats(flat, stats: dict[str, Any]) -> dict[str, Any]:
    """Integer and bool tensors, and finite values whose float32 sums overflow: float64 throughout,
    non-finite values masked (never compacted: that would be a host sync per chunk), one read-back."""
    import torch

    is_float = flat.is_floating_point()
    parts = []
    with torch.no_grad():
        size = chunk_elements(flat)
        for start in range(0, int(flat.numel()), size):
            chunk = flat[start : start + size].to(torch.float64)
            parts.append(_masked_float64_figures(chunk, is_float))
        lo_s, hi_s, sum_s, sq_s, nan_s, finite_s = torch.stack(parts).T.tolist()
    n_finite = int(sum(finite_s))
    stats["n_nan"] = int(sum(nan_s))
    stats["n_inf"] = int(flat.numel()) - n_finite - stats["n_nan"]
    if n_finite == 0:
        return stats
    keep = [i for i, count in enumerate(finite_s) if count]
    mean = math.fsum(sum_s) / n_finite
    variance = max(0.0, math.fsum(sq_s) / n_finite - mean * mean)
    stats.update(
        min=min(lo_s[i] for i in keep), max=max(hi_s[i] for i in keep), mean=mean, std=math.sqrt(variance)
    )
    return stats


def _masked_float64_figures(chunk, is_float: bool):
    """[min, max, sum, sum of squares, NaN count, finite count] of a float64 chunk's finite values."""
    import torch

    if not is_float:
        count = torch.tensor(float(chunk.numel()), dtype=torch.float64, device=chunk.device)
        lo, hi = torch.aminmax(chunk)
        return torch.stack([lo, hi, chunk.sum(), (chunk * chunk).sum(), count * 0, count])
    finite = torch.isfinite(chunk)
    zeroed = torch.where(finite, chunk, 0.0)
    inf = torch.tensor(math.inf, dtype=torch.float64, device=chunk.device)
    return torch.stack(
        [
            torch.where(finite, chunk, inf).amin(),
            torch.where(finite, chunk, -inf).amax(),
            zeroed.sum(),
            (zeroed * zeroed).sum(),
            torch.isnan(chunk).sum().to(torch.float64),
            finite.sum().to(torch.float64),
        ]
    )

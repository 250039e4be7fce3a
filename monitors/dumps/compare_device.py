"""compare_pair's fast path on a GPU (float32 accumulation): fewer passes over memory than the
CPU's, and no float32 copy of a half-precision input.

Per chunk of DEVICE_CHUNK_ELEMENTS: b - a into a float32 buffer (one kernel where the pair's
common type is float32; for two half-precision inputs the copy of b, then a subtracted from it in
float32: the same float32(b) - float32(a) rounded once); max |b - a| from one aminmax of that
difference; sum |b - a| and the squared norms of a, b and b - a as 1- and 2-norms of rows of
rows.DEVICE_ROW_ELEMENTS widened to float32 inside the kernel, the row results summed in float64
(within rows.SUM_CHAIN_BOUND additions per element, as tensor_stats' whole-tensor path); the count
outside tolerance as the CPU's, |b - a| > atol + rtol*|a| in separate float32 kernels (torch.isclose's
rounding, never contracted). The dot product is polarized from the norms by the caller
(compare._fast_totals), as on the CPU's eager path.
"""

from __future__ import annotations

from ..numeric.rows import DEVICE_ROW_ELEMENTS


def add_device_parts(
    parts: list, flat_a, flat_b, rtol: float, atol: float, chunk_elements: int, row_elements: int = DEVICE_ROW_ELEMENTS
) -> None:
    """Append each chunk's [max |b - a|, sum |b - a|, count outside tolerance, |a|^2, |b|^2,
    |b - a|^2] to `parts` as a float64 tensor (device scalars: no read-back here)."""
    import torch

    n = int(flat_a.numel())
    size = min(n, chunk_elements)
    device = flat_a.device
    diff_buf = torch.empty(size, dtype=torch.float32, device=device)
    work_buf = torch.empty(size, dtype=torch.float32, device=device)
    flag_buf = torch.empty(size, dtype=torch.bool, device=device)
    rtol_t = torch.full((1,), rtol, dtype=torch.float32, device=device)
    one_kernel = torch.promote_types(flat_a.dtype, flat_b.dtype) == torch.float32
    for start in range(0, n, chunk_elements):
        ca = flat_a[start : start + chunk_elements]
        cb = flat_b[start : start + chunk_elements]
        length = int(ca.numel())
        diff, work, flags = diff_buf[:length], work_buf[:length], flag_buf[:length]
        if one_kernel:
            torch.sub(cb, ca, out=diff)
        else:  # two half-precision inputs would be subtracted in their own type
            diff.copy_(cb).sub_(ca)
        lo, hi = torch.aminmax(diff)
        figures = [
            torch.maximum(-lo, hi).to(torch.float64),
            row_norm_sum(diff, 1, row_elements),
            None,  # the count, below, once |b - a| is no longer needed signed
            row_norm_sum(ca, 2, row_elements),
            row_norm_sum(cb, 2, row_elements),
            row_norm_sum(diff, 2, row_elements),
        ]
        # torch.isclose's allowed error atol + rtol*|a| in float32 (|x*r| = |x|*r: rounding is
        # symmetric); a one-element float32 rtol makes a half-precision `a` widen in the kernel.
        torch.mul(ca, rtol_t, out=work).abs_().add_(atol)
        figures[2] = torch.gt(diff.abs_(), work, out=flags).sum().to(torch.float64)
        parts.append(torch.stack(figures))


def row_norm_sum(flat, order: int, row_elements: int):
    """sum(|x|) (order 1) or sum(x**2) (order 2) of a 1-D tensor as a float64 device scalar: the
    `order`-norms of rows of `row_elements` (and of the shorter tail) widened to float32 in the
    kernel, raised to `order` and summed in float64."""
    import torch

    n = int(flat.numel())
    full = n // row_elements * row_elements
    norms = []
    if full:
        norms.append(torch.linalg.vector_norm(flat[:full].view(-1, row_elements), order, dim=1, dtype=torch.float32))
    if full < n:
        norms.append(torch.linalg.vector_norm(flat[full:], order, dtype=torch.float32).reshape(1))
    values = torch.cat(norms).to(torch.float64)
    return (values if order == 1 else values.square()).sum()

"""Exact Frobenius norms of low-rank weight changes without building the full change.

A LoRA's change up @ down has m*n elements, but its norm only needs the two r x r Gram matrices:
||U D||^2 = trace((U^T U)(D D^T)). LoHa ((A1 B1) * (A2 B2), elementwise) is itself a product of
two rank-(r1*r2) factors, and ||kron(A, B)|| = ||A|| * ||B||. No function here keeps a reference
to its arguments.

Precision: the Gram matrices are formed in float32 (float64 factors stay float64) and only their
r x r elementwise products are summed in float64. Rounding in a float32 Gram entry of inner length
k is, with overwhelming probability, below LAMBDA * sqrt(k) * u (u = 2^-24; Higham & Mary's
probabilistic bound) times the product of the two factor column norms, so the squared norm's error
is below LAMBDA * u * (sqrt(m) c_L^T |R| c_L + sqrt(n) c_R^T |L| c_R), c the Grams' root diagonals
(_gram_error_bound). Where that bound exceeds
GRAM_SQUARED_TOLERANCE of the result (heavy cancellation: nearly dependent factor columns), the
Grams are formed again in float64, so a norm stays within 1e-4 relative of float64 (tested).
Plain norms sum float32 squares of cache-sized chunks with torch's cascade sum (error ~ u log k)
into a float64 total on a CPU, one fused reduction on a GPU, float64 where squares overflow float32.
Each norm has a `*_deferred` form that stays on the device until the step reads every figure back
at once (numeric/device_figures.py): on a GPU a read-back per key is a synchronisation per key.
"""

from __future__ import annotations

import math

from ..numeric.device_figures import Expr, Scalar, figure_value, root
from ..numeric.tensor_stats import one_cpu_thread

# Elements per chunk of a plain norm: 1 Mi float32 (4 MiB) stays in cache, where a 4 Mi chunk's
# float32 copy and squares run ~10x slower on a 2-core machine.
CHUNK_ELEMENTS = 1 << 20
UNIT_ROUNDOFF_FLOAT32 = 2.0**-24
LAMBDA = 2.0  # the probabilistic bound's constant (1 holds with probability > 0.99 for k <= 1e7)
# Squared norms are kept where their error bound is below this (the norm's is about half of it).
GRAM_SQUARED_TOLERANCE = 1e-4
# Factor elements stacked at once by the batched low-rank norms (float32: 256 MiB at most).
BATCH_ELEMENTS = 1 << 26


def _as_matrix(tensor, dtype=None):
    """[rows, rest] view of a weight factor (conv factors are flattened after dim 0), as float32
    (float64 factors stay float64) or `dtype`."""
    import torch

    matrix = tensor.detach()
    matrix = matrix.reshape(matrix.shape[0], -1) if matrix.dim() != 2 else matrix
    if dtype is None:
        dtype = torch.float64 if matrix.dtype == torch.float64 else torch.float32
    return matrix.to(dtype)


def frobenius_norm(tensor) -> float:
    """||t||_F of any float tensor (one read-back)."""
    return figure_value(frobenius_deferred(tensor))


def frobenius_deferred(tensor) -> Expr:
    """||t||_F left on the device: one fused whole-tensor reduction on a GPU (half types are
    widened inside the kernel), cache-sized chunks on a CPU (never a full float32 or float64 copy);
    float64 again where float32 squares overflow."""
    import torch

    flat = tensor.detach().reshape(-1)
    dtype = torch.float64 if flat.dtype == torch.float64 else torch.float32
    with torch.no_grad():
        if flat.device.type == "cpu":
            squares = _chunked_squares(flat, dtype)
        else:
            squares = torch.linalg.vector_norm(flat, dtype=dtype).to(torch.float64).square()
    return root(Scalar(squares, exact=None if dtype == torch.float64 else lambda: _squares64(flat)))


def _chunked_squares(flat, dtype):
    """Sum of squares of a CPU tensor, chunk by chunk into a float64 0-dim tensor (no read-back)."""
    import torch

    n = int(flat.numel())
    total = torch.zeros((), dtype=torch.float64)
    # One reused buffer, squared in place: a new float32 copy and a squares tensor per chunk
    # cost twice the time (allocation and cache misses).
    buffer = torch.empty(min(n, CHUNK_ELEMENTS), dtype=dtype)
    same_type = flat.dtype == dtype
    for start in range(0, n, CHUNK_ELEMENTS):
        chunk = flat[start : start + CHUNK_ELEMENTS]
        values = buffer[: chunk.numel()]
        if same_type:  # squared straight into the buffer: one pass over the weight, not two
            torch.mul(chunk, chunk, out=values)
        else:  # half types are widened first: their squares would round and overflow
            values.copy_(chunk)
            values.mul_(values)
        total += torch.sum(values)
    return total


def _squares64(flat):
    """Sum of squares in float64 (a square beyond float32's range: bf16/fp32 values > 1.8e19)."""
    import torch

    if flat.device.type != "cpu":
        return torch.linalg.vector_norm(flat, dtype=torch.float64).square()
    return _chunked_squares(flat, torch.float64)


def _gram_trace(left_gram, right_gram):
    """trace(L R) for symmetric L, R (or batches of them, [..., k, k]): the squared norm of the
    product they describe (summed in float64 whatever the Grams' type), on their device, never
    negative."""
    import torch

    return torch.clamp(torch.sum(left_gram * right_gram, dim=(-2, -1), dtype=torch.float64), min=0.0)


def _gram_error_bound(left_gram, right_gram, m: int, n: int):
    """Bound on the rounding error of _gram_trace for float32 Grams (or batches of them) of inner
    lengths m and n, on their device.

    Entry (i, j) of L = A^T A is off by at most LAMBDA sqrt(m) u |a_i| |a_j| (column norms
    c = sqrt(diag L)), so sum(dL * R) is off by at most LAMBDA sqrt(m) u c^T |R| c; likewise for R."""
    import torch

    # In the Grams' own type: a bound needs no more precision, and each extra op costs more than
    # the arithmetic of a small Gram.
    c_left = left_gram.diagonal(dim1=-2, dim2=-1).sqrt()
    c_right = right_gram.diagonal(dim1=-2, dim2=-1).sqrt()
    from_left = torch.einsum("...i,...ij,...j->...", c_left, right_gram.abs(), c_left)
    from_right = torch.einsum("...i,...ij,...j->...", c_right, left_gram.abs(), c_right)
    return LAMBDA * UNIT_ROUNDOFF_FLOAT32 * (math.sqrt(m) * from_left + math.sqrt(n) * from_right)


def _exact_product_norm_sq(a, b):
    """||a @ b.T||_F^2 with float64 Grams (the fallback of a float32 result)."""
    import torch

    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    return _gram_trace(a64.T @ a64, b64.T @ b64)


def _product_norm_sq(a, b) -> Scalar:
    """||a @ b.T||_F^2 = sum((a^T a) * (b^T b)) for a [m, k], b [n, k], on the device; formed again
    in float64 at read-back where the float32 result's error bound is not small enough."""
    import torch

    left, right = a.T @ a, b.T @ b
    total = _gram_trace(left, right)
    if left.dtype == torch.float64:
        return Scalar(total)
    bound = _gram_error_bound(left, right, int(a.shape[0]), int(b.shape[0]))
    return Scalar(total, bound=bound, exact=lambda: _exact_product_norm_sq(a, b), tolerance=GRAM_SQUARED_TOLERANCE)


def _matrix(tensor):
    """[rows, rest] view of a weight factor in its own dtype (conv factors flattened after dim 0)."""
    matrix = tensor.detach()
    return matrix.reshape(matrix.shape[0], -1) if matrix.dim() != 2 else matrix


def _product_dtype(a, b):
    import torch

    return torch.float64 if torch.float64 in (a.dtype, b.dtype) else torch.float32


def _batched_product_norms_sq(scalars: list[Scalar]) -> None:
    """The squared norms ||a @ b.T||^2 of every pending low-rank product of a step: the products of
    one device, dtype and pair of shapes are stacked and their Grams formed by one batched matmul
    each (at most BATCH_ELEMENTS factor elements per stack), their traces and error bounds by one
    reduction each. A product with its own shapes is a batch of one. Same float32-then-float64 rule
    as _product_norm_sq."""
    import torch

    groups: dict[tuple, list[Scalar]] = {}
    for scalar in scalars:
        a, b = scalar.later[1]
        key = (a.device, b.device, a.dtype, b.dtype, tuple(a.shape), tuple(b.shape))
        groups.setdefault(key, []).append(scalar)
    for (device, *_dtypes, a_shape, b_shape), group in groups.items():
        per_item = (a_shape[0] + b_shape[0]) * a_shape[1]
        step = max(1, BATCH_ELEMENTS // max(1, per_item))
        with torch.no_grad(), one_cpu_thread(device.type):
            for start in range(0, len(group), step):
                _product_norms_of(group[start : start + step])


def _product_norms_of(batch: list[Scalar]) -> None:
    import torch

    a0, b0 = batch[0].later[1]
    dtype = _product_dtype(a0, b0)
    a = torch.stack([s.later[1][0] for s in batch]).to(dtype)
    b = torch.stack([s.later[1][1] for s in batch]).to(device=a.device, dtype=dtype)  # factors apart: up's
    left, right = a.transpose(1, 2) @ a, b.transpose(1, 2) @ b
    totals = _gram_trace(left, right)
    bounds = None if dtype == torch.float64 else _gram_error_bound(left, right, int(a0.shape[0]), int(b0.shape[0]))
    for i, scalar in enumerate(batch):
        scalar.tensor = totals[i]
        if bounds is not None:
            factors = scalar.later[1]
            scalar.bound, scalar.tolerance = bounds[i], GRAM_SQUARED_TOLERANCE
            scalar.exact = lambda factors=factors: _exact_product_norm_sq(*factors)


def lora_norm(up, down) -> float:
    """||up @ down||_F for up [m, r(, 1, 1)] and down [r, n(, kh, kw)], in O(r^2 (m + n))."""
    return figure_value(lora_deferred(up, down))


def lora_deferred(up, down) -> Expr:
    """lora_norm left pending until resolved with the step's other figures: the products of a step
    are computed together, batched by shape (_batched_product_norms_sq)."""
    u, d = _matrix(up), _matrix(down)
    if u.shape[1] != d.shape[0]:
        raise ValueError(f"rank mismatch: up {tuple(up.shape)} down {tuple(down.shape)}")
    return root(Scalar.computed_later(_batched_product_norms_sq, u, d.T))


def loha_norm(w1a, w1b, w2a, w2b) -> float:
    """||(w1a @ w1b) * (w2a @ w2b)||_F (Hadamard product of two low-rank products)."""
    return figure_value(loha_deferred(w1a, w1b, w2a, w2b))


def loha_deferred(w1a, w1b, w2a, w2b) -> Expr:
    """loha_norm left on the device.

    With P[i, (a, b)] = w1a[i, a] * w2a[i, b] and Q[j, (a, b)] = w1b[a, j] * w2b[b, j] the change is
    P @ Q^T, so its squared norm is sum((P^T P) * (Q^T Q)): two (r1 r2)^2 Gram matrices, cost
    (m + n) (r1 r2)^2. When that is dearer than forming the product row block by row block
    (m n (r1 + r2)), the blocks are used instead; neither builds the whole change.
    """
    import torch

    with torch.no_grad():
        dtype = torch.float64 if any(t.dtype == torch.float64 for t in (w1a, w1b, w2a, w2b)) else None
        a1, b1, a2, b2 = (_as_matrix(t, dtype or torch.float32) for t in (w1a, w1b, w2a, w2b))
        m, r1 = a1.shape
        n = b1.shape[1]
        r2 = a2.shape[1]
        if b1.shape[0] != r1 or b2.shape[0] != r2 or a2.shape[0] != m or b2.shape[1] != n:
            raise ValueError("LoHa factor shapes do not fit together")
        gram_cost = (m + n) * (r1 * r2) ** 2
        block_cost = m * n * (r1 + r2)
        if gram_cost <= block_cost:
            p = (a1.unsqueeze(2) * a2.unsqueeze(1)).reshape(m, r1 * r2)
            q = (b1.T.unsqueeze(2) * b2.T.unsqueeze(1)).reshape(n, r1 * r2)
            return root(_product_norm_sq(p, q))
        rows = max(1, CHUNK_ELEMENTS // max(1, n))
        total = torch.zeros((), dtype=torch.float64, device=a1.device)
        for start in range(0, m, rows):
            block = (a1[start : start + rows] @ b1) * (a2[start : start + rows] @ b2)
            total += torch.sum(block * block, dtype=torch.float64)
        return root(Scalar(total))


def kron_norm(left_norm: float, right_norm: float) -> float:
    """||kron(A, B)||_F from the norms of A and B."""
    return left_norm * right_norm

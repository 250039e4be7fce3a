"""Exact Frobenius norms of low-rank weight changes without building the full change.

A LoRA's change up @ down has m*n elements, but its norm only needs the two r x r Gram matrices:
||U D||^2 = trace((U^T U)(D D^T)). LoHa ((A1 B1) * (A2 B2), elementwise) is itself a product of
two rank-(r1*r2) factors, and ||kron(A, B)|| = ||A|| * ||B||. Everything is accumulated in float64
so the result matches a materialised reference to well below 1e-4 relative. No function here keeps
a reference to its arguments.
"""

from __future__ import annotations

import math

CHUNK_ELEMENTS = 1 << 22  # bounded temporary memory for plain norms and row-chunked products


def _as_matrix(tensor):
    """[rows, rest] float64 view of a weight factor (conv factors are flattened after dim 0)."""
    import torch

    matrix = tensor.detach()
    matrix = matrix.reshape(matrix.shape[0], -1) if matrix.dim() != 2 else matrix
    return matrix.to(torch.float64)


def frobenius_norm(tensor) -> float:
    """||t||_F of any float tensor, in chunks so a large weight never gets a full float64 copy."""
    import torch

    flat = tensor.detach().reshape(-1)
    total = 0.0
    with torch.no_grad():
        for start in range(0, int(flat.numel()), CHUNK_ELEMENTS):
            # float64 accumulation without a float64 copy of the chunk (twice as fast as converting)
            chunk_norm = float(
                torch.linalg.vector_norm(flat[start : start + CHUNK_ELEMENTS], dtype=torch.float64)
            )
            total += chunk_norm * chunk_norm
    return math.sqrt(total)


def _gram_trace(left_gram, right_gram) -> float:
    """trace(L R) for symmetric L, R: the squared norm of the product they describe."""
    return max(0.0, float((left_gram * right_gram).sum()))


def lora_norm(up, down) -> float:
    """||up @ down||_F for up [m, r(, 1, 1)] and down [r, n(, kh, kw)], in O(r^2 (m + n))."""
    import torch

    with torch.no_grad():
        u = _as_matrix(up)
        d = _as_matrix(down)
        if u.shape[1] != d.shape[0]:
            raise ValueError(f"rank mismatch: up {tuple(up.shape)} down {tuple(down.shape)}")
        return math.sqrt(_gram_trace(u.T @ u, d @ d.T))


def loha_norm(w1a, w1b, w2a, w2b) -> float:
    """||(w1a @ w1b) * (w2a @ w2b)||_F (Hadamard product of two low-rank products).

    With P[i, (a, b)] = w1a[i, a] * w2a[i, b] and Q[j, (a, b)] = w1b[a, j] * w2b[b, j] the change is
    P @ Q^T, so its squared norm is sum((P^T P) * (Q^T Q)): two (r1 r2)^2 Gram matrices, cost
    (m + n) (r1 r2)^2. When that is dearer than forming the product row block by row block
    (m n (r1 + r2)), the blocks are used instead; neither builds the whole change.
    """
    import torch

    with torch.no_grad():
        a1, b1, a2, b2 = (_as_matrix(t) for t in (w1a, w1b, w2a, w2b))
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
            return math.sqrt(_gram_trace(p.T @ p, q.T @ q))
        rows = max(1, CHUNK_ELEMENTS // max(1, n))
        total = 0.0
        for start in range(0, m, rows):
            block = (a1[start : start + rows] @ b1) * (a2[start : start + rows] @ b2)
            total += float((block * block).sum())
        return math.sqrt(total)


def kron_norm(left_norm: float, right_norm: float) -> float:
    """||kron(A, B)||_F from the norms of A and B."""
    return left_norm * right_norm

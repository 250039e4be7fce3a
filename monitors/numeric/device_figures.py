"""Figures left on their device until a step reads them all back at once.

On a GPU every `float(tensor)` waits for the kernels queued before it: a LoRA step that read each
key's norm as it went paid one synchronisation per key. Here a figure is a `Scalar` (a 0-dim tensor
on its device, with an optional error bound and a float64 recomputation) or an `Expr` over scalars
(a norm, a product of norms, a sum of inner products); `resolve` reads every pending scalar of a
batch in one transfer per device, then recomputes in float64 the few whose bound is not small
enough (a second transfer, only when there are such). A scalar may also be computed `later`, by a
function that receives every such scalar of the batch at once (the low-rank norms: one batched
product per shape instead of a few small kernels per key, which on a GPU cost a launch each).
Nothing here keeps a tensor after `resolve`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable


class Scalar:
    """A 0-dim tensor still on its device; `value` once resolved.

    `bound`: a 0-dim tensor bounding the value's rounding error; `exact()`: the value computed
    again in float64, used when the value is not finite or its bound exceeds `tolerance` of it
    (without `exact` the value is kept as it is)."""

    __slots__ = ("tensor", "bound", "exact", "tolerance", "value", "later")

    def __init__(self, tensor, bound=None, exact: Callable | None = None, tolerance: float = 0.0) -> None:
        self.tensor, self.bound, self.exact, self.tolerance = tensor, bound, exact, tolerance
        self.value: float | None = None
        self.later: tuple | None = None

    @classmethod
    def computed_later(cls, compute: Callable[[list[Scalar]], None], *inputs) -> Scalar:
        """A scalar whose tensor `compute(scalars)` sets at resolve time, for every scalar of the
        batch made with the same `compute` at once (each holds its `inputs` until then)."""
        scalar = cls(None)
        scalar.later = (compute, inputs)
        return scalar

    def good_enough(self, bound: float | None) -> bool:
        if self.exact is None:
            return True
        if not math.isfinite(self.value):
            return False
        return bound is None or (math.isfinite(bound) and bound <= self.tolerance * self.value)


class Expr:
    """A figure computed on the host from resolved scalars: combine([their values])."""

    __slots__ = ("scalars", "combine")

    def __init__(self, scalars: list[Scalar], combine: Callable[[list[float]], float | None]) -> None:
        self.scalars, self.combine = scalars, combine

    def value(self) -> float | None:
        return self.combine([s.value for s in self.scalars])


def known(value: float | None) -> Expr:
    """A figure already on the host (a cached one)."""
    return Expr([], lambda _values: value)


def root(squared: Scalar) -> Expr:
    """The norm whose square `squared` is (negative rounding clamped to 0)."""
    return Expr([squared], lambda values: math.sqrt(max(0.0, values[0])))


def product(left: Expr, right: Expr) -> Expr:
    """left * right (||kron(A, B)|| = ||A|| ||B||)."""
    n = len(left.scalars)

    def combine(values: list[float]) -> float:
        return left.combine(values[:n]) * right.combine(values[n:])

    return Expr(left.scalars + right.scalars, combine)


def resolve(figures: Iterable[Expr | None]) -> None:
    """Read back every pending scalar of `figures`: one transfer per device, plus one for those
    computed again in float64 (none in the usual case)."""
    pending = [s for figure in figures if figure is not None for s in figure.scalars if s.value is None]
    _compute_later(pending)
    bounds = _read(pending)
    again = [s for s, bound in zip(pending, bounds, strict=True) if not s.good_enough(bound)]
    for scalar in again:
        scalar.tensor, scalar.bound, scalar.exact = scalar.exact(), None, None
    _read(again)
    for scalar in pending:
        scalar.tensor = scalar.bound = scalar.exact = None  # keep no tensor past the read


def _compute_later(scalars: list[Scalar]) -> None:
    """Run each `computed_later` function once over its scalars of this batch."""
    by_compute: dict = {}
    for scalar in scalars:
        if scalar.later is not None:
            by_compute.setdefault(scalar.later[0], []).append(scalar)
    for compute, group in by_compute.items():
        compute(group)
        for scalar in group:
            scalar.later = None


def _read(scalars: list[Scalar]) -> list[float | None]:
    """Values (and bounds, returned) of `scalars`: one stacked float64 tensor per device, read once."""
    import torch

    bounds: list[float | None] = [None] * len(scalars)
    by_device: dict = {}
    for index, scalar in enumerate(scalars):
        by_device.setdefault(scalar.tensor.device, []).append(index)
    for indices in by_device.values():
        with_bound = [i for i in indices if scalars[i].bound is not None]
        parts = [scalars[i].tensor for i in indices] + [scalars[i].bound for i in with_bound]
        host = torch.stack([p.reshape(()).to(torch.float64) for p in parts]).tolist()
        for i, value in zip(indices, host, strict=False):
            scalars[i].value = value
        for i, value in zip(with_bound, host[len(indices) :], strict=True):
            bounds[i] = value
    return bounds


def figure_value(figure: Expr | None) -> float | None:
    """One figure resolved alone (a single read): for callers outside a batched step."""
    resolve([figure])
    return None if figure is None else figure.value()

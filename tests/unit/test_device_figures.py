"""Figures left on their device until a batch reads them back (monitors/numeric/device_figures.py): the
values, the bounds paired with their scalars, the float64 recomputation exactly when the bound is
not small enough, and no tensor kept after the read."""

from __future__ import annotations

import math

import torch

from monitors.numeric.device_figures import Expr, Scalar, _read, figure_value, known, product, resolve, root


def scalar(value: float, bound: float | None = None, exact: float | None = None, **kwargs) -> Scalar:
    """A float32 scalar; `exact`: the value its float64 recomputation gives."""
    recompute = None if exact is None else (lambda: torch.tensor(exact, dtype=torch.float64))
    bound_tensor = None if bound is None else torch.tensor(bound)
    return Scalar(torch.tensor(value), bound_tensor, recompute, **kwargs)


def resolved(s: Scalar) -> float:
    resolve([Expr([s], lambda values: values[0])])
    return s.value


def test_without_recomputation_the_value_is_kept_whatever_it_is():
    assert resolved(scalar(2.5)) == 2.5
    assert math.isnan(resolved(scalar(float("nan"), bound=1.0)))
    assert resolved(scalar(3.0, bound=100.0)) == 3.0


def test_recomputed_when_the_bound_exceeds_the_tolerance():
    assert resolved(scalar(1.0, bound=0.5, exact=2.0)) == 2.0  # default tolerance 0
    assert resolved(scalar(1.0, bound=0.0, exact=2.0)) == 1.0  # an exact value
    assert resolved(scalar(4.0, bound=2.0, exact=5.0, tolerance=0.5)) == 4.0  # bound = 0.5 * 4
    assert resolved(scalar(4.0, bound=2.5, exact=5.0, tolerance=0.5)) == 5.0
    assert resolved(scalar(4.0, bound=1.5, exact=5.0, tolerance=0.5)) == 4.0
    assert resolved(scalar(4.0, bound=float("inf"), exact=5.0, tolerance=0.5)) == 5.0
    assert resolved(scalar(4.0, bound=1e30, exact=5.0, tolerance=0.5)) == 5.0


def test_recomputed_when_not_finite_kept_without_bound():
    assert resolved(scalar(float("inf"), exact=7.0)) == 7.0
    assert resolved(scalar(float("nan"), bound=0.0, exact=7.0)) == 7.0
    assert resolved(scalar(3.0, exact=7.0)) == 3.0  # no bound: trusted


def test_good_enough():
    s = scalar(4.0, exact=5.0, tolerance=0.25)
    s.value = 4.0
    assert s.good_enough(None) is True
    assert s.good_enough(1.0) is True and s.good_enough(1.5) is False
    s.value = float("inf")
    assert s.good_enough(None) is False
    assert scalar(1.0).good_enough(float("inf")) is True


def test_expressions():
    assert known(2.5).value() == 2.5 and known(None).value() is None
    four, nine = scalar(4.0), scalar(9.0)
    norm = product(root(four), root(nine))
    assert len(norm.scalars) == 2
    assert figure_value(norm) == 6.0
    assert figure_value(root(scalar(0.25))) == 0.5
    assert figure_value(root(scalar(-1e-9))) == 0.0  # negative rounding clamped
    assert figure_value(product(known(3.0), root(scalar(4.0)))) == 6.0
    assert figure_value(None) is None


def test_resolve_skips_none_and_resolved_scalars_and_keeps_no_tensor():
    first = scalar(1.0, bound=0.5, exact=2.0)
    figure = root(first)
    resolve([None, figure, None])
    assert first.value == 2.0 and first.tensor is None and first.bound is None and first.exact is None
    again = scalar(16.0)
    resolve([figure, root(again)])  # the first already read: not read again
    assert first.value == 2.0 and again.value == 16.0 and again.tensor is None


def test_read_pairs_each_bound_with_its_scalar():
    scalars = [scalar(1.0, bound=0.25), scalar(2.0), scalar(3.0, bound=0.5), scalar(4.0)]
    assert _read(scalars) == [0.25, None, 0.5, None]
    assert [s.value for s in scalars] == [1.0, 2.0, 3.0, 4.0]
    assert _read([]) == []


def test_a_batch_recomputes_only_what_it_must():
    calls = []

    def exact(value):
        def recompute():
            calls.append(value)
            return torch.tensor(value, dtype=torch.float64)

        return recompute

    loose = Scalar(torch.tensor(1.0), torch.tensor(1.0), exact(1.5))
    tight = Scalar(torch.tensor(2.0), torch.tensor(0.0), exact(2.5))
    plain = Scalar(torch.tensor(3.0))
    resolve([root(loose), Expr([tight, plain], sum)])
    assert calls == [1.5]
    assert (loose.value, tight.value, plain.value) == (1.5, 2.0, 3.0)


def test_scalars_computed_later_once_per_batch_and_function():
    calls = []

    def squares(scalars):
        calls.append([s.later[1] for s in scalars])
        for s in scalars:
            s.tensor = torch.tensor(float(s.later[1][0] ** 2))

    def cubes(scalars):
        calls.append([s.later[1] for s in scalars])
        for s in scalars:
            s.tensor = torch.tensor(float(s.later[1][0] ** 3))

    a, b, c = (
        Scalar.computed_later(squares, 2),
        Scalar.computed_later(squares, 3),
        Scalar.computed_later(cubes, 2),
    )
    assert a.tensor is None and a.later == (squares, (2,))
    resolve([root(a), Expr([b, c, scalar(1.0)], sum)])
    assert calls == [[(2,), (3,)], [(2,)]]
    assert (a.value, b.value, c.value) == (4.0, 9.0, 8.0)
    assert a.later is None and b.later is None and c.later is None
    resolve([root(a)])
    assert len(calls) == 2  # resolved: not computed again

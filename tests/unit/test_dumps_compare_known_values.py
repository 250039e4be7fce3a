"""compare_pair and compare_sets on known values: NaN/Inf against a reference computed on the finite
pairs (in one chunk and across chunks), zero norms, tolerance at equality, which sizes are summed
in float64, and the exact summary counts and verdicts of a set."""

from __future__ import annotations

import math

import pytest
import torch

from monitors.dumps import compare
from monitors.dumps.compare import compare_pair, compare_sets

NAN, INF = float("nan"), float("inf")
# a: reference. Pairs: (1, 1.5) (2, 2) (nan, nan) (inf, inf) (3, nan) (-inf, 7) (5, 4)
A = [1.0, 2.0, NAN, INF, 3.0, -INF, 5.0]
B = [1.5, 2.0, NAN, INF, NAN, 7.0, 4.0]


@pytest.mark.parametrize("chunk", [1 << 22, 2, 1])
def test_specials_against_a_reference_on_the_finite_pairs(monkeypatch, chunk):
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", chunk)
    row = compare_pair(torch.tensor(A, dtype=torch.float64), torch.tensor(B, dtype=torch.float64), 0.0, 0.6)
    fa, fb = [1.0, 2.0, 5.0], [1.5, 2.0, 4.0]  # the pairs where both values are finite
    dot = sum(x * y for x, y in zip(fa, fb, strict=True))
    norm_a2, norm_b2 = sum(x * x for x in fa), sum(y * y for y in fb)
    diff2 = sum((y - x) ** 2 for x, y in zip(fa, fb, strict=True))
    assert row["n_nan_mismatch"] == 1  # (3, nan)
    # |b - a| is finite for (1, 1.5), (2, 2), (5, 4) and 0 for the equal specials
    assert row["max_abs_diff"] == 1.0 and row["mean_abs_diff"] == pytest.approx(1.5 / 5, rel=1e-15)
    assert row["n_not_close"] == 3  # (3, nan), (-inf, 7), (5, 4)
    assert row["relative_error"] == pytest.approx(math.sqrt(diff2) / math.sqrt(norm_a2), rel=1e-15)
    assert row["cosine_similarity"] == pytest.approx(dot / math.sqrt(norm_a2 * norm_b2), rel=1e-15)
    assert (row["allclose"], row["equal"]) == (False, False)
    assert row["reason"] == "3 of 7 elements outside tolerance"


def test_equal_specials_are_identical():
    a = torch.tensor([NAN, INF, -INF, 1.0])
    row = compare_pair(a, a.clone(), 0.0, 0.0)
    assert (row["equal"], row["allclose"], row["n_not_close"], row["n_nan_mismatch"]) == (True, True, 0, 0)
    assert row["max_abs_diff"] == 0.0 and row["mean_abs_diff"] == 0.0
    assert row["relative_error"] == 0.0 and row["cosine_similarity"] == pytest.approx(1.0)
    opposite = compare_pair(torch.tensor([INF, 1.0]), torch.tensor([-INF, 1.0]), 0.0, 0.0)
    assert (opposite["n_not_close"], opposite["equal"], opposite["max_abs_diff"]) == (1, False, 0.0)


def test_zero_norms_give_no_cosine_and_a_relative_error_only_against_a_nonzero_reference():
    zeros, ones = torch.zeros(4), torch.ones(4)
    both = compare_pair(zeros, zeros.clone(), 0.0, 0.0)
    assert (both["relative_error"], both["cosine_similarity"], both["equal"]) == (0.0, None, True)
    from_zero = compare_pair(zeros, ones, 0.0, 0.0)
    assert (from_zero["relative_error"], from_zero["cosine_similarity"]) == (None, None)
    assert from_zero["max_abs_diff"] == 1.0 and from_zero["n_not_close"] == 4
    to_zero = compare_pair(ones, zeros, 0.0, 0.0)
    assert (to_zero["relative_error"], to_zero["cosine_similarity"]) == (1.0, None)
    opposite = compare_pair(ones, -ones, 0.0, 0.0)
    assert opposite["cosine_similarity"] == -1.0 and opposite["relative_error"] == 2.0


def test_a_nan_on_both_sides_leaves_the_finite_figures_as_they_were_across_chunks(monkeypatch):
    """A NaN pair sends the comparison down its float64 path (chunks of 2 here): the figures of the
    finite pairs are unchanged, the equal NaNs count as a difference of 0."""
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 2)
    a = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, NAN], dtype=torch.float64)
    b = torch.tensor([1.0, 2.5, 3.0, 2.0, 5.0, NAN], dtype=torch.float64)
    row = compare_pair(a, b, 0.0, 0.5)  # 0.5 is close (<=), 2 is not
    assert (row["n_not_close"], row["max_abs_diff"], row["n_nan_mismatch"]) == (1, 2.0, 0)
    assert row["mean_abs_diff"] == pytest.approx(2.5 / 6, rel=1e-15)
    assert row["relative_error"] == pytest.approx(math.sqrt(4.25 / 55), rel=1e-15)
    dot = 1 + 5 + 9 + 8 + 25
    assert row["cosine_similarity"] == pytest.approx(dot / math.sqrt(55 * (1 + 6.25 + 9 + 4 + 25)), rel=1e-15)
    finite = compare_pair(a[:5], b[:5], 0.0, 0.5)  # all finite: the fast path, the same figures
    assert (finite["n_not_close"], finite["max_abs_diff"], finite["mean_abs_diff"]) == (1, 2.0, 0.5)
    assert finite["relative_error"] == pytest.approx(row["relative_error"], rel=1e-15)
    assert finite["cosine_similarity"] == pytest.approx(row["cosine_similarity"], rel=1e-15)


def test_fast_path_counts_elements_outside_tolerance_exactly():
    a = torch.zeros(100_000)  # float32 accumulation (above 64 Ki elements)
    b = a.clone()
    b[[5, 70_000, 99_999]] = 0.5
    b[6] = 0.25  # exactly atol: close, as in torch.isclose
    row = compare_pair(a, b, 1e-3, 0.25)
    assert row["n_not_close"] == 3 and row["allclose"] is False and row["equal"] is False
    assert row["max_abs_diff"] == 0.5 and row["mean_abs_diff"] == pytest.approx(1.75 / 100_000, rel=1e-6)
    assert row["n_not_close"] == int((~torch.isclose(b, a, rtol=1e-3, atol=0.25)).sum())


def test_empty_and_mismatched_pairs():
    empty = compare_pair(torch.zeros(0), torch.zeros(0, dtype=torch.float64), 0.0, 0.0)
    assert (empty["allclose"], empty["equal"], empty["n_not_close"], empty["n_nan_mismatch"]) == (
        True,
        False,
        0,
        0,
    )
    reshaped = compare_pair(torch.zeros(2, 3), torch.zeros(3, 2), 0.0, 0.0)
    assert reshaped["reason"] == "shape mismatch (same number of elements: reshaped?)"
    assert compare_pair(torch.zeros(2, 3), torch.zeros(2, 2), 0.0, 0.0)["reason"] == "shape mismatch"


def _lazy(tensors):
    return {name: (lambda t=t: t) for name, t in tensors.items()}


def test_summary_counts_of_a_set():
    a = {
        "same": torch.tensor([1.0, 2.0]),
        "close": torch.tensor([1.0, 2.0]),
        "far": torch.tensor([1.0, 0.0]),
        "shape": torch.zeros(2),
        "only_a": torch.zeros(1),
    }
    b = {
        "same": torch.tensor([1.0, 2.0]),
        "close": torch.tensor([1.0, 2.001]),
        "far": torch.tensor([0.0, 1.0]),
        "shape": torch.zeros(3),
        "only_b": torch.zeros(1),
        "only_b2": torch.zeros(1),
    }
    result = compare_sets(_lazy(a), _lazy(b), 0.0, 0.01)
    assert {
        key: result[key] for key in ("n_compared", "n_identical", "n_close", "n_incompatible", "n_different")
    } == {
        "n_compared": 4,
        "n_identical": 1,
        "n_close": 2,
        "n_incompatible": 1,
        "n_different": 2,
    }
    assert result["only_in_a"] == ["only_a"] and result["only_in_b"] == ["only_b", "only_b2"]
    assert result["max_abs_diff"] == 1.0 and result["min_cosine_similarity"] == 0.0
    assert result["max_relative_error"] == pytest.approx(math.sqrt(2))
    assert result["status"] == "incompatible"
    assert result["verdict"] == "incompatible: shapes differ for shape: [2] vs [3] (1 only in dump_a, 2 only in dump_b)"


def test_verdicts_name_the_worst_tensor_and_the_closest_figures():
    a = {"x": torch.tensor([1.0, 2.0]), "y": torch.tensor([1.0, 1.0]), "z": torch.tensor([3.0, 4.0])}
    b = {"x": torch.tensor([1.0, 2.5]), "y": torch.tensor([1.0, 3.0]), "z": torch.tensor([3.0, 4.0])}
    different = compare_sets(_lazy(a), _lazy(b), 0.0, 0.1)
    assert (different["n_different"], different["status"]) == (2, "different")
    assert different["verdict"] == (
        "different: 2 of 3 tensors outside rtol=0, atol=0.1; worst y: max abs diff 2, cosine 0.894427, 1 of 2 elements off"
    )
    close = compare_sets(_lazy(a), _lazy(b), 0.0, 2.0)
    assert close["status"] == "close" and close["n_different"] == 0 and close["n_close"] == 3
    assert close["verdict"] == "close: 3 tensors within rtol=0, atol=2 (max abs diff 2, min cosine 0.894427)"
    same = compare_sets(_lazy(a), _lazy(dict(a)), 0.0, 0.0)
    assert (same["status"], same["verdict"]) == ("identical", "identical: 3 tensors bitwise equal")
    nothing = compare_sets(_lazy({"p": torch.zeros(1)}), _lazy({"q": torch.zeros(1)}), 0.0, 0.0)
    assert nothing["status"] == "nothing_to_compare"
    assert nothing["verdict"] == "nothing to compare: no tensor names in common (a: p; b: q)"


@pytest.mark.parametrize("n", [3, 2**16])
def test_float32_pairs_up_to_64_ki_elements_are_summed_in_float64(n):
    a = torch.zeros(n)
    b = torch.zeros(n)
    b[:3] = torch.tensor([1e8, 1.0, 1e8])  # 2e8 + 1 is not a float32
    assert compare_pair(a, b, 0.0, 0.0)["mean_abs_diff"] == (2e8 + 1) / n


def test_float64_pairs_above_64_ki_elements_are_summed_in_float64():
    a = torch.zeros(2**16 + 1, dtype=torch.float64)
    b = a.clone()
    b[0] = 1.0 + 2.0**-40  # lost in float32
    row = compare_pair(a, b, 0.0, 0.0)
    assert row["max_abs_diff"] == 1.0 + 2.0**-40 and row["n_not_close"] == 1


def test_a_complex_tensor_on_either_side_is_not_compared():
    for a, b in (
        (torch.zeros(2, dtype=torch.complex64), torch.zeros(2)),
        (torch.zeros(2), torch.zeros(2, dtype=torch.complex64)),
    ):
        assert compare_pair(a, b, 0.0, 0.0)["reason"] == "complex tensors are not compared"


def test_verdicts_say_what_has_nothing_in_common_which_shapes_differ_and_how_close():
    names = {f"p{i}": torch.zeros(1) for i in range(4)}
    nothing = compare_sets(_lazy(names), _lazy({f"q{i}": torch.zeros(1) for i in range(4)}), 0.0, 0.0)
    assert (
        nothing["verdict"] == "nothing to compare: no tensor names in common (a: p0, p1, p2; b: q0, q1, q2)"
    )
    shapes = compare_sets(
        _lazy({"s": torch.zeros(2), "t": torch.zeros(2)}),
        _lazy({"s": torch.zeros(3), "t": torch.zeros(4)}),
        0.0,
        0.0,
    )
    assert shapes["verdict"] == "incompatible: shapes differ for s: [2] vs [3] and 1 more"
    # the worst tensor is the one with the largest finite difference; all-NaN differences count as 0
    worst = compare_sets(
        _lazy({"nan": torch.tensor([NAN]), "off": torch.tensor([0.0, 0.0])}),
        _lazy({"nan": torch.tensor([1.0]), "off": torch.tensor([0.0, 0.5])}),
        0.0,
        0.0,
    )
    assert worst["tensors"]["nan"]["max_abs_diff"] is None
    assert worst["verdict"].startswith(
        "different: 2 of 2 tensors outside rtol=0, atol=0; worst off: max abs diff 0.5,"
    )
    close = compare_sets(_lazy({"x": torch.tensor([1.0])}), _lazy({"x": torch.tensor([2.2345])}), 0.0, 2.0)
    assert close["verdict"] == "close: 1 tensors within rtol=0, atol=2 (max abs diff 1.23, min cosine 1)"

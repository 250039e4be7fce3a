"""The comparison's one-pass float32 path: row norms, the polarized dot product and its fallback,
the count outside tolerance in the same pass, zero norms, overflow, float16, and the documented
error bounds against a float64 reference."""

from __future__ import annotations

import math

import pytest
import torch

from monitors.dumps import compare
from monitors.dumps.compare import compare_pair, polarization_factor
from monitors.numeric.tensor_stats import SUM_CHAIN_BOUND

U32 = 2.0**-24
NORM_BOUND = (SUM_CHAIN_BOUND + 2) * U32


@pytest.fixture
def float32_chunks(monkeypatch):
    """Several chunks, rows with a tail, float32 accumulation as for large tensors."""
    monkeypatch.setattr(compare, "FAST_CHUNK_ELEMENTS", 1000)
    monkeypatch.setattr(compare, "FLOAT64_MAX_ELEMENTS", 0)


def reference(a, b):
    ad, bd = a.double(), b.double()
    na, nb = float(torch.linalg.vector_norm(ad)), float(torch.linalg.vector_norm(bd))
    return {
        "cos": float(torch.dot(ad, bd)) / (na * nb),
        "rel": float(torch.linalg.vector_norm(bd - ad)) / na,
        "p": polarization_factor(na**2, nb**2, float(torch.linalg.vector_norm(bd - ad)) ** 2),
    }


def read_backs(monkeypatch):
    calls = []
    original = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: calls.append("tolist") or original(self))
    return calls


def test_polarization_factor():
    assert polarization_factor(1.0, 1.0, 0.0) == 1.0  # b == a
    assert polarization_factor(1.0, 1.0, 2.0) == 2.0  # orthogonal, equal norms
    assert polarization_factor(4.0, 4.0, 16.0) == 3.0  # b == -a
    assert polarization_factor(1.0, 1e-4, 1.0) > compare.POLARIZATION_LIMIT  # norms 100x apart


@pytest.mark.parametrize(
    "make_b",
    [
        lambda a, noise: a + 1e-3 * noise,  # close
        lambda a, noise: -a + 1e-2 * noise,  # nearly opposite: P about 3
        lambda a, noise: noise,  # unrelated: P about 2
    ],
)
def test_polarized_cosine_within_its_bound(float32_chunks, monkeypatch, make_b):
    g = torch.Generator().manual_seed(11)
    a = 1.0 + torch.randn(10_007, generator=g)
    b = make_b(a, torch.randn(10_007, generator=g))
    calls = read_backs(monkeypatch)
    row = compare_pair(a, b, 1e-3, 1e-5)
    ref = reference(a, b)
    assert ref["p"] <= compare.POLARIZATION_LIMIT
    assert calls == ["tolist"]  # no second pass for the dot product
    assert abs(row["cosine_similarity"] - ref["cos"]) <= NORM_BOUND * (ref["p"] + 1)
    assert abs(row["relative_error"] - ref["rel"]) <= NORM_BOUND * ref["rel"]


def test_norms_far_apart_sum_the_products_in_a_second_pass(float32_chunks, monkeypatch):
    g = torch.Generator().manual_seed(12)
    a = torch.randn(10_007, generator=g)
    b = 1e-3 * (a + 0.5 * torch.randn(10_007, generator=g))  # |b| ~ 1e-3 |a|: P ~ 400
    calls = read_backs(monkeypatch)
    row = compare_pair(a, b, 1e-3, 1e-5)
    ref = reference(a, b)
    assert ref["p"] > compare.POLARIZATION_LIMIT
    assert calls == ["tolist", "tolist"]
    assert abs(row["cosine_similarity"] - ref["cos"]) <= (2 * SUM_CHAIN_BOUND + 2) * U32
    assert ref["cos"] == pytest.approx(1 / math.sqrt(1.25), abs=0.01)  # the data are what they say


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_pairs_count_exactly_in_one_pass(float32_chunks, monkeypatch, dtype):
    g = torch.Generator().manual_seed(13)
    a = torch.randn(5003, generator=g).to(dtype)
    b = (a.float() + 1e-2 * torch.randn(5003, generator=g)).to(dtype)
    calls = read_backs(monkeypatch)
    row = compare_pair(a, b, 1e-2, 1e-3)
    a32, b32 = a.float(), b.float()
    assert calls == ["tolist"]
    assert row["n_not_close"] == int((~torch.isclose(b32, a32, rtol=1e-2, atol=1e-3)).sum()) > 0
    assert row["max_abs_diff"] == float((b32 - a32).abs().max())
    ref = reference(a32, b32)
    assert abs(row["cosine_similarity"] - ref["cos"]) <= NORM_BOUND * (ref["p"] + 1)


def test_counts_on_the_tolerance_boundary_match_torch_isclose(float32_chunks):
    a = torch.linspace(-4.0, 4.0, 3001)
    allowed = a.abs() * 1e-3 + 1e-5  # float32, rounded as torch.isclose rounds it
    b = a + allowed  # on the boundary after rounding, or just outside it
    b[::7] = a[::7] + 2 * allowed[::7]
    row = compare_pair(a, b, 1e-3, 1e-5)
    assert row["n_not_close"] == int((~torch.isclose(b, a, rtol=1e-3, atol=1e-5)).sum())


def test_zero_norms_in_float32_chunks(float32_chunks):
    zeros, ones = torch.zeros(3000), torch.ones(3000)
    row = compare_pair(zeros, ones, 0.0, 0.5)
    assert row["relative_error"] is None and row["cosine_similarity"] is None
    assert row["n_not_close"] == 3000 and row["mean_abs_diff"] == 1.0
    row = compare_pair(ones, zeros, 0.0, 0.5)
    assert row["relative_error"] == 1.0 and row["cosine_similarity"] is None
    row = compare_pair(zeros, zeros.clone(), 0.0, 0.0)
    assert row["relative_error"] == 0.0 and row["equal"] and row["cosine_similarity"] is None


def test_float32_norm_overflow_takes_the_float64_path(float32_chunks):
    a = torch.full((3000,), 1e30)  # finite, but its float32 sum of squares is not
    b = a.clone()
    b[5] = 2e30
    row = compare_pair(a, b, 0.0, 0.0)
    assert row["relative_error"] == pytest.approx(1e30 / (1e30 * math.sqrt(3000)), rel=1e-12)
    assert row["n_not_close"] == 1 and row["max_abs_diff"] == pytest.approx(1e30, rel=1e-6)


def test_specials_still_counted_in_float32_chunks(float32_chunks):
    a = torch.randn(4000)
    b = a.clone()
    a[3], b[3] = float("nan"), float("nan")
    b[2500] = float("-inf")
    a[3999] = float("inf")
    row = compare_pair(a, b, 1e-5, 1e-8)
    assert row["n_nan_mismatch"] == 0 and row["n_not_close"] == 2 and row["max_abs_diff"] == 0.0


def test_strided_pairs_give_the_contiguous_figures(float32_chunks):
    g = torch.Generator().manual_seed(14)
    a, b = torch.randn(6000, generator=g), torch.randn(6000, generator=g)
    got = compare_pair(a[::2], b[::2], 1e-3, 1e-5)
    want = compare_pair(a[::2].clone(), b[::2].clone(), 1e-3, 1e-5)
    exact = ("n_not_close", "max_abs_diff", "allclose", "equal", "shape_a", "n_elements")
    assert {k: got[k] for k in exact} == {k: want[k] for k in exact}
    for key in ("mean_abs_diff", "relative_error", "cosine_similarity"):  # summation order differs
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-6)

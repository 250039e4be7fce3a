"""monitors/dumps/compare.py: per-tensor figures, allclose semantics, verdicts."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from monitors.dumps import compare as tensor_compare
from monitors.dumps.compare import compare_pair, compare_sets


def sets(a: dict, b: dict, rtol=1e-5, atol=1e-8):
    return compare_sets(
        {k: (lambda v=v: v) for k, v in a.items()}, {k: (lambda v=v: v) for k, v in b.items()}, rtol, atol
    )


def test_identical():
    t = torch.randn(2, 3)
    row = compare_pair(t, t.clone(), 1e-5, 1e-8)
    assert row["equal"] and row["allclose"] and row["max_abs_diff"] == 0 and row["relative_error"] == 0
    assert row["cosine_similarity"] == pytest.approx(1.0)
    result = sets({"x": t}, {"x": t.clone()})
    assert result["status"] == "identical" and result["verdict"] == "identical: 1 tensors bitwise equal"


def test_figures_match_a_direct_computation():
    a = torch.tensor([1.0, 2.0, 3.0, 4.0])
    b = torch.tensor([1.0, 2.5, 3.0, 3.0])
    row = compare_pair(a, b, 0.0, 0.6)
    assert row["max_abs_diff"] == 1.0
    assert row["mean_abs_diff"] == pytest.approx(1.5 / 4)
    assert row["relative_error"] == pytest.approx(math.sqrt(0.25 + 1.0) / math.sqrt(30))
    assert row["cosine_similarity"] == pytest.approx(
        float(torch.nn.functional.cosine_similarity(a, b, dim=0))
    )
    assert row["n_not_close"] == 1 and row["allclose"] is False
    assert row["reason"] == "1 of 4 elements outside tolerance"


def test_different_verdict_names_the_worst_tensor():
    a = {"small": torch.zeros(4), "big": torch.zeros(4)}
    b = {"small": torch.full((4,), 0.1), "big": torch.full((4,), 2.0)}
    result = sets(a, b, 0, 0.01)
    assert result["status"] == "different" and result["n_different"] == 2
    assert result["verdict"].startswith(
        "different: 2 of 2 tensors outside rtol=0, atol=0.01; worst big: max abs diff 2"
    )
    assert result["max_abs_diff"] == 2.0
    assert result["min_cosine_similarity"] is None  # a is all zero: no direction to compare


def test_shape_and_dtype_mismatch():
    row = compare_pair(torch.zeros(2, 8), torch.zeros(4, 4), 0, 0)
    assert not row["shape_match"] and row["reason"] == "shape mismatch (same number of elements: reshaped?)"
    row = compare_pair(torch.ones(3), torch.ones(3, dtype=torch.float16), 0, 0)
    assert row["allclose"] and not row["equal"] and not row["dtype_match"]
    result = sets({"x": torch.ones(3)}, {"x": torch.ones(3, dtype=torch.float16)})
    assert result["status"] == "close" and "dtypes differ" in result["verdict"]


def test_nan_and_inf_semantics():
    nan, inf = float("nan"), float("inf")
    a = torch.tensor([nan, inf, -inf, 1.0])
    row = compare_pair(a, a.clone(), 0, 0)
    assert row["equal"] and row["allclose"] and row["n_nan_mismatch"] == 0
    row = compare_pair(a, torch.tensor([0.0, inf, inf, 1.0]), 0, 0)
    assert row["n_nan_mismatch"] == 1 and row["n_not_close"] == 2 and not row["allclose"]
    assert row["max_abs_diff"] == 0.0  # the finite differences only
    row = compare_pair(torch.tensor([inf]), torch.tensor([1e30]), 1.0, 1.0)
    assert not row["allclose"]  # an Inf is close only to the same Inf


def test_empty_zero_d_integer_and_complex():
    row = compare_pair(torch.zeros(0, 4), torch.zeros(0, 4), 0, 0)
    assert row["allclose"] and row["equal"] and row["max_abs_diff"] is None
    row = compare_pair(torch.tensor(2.0), torch.tensor(2.5), 0, 0.6)
    assert row["allclose"] and row["max_abs_diff"] == 0.5
    row = compare_pair(torch.arange(5), torch.arange(5), 0, 0)
    assert row["equal"]
    row = compare_pair(torch.zeros(2, dtype=torch.complex64), torch.zeros(2, dtype=torch.complex64), 0, 0)
    assert row["reason"] == "complex tensors are not compared" and not row["allclose"]


def test_chunks_give_the_same_figures(monkeypatch):
    torch.manual_seed(0)
    a, b = torch.randn(1000), torch.randn(1000)
    whole = compare_pair(a, b, 1e-2, 1e-2)
    monkeypatch.setattr(tensor_compare, "CHUNK_ELEMENTS", 7)
    chunked = compare_pair(a, b, 1e-2, 1e-2)
    for key in ("max_abs_diff", "n_not_close", "n_nan_mismatch"):
        assert chunked[key] == whole[key]
    for key in ("mean_abs_diff", "relative_error", "cosine_similarity"):
        assert chunked[key] == pytest.approx(whole[key], rel=1e-9)


def test_names_only_on_one_side():
    result = sets({"a": torch.zeros(1)}, {"b": torch.zeros(1)})
    assert (
        result["status"] == "nothing_to_compare"
        and result["only_in_a"] == ["a"]
        and result["only_in_b"] == ["b"]
    )
    result = sets({"x": torch.zeros(1), "a": torch.zeros(1)}, {"x": torch.zeros(1)})
    assert result["verdict"] == "identical: 1 tensors bitwise equal (1 only in dump_a)"


def test_tensors_are_fetched_one_pair_at_a_time():
    live = []

    def fetch(name):
        def get():
            live.append(name)
            return torch.zeros(2)

        return get

    compare_sets({n: fetch(n) for n in "abc"}, {n: fetch(n) for n in "abc"}, 0, 0)
    assert live == ["a", "a", "b", "b", "c", "c"]


values = st.lists(
    st.one_of(
        st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, width=32),
        st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=100, deadline=None)
@given(a=values, noise=st.lists(st.floats(min_value=-1, max_value=1, width=32), min_size=40, max_size=40),
       rtol=st.sampled_from([0.0, 1e-5, 1e-2]), atol=st.sampled_from([0.0, 1e-8, 1e-3, 0.5]))  # fmt: skip
def test_property_allclose_agrees_with_torch(a, noise, rtol, atol):
    ta = torch.tensor(a, dtype=torch.float64)
    tb = ta + torch.tensor(noise[: len(a)], dtype=torch.float64) * (
        torch.rand(len(a), dtype=torch.float64) > 0.5
    )
    row = compare_pair(ta, tb, rtol, atol)
    assert row["allclose"] == torch.allclose(tb, ta, rtol=rtol, atol=atol, equal_nan=True)
    assert row["n_not_close"] == int((~torch.isclose(tb, ta, rtol=rtol, atol=atol, equal_nan=True)).sum())
    if row["cosine_similarity"] is not None:
        assert -1.0 <= row["cosine_similarity"] <= 1.0
    assert row["equal"] == bool(((ta == tb) | (ta.isnan() & tb.isnan())).all())


@pytest.fixture
def float32_chunks(monkeypatch):
    """The fast path in float32 over several chunks, as for large tensors."""
    monkeypatch.setattr(tensor_compare, "FAST_CHUNK_ELEMENTS", 1000)
    monkeypatch.setattr(tensor_compare, "FLOAT64_MAX_ELEMENTS", 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("noise", [0.0, 1e-4, 1e-1])
def test_float32_chunks_match_a_float64_reference(float32_chunks, dtype, noise):
    g = torch.Generator().manual_seed(5)
    a = (3.0 + torch.randn(10_007, generator=g)).to(dtype)
    b = (a.float() + noise * torch.randn(10_007, generator=g)).to(dtype)
    row = compare_pair(a, b, 1e-3, 1e-5)
    a32, b32 = a.float(), b.float()
    # counts, allclose and equality: exactly torch's on the pair in float32
    assert row["n_not_close"] == int((~torch.isclose(b32, a32, rtol=1e-3, atol=1e-5)).sum())
    assert row["allclose"] == torch.allclose(b32, a32, rtol=1e-3, atol=1e-5)
    assert row["equal"] == bool((a == b).all())
    assert row["max_abs_diff"] == float((b32 - a32).abs().max())  # |b - a| rounded once to float32
    # sums: within the documented bound (M * u of the sum of magnitudes) of float64
    ad, bd = a.double(), b.double()
    eps = tensor_compare_bound()
    diff = (bd - ad).abs()
    assert abs(row["mean_abs_diff"] - float(diff.mean())) <= eps * float(diff.mean()) + 2**-24 * float(
        diff.max()
    )
    rel = float(torch.linalg.vector_norm(bd - ad) / torch.linalg.vector_norm(ad))
    assert abs(row["relative_error"] - rel) <= eps * rel + 2**-24 * float(diff.max()) / float(ad.abs().mean())
    cos = float(torch.dot(ad, bd) / (torch.linalg.vector_norm(ad) * torch.linalg.vector_norm(bd)))
    assert abs(row["cosine_similarity"] - cos) <= 3 * eps


def tensor_compare_bound():
    from monitors.numeric.tensor_stats import SUM_CHAIN_BOUND

    return (SUM_CHAIN_BOUND + 2) * 2.0**-24


def test_a_pair_reads_back_once_close_or_not(float32_chunks, monkeypatch):
    calls = []
    original_tolist, original_item = torch.Tensor.tolist, torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: calls.append("tolist") or original_tolist(self))
    monkeypatch.setattr(torch.Tensor, "item", lambda self: calls.append("item") or original_item(self))
    monkeypatch.setattr(torch.Tensor, "__bool__", lambda self: pytest.fail("bool() syncs per chunk"))
    a = torch.randn(10_000)
    compare_pair(a, a + 1e-9, 1e-3, 1e-5)
    assert calls == ["tolist"]
    calls.clear()
    b = a.clone()
    b[17] += 1.0
    assert compare_pair(a, b, 1e-3, 1e-5)["n_not_close"] == 1
    assert calls == ["tolist"]  # the count outside tolerance is in the same pass


def test_non_finite_pairs_take_the_float64_path_in_float32_chunks(float32_chunks):
    a = torch.randn(5000)
    b = a.clone()
    a[10], b[10] = float("nan"), float("nan")
    b[4000] = float("inf")
    row = compare_pair(a, b, 1e-5, 1e-8)
    assert row["n_nan_mismatch"] == 0 and row["n_not_close"] == 1 and row["max_abs_diff"] == 0.0

"""The norms of LoRA and LoHa changes by each path, on small shapes that take it: checked against
the materialised change and against the other path, at the cost boundary, with tiny values (norms
below 1), degenerate sizes and float32 factors. Which path ran is read from the matrix products
the factors made (tests/unit/recorded_products.py), never from the norm's own helpers."""

from __future__ import annotations

import math

import pytest
import torch

from monitors.lora import norms
from tests.unit.recorded_products import float64_products, record, shapes


def _factors(seed, *shapes, scale=1.0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator, dtype=torch.float64) * scale for shape in shapes]


def _loha_reference(a1, b1, a2, b2) -> float:
    return float(torch.linalg.matrix_norm((a1 @ b1) * (a2 @ b2)))


@pytest.mark.parametrize(
    ("m", "n", "r1", "r2", "path"),
    [
        (64, 48, 2, 2, "gram"),  # (m+n)(r1 r2)^2 = 1792 < m n (r1+r2) = 12288
        (8, 8, 2, 2, "gram"),  # 256 == 256: the Gram path at equality
        (4, 5, 4, 4, "blocks"),  # 2304 > 160
        (9, 8, 3, 2, "blocks"),  # 612 > 360
    ],
)
def test_loha_paths_match_the_materialised_change(m, n, r1, r2, path):
    for scale in (1.0, 0.01):  # 0.01: a norm well below 1
        a1, b1, a2, b2 = _factors(m * 100 + n, (m, r1), (r1, n), (m, r2), (r2, n), scale=scale)
        got = norms.loha_norm(*record(a1, b1, a2, b2))
        assert got == pytest.approx(_loha_reference(a1, b1, a2, b2), rel=1e-9)
        # the Gram path: two (r1 r2)^2 Grams; the block path: row blocks of the change, m x n here
        expected = [(r1 * r2, r1 * r2)] * 2 if path == "gram" else [(m, n)] * 2
        assert shapes() == expected


def test_loha_gram_path_agrees_with_rows_summed_one_by_one():
    a1, b1, a2, b2 = _factors(7, (16, 2), (2, 12), (16, 2), (2, 12), scale=0.3)
    gram = norms.loha_norm(*record(a1, b1, a2, b2))
    assert shapes() == [(4, 4), (4, 4)]  # (16 + 12) * 16 = 448 <= 16 * 12 * 4 = 768: the Grams
    block_total = 0.0
    for row in range(16):
        block = (a1[row] @ b1) * (a2[row] @ b2)
        block_total += float((block * block).sum())
    assert gram == pytest.approx(math.sqrt(block_total), rel=1e-12)


def test_loha_row_blocks_of_one_row_and_empty_columns(monkeypatch):
    monkeypatch.setattr(norms, "CHUNK_ELEMENTS", 3)  # fewer elements than one row: one row per block
    a1, b1, a2, b2 = _factors(3, (5, 4), (4, 4), (5, 4), (4, 4))
    assert norms.loha_norm(a1, b1, a2, b2) == pytest.approx(_loha_reference(a1, b1, a2, b2), rel=1e-12)
    monkeypatch.setattr(norms, "CHUNK_ELEMENTS", 1 << 22)
    empty = _factors(4, (5, 4), (4, 0), (5, 4), (4, 0))
    assert norms.loha_norm(*empty) == 0.0


@pytest.mark.parametrize(
    "shapes",
    [
        ((6, 2), (3, 5), (6, 2), (2, 5)),  # w1b rows != r1
        ((6, 2), (2, 5), (6, 2), (3, 5)),  # w2b rows != r2
        ((6, 2), (2, 5), (7, 2), (2, 5)),  # w2a rows != m
        ((6, 2), (2, 5), (6, 2), (2, 4)),  # w2b columns != n
    ],
)
def test_each_loha_shape_mismatch_alone_is_rejected(shapes):
    with pytest.raises(ValueError, match="LoHa factor shapes"):
        norms.loha_norm(*_factors(1, *shapes))


def test_lora_norm_small_values_and_conv_factors():
    up, down = _factors(5, (6, 3), (3, 7), scale=0.01)
    assert norms.lora_norm(*record(up, down)) == pytest.approx(float(torch.linalg.matrix_norm(up @ down)), rel=1e-9)
    assert shapes() == [(1, 3, 3), (1, 3, 3)]  # a batch of one r x r Gram pair, never m x n
    assert norms.lora_norm(up, down) < 1e-2
    conv_up, conv_down = up.reshape(6, 3, 1, 1), down.reshape(3, 7, 1, 1)
    assert norms.lora_norm(conv_up, conv_down) == pytest.approx(norms.lora_norm(up, down), rel=1e-12)
    with pytest.raises(ValueError, match="rank mismatch"):
        norms.lora_norm(up, down.T)


# Kept calls of private helpers, for a reason: the trace is clamped at 0 against rounding, and the
# bound only decides whether a float32 result is formed again in float64; neither shows in a norm
# reliably (a negative trace needs a rounding accident; a wrong bound changes the last digits).
def test_gram_trace_is_never_negative():
    assert norms._gram_trace(torch.tensor([[1.0]]), torch.tensor([[-1e-30]])) == 0.0
    assert norms._gram_trace(torch.tensor([[0.5]]), torch.tensor([[0.25]])) == 0.125


def test_frobenius_norm_sums_squares_of_chunks(monkeypatch):
    values = torch.tensor([3.0, 4.0, 12.0, 0.0, 84.0], dtype=torch.float32)  # sqrt(9+16+144+7056) = 85
    for chunk in (1, 2, 5, 1 << 22):
        monkeypatch.setattr(norms, "CHUNK_ELEMENTS", chunk)
        assert norms.frobenius_norm(values) == 85.0
        assert norms.frobenius_norm(values * 0.01) == pytest.approx(0.85, rel=1e-6)
    assert norms.frobenius_norm(torch.zeros(0)) == 0.0


def test_kron_norm_is_the_product():
    assert norms.kron_norm(3.0, 0.5) == 1.5
    left, right = torch.randn(3, 2, dtype=torch.float64), torch.randn(2, 4, dtype=torch.float64)
    kron = float(torch.linalg.matrix_norm(torch.kron(left, right)))
    assert norms.kron_norm(norms.frobenius_norm(left), norms.frobenius_norm(right)) == pytest.approx(kron)


def test_gram_error_bound_formula():
    left = torch.tensor([[4.0, -1.0], [-1.0, 1.0]])
    right = torch.tensor([[1.0, 2.0], [2.0, 9.0]])
    # c_left = (2, 1), c_right = (1, 3): c_left |R| c_left = 4 + 8 + 9 = 21, c_right |L| c_right = 4 + 6 + 9 = 19
    expected = 2.0 * 2.0**-24 * (math.sqrt(16) * 21 + math.sqrt(4) * 19)
    assert norms._gram_error_bound(left, right, 16, 4) == pytest.approx(expected, rel=1e-6)


def test_float32_factors_within_the_tolerance_keep_their_float32_grams():
    up, down = (t.float() for t in _factors(11, (40, 3), (3, 24)))
    reference = float(torch.linalg.matrix_norm(up.double() @ down.double()))
    assert norms.lora_norm(*record(up, down)) == pytest.approx(reference, rel=1e-4)
    assert float64_products() == []
    assert norms.GRAM_SQUARED_TOLERANCE == 1e-4


def test_the_float32_error_bound_is_taken_with_the_outer_lengths_in_order(monkeypatch):
    # Kept patch of a private name: the bound (m for up's Gram, n for down's) decides only whether
    # the result is formed again in float64, so m and n given the other way round change no norm
    # that a test can stage; the call's arguments are the narrowest witness.
    seen = []
    original = norms._gram_error_bound

    def recording(left, right, m, n):
        seen.append((m, n))
        return original(left, right, m, n)

    monkeypatch.setattr(norms, "_gram_error_bound", recording)
    up, down = (t.float() for t in _factors(11, (40, 3), (3, 24)))
    norms.lora_norm(up, down)
    assert seen == [(40, 24)]


def test_float32_results_outside_the_tolerance_are_recomputed_in_float64(monkeypatch):
    up, down = (t.float() for t in _factors(12, (30, 2), (2, 20)))
    norms.lora_norm(*record(up, down))
    assert float64_products() == []  # float32 Grams, well within the tolerance
    monkeypatch.setattr(norms, "GRAM_SQUARED_TOLERANCE", 0.0)
    reference = float(torch.linalg.matrix_norm(up.double() @ down.double()))
    assert norms.lora_norm(*record(up, down)) == pytest.approx(reference, rel=1e-12)
    assert float64_products() == [(2, 2), (2, 2)]


def test_a_factor_of_any_rank_is_flattened_after_its_first_dimension():
    up, down = _factors(13, (6, 3), (3, 7))
    assert norms.lora_norm(up.reshape(6, 3, 1), down) == pytest.approx(norms.lora_norm(up, down), rel=1e-12)
    assert norms.lora_norm(up, down.reshape(3, 7, 1)) == pytest.approx(norms.lora_norm(up, down), rel=1e-12)


def test_loha_keeps_float64_factors_in_float64():
    factors = _factors(14, (20, 3), (3, 30), (20, 3), (3, 30))
    assert norms.loha_norm(*factors) == pytest.approx(_loha_reference(*factors), rel=1e-13)
    single = [t.float() for t in factors]
    assert norms.loha_norm(*single) == pytest.approx(_loha_reference(*factors), rel=1e-4)


def test_frobenius_norm_of_float64_keeps_float64():
    tiny = 2.0**-40  # lost in float32
    assert norms.frobenius_norm(torch.tensor([1.0 + tiny], dtype=torch.float64)) == 1.0 + tiny



def test_float32_loha_grams_outside_the_tolerance_are_formed_again_in_float64(monkeypatch):
    factors = [t.float() for t in _factors(15, (16, 2), (2, 12), (16, 2), (2, 12))]
    norms.loha_norm(*record(*factors))
    assert float64_products() == []  # float32 Grams, well within the tolerance
    monkeypatch.setattr(norms, "GRAM_SQUARED_TOLERANCE", 0.0)
    got = norms.loha_norm(*record(*factors))
    assert float64_products() == [(4, 4), (4, 4)]
    assert got == pytest.approx(_loha_reference(*(t.double() for t in factors)), rel=1e-6)
    norms.loha_norm(*record(*(t.double() for t in factors)))
    assert shapes() == [(4, 4), (4, 4)]  # float64 factors: float64 Grams once, never again

"""LoRA norms at their stated limits: a float32 result whose error bound is exactly the tolerance
is kept, and LoHa row blocks hold at most CHUNK_ELEMENTS elements of the change."""

from __future__ import annotations

import pytest
import torch

from monitors.lora import norms
from tests.unit.recorded_products import float64_products, record
from tests.unit.test_lora_weights import Products  # records every matrix product's shape


def test_a_bound_exactly_at_the_tolerance_keeps_the_float32_result(monkeypatch):
    # Kept patch of a private name: no input puts the true bound exactly at the tolerance, so the
    # bound is set there (and at twice it) to prove that only "exceeds" forms the Grams again.
    # Which Grams were formed is read from the products the factors made, not from the norm.
    trace = norms._gram_trace
    monkeypatch.setattr(
        norms,
        "_gram_error_bound",
        lambda left, right, m, n: norms.GRAM_SQUARED_TOLERANCE * trace(left, right),
    )
    up, down = torch.ones(4, 2), torch.ones(2, 3)  # up @ down: 2 everywhere on 12 elements
    assert norms.lora_norm(*record(up, down)) == pytest.approx(48**0.5)
    assert float64_products() == []
    monkeypatch.setattr(
        norms,
        "_gram_error_bound",
        lambda left, right, m, n: 2 * norms.GRAM_SQUARED_TOLERANCE * trace(left, right),
    )
    assert norms.lora_norm(*record(up, down)) == pytest.approx(48**0.5)
    assert float64_products() == [(2, 2), (2, 2)]


def test_loha_row_blocks_hold_at_most_chunk_elements(monkeypatch):
    monkeypatch.setattr(norms, "CHUNK_ELEMENTS", 8)
    m, n, r = 6, 4, 3  # block path: (m + n) r^4 = 810 > m n 2r = 144
    w1a, w1b, w2a, w2b = (
        torch.randn(shape, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
        for i, shape in enumerate(((m, r), (r, n), (m, r), (r, n)))
    )
    reference = float(torch.linalg.matrix_norm((w1a @ w1b) * (w2a @ w2b)))
    Products.shapes = []
    got = norms.loha_norm(*(t.as_subclass(Products) for t in (w1a, w1b, w2a, w2b)))
    assert got == pytest.approx(reference, rel=1e-12)
    # 8 elements / 4 columns: blocks of 2 rows, two products per block
    assert Products.shapes == [(2, n)] * 6

"""LoRA norms from float32 Gram matrices (issue 14): within 1e-4 relative of float64 on real shapes
and dtypes, and float64 again where cancellation would break that (the error bound decides)."""

from __future__ import annotations

import pytest
import torch

from monitors.lora import norms
from tests.unit.recorded_products import float64_products, record

TOLERANCE = 1e-4


def _reference_lora(up, down) -> float:
    u = up.double().reshape(up.shape[0], -1)
    d = down.double().reshape(down.shape[0], -1)
    return float(torch.linalg.matrix_norm(u @ d))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize(
    ("m", "n", "rank"), [(320, 320, 32), (1280, 768, 32), (10240, 1280, 32), (640, 2560, 128)]
)
def test_float32_grams_stay_within_1e4_of_float64(dtype, m, n, rank):
    generator = torch.Generator().manual_seed(m + n + rank)
    up = (torch.randn(m, rank, generator=generator) * 0.01).to(dtype)
    down = (torch.randn(rank, n, generator=generator) * 0.01).to(dtype)
    got = norms.lora_norm(*record(up, down))
    assert got == pytest.approx(_reference_lora(up, down), rel=TOLERANCE)
    assert float64_products() == []  # the float32 path was good enough, and was taken


def test_trained_like_factors_with_correlated_columns_stay_within_1e4():
    generator = torch.Generator().manual_seed(1)
    base = torch.randn(1280, 4, generator=generator)
    mix = torch.randn(4, 32, generator=generator)
    up = (base @ mix + 0.05 * torch.randn(1280, 32, generator=generator)).half()  # low effective rank
    down = torch.randn(32, 1280, generator=generator).half()
    assert norms.lora_norm(up, down) == pytest.approx(_reference_lora(up, down), rel=TOLERANCE)


def test_cancellation_falls_back_to_float64():
    """up's two columns almost equal and down's rows opposite: up @ down is ~1e-3 of what the
    factors alone suggest, so its squared norm is ~1e-6 of the Gram terms: below float32 rounding."""
    generator = torch.Generator().manual_seed(2)
    column = torch.randn(2048, 1, generator=generator, dtype=torch.float64)
    up = torch.cat(
        [column, column + 1e-3 * torch.randn(2048, 1, generator=generator, dtype=torch.float64)], 1
    )
    row = torch.randn(1, 1024, generator=generator, dtype=torch.float64)
    down = torch.cat([row, -row])
    up32, down32 = up.float(), down.float()
    got = norms.lora_norm(*record(up32, down32))
    assert float64_products() == [(2, 2), (2, 2)]  # both Grams formed again in float64
    assert got == pytest.approx(_reference_lora(up32, down32), rel=TOLERANCE)


def test_squares_beyond_float32_range_are_summed_in_float64():
    big = torch.full((3,), 3e20, dtype=torch.bfloat16)  # squares overflow float32
    assert norms.frobenius_norm(big) == pytest.approx(float(torch.linalg.vector_norm(big.double())), rel=1e-6)
    up = torch.full((4, 1), 3e20, dtype=torch.float32)
    down = torch.full((1, 4), 1.0, dtype=torch.float32)
    assert norms.lora_norm(up, down) == pytest.approx(_reference_lora(up, down), rel=TOLERANCE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_plain_norm_of_a_large_weight_within_1e4(dtype):
    weight = (torch.randn(5_000_000, generator=torch.Generator().manual_seed(3)) * 0.02).to(dtype)
    assert norms.frobenius_norm(weight) == pytest.approx(
        float(torch.linalg.vector_norm(weight.double())), rel=TOLERANCE
    )


def test_loha_float32_grams_within_1e4():
    generator = torch.Generator().manual_seed(4)
    factors = [
        (torch.randn(shape, generator=generator) * 0.1).half()
        for shape in ((640, 8), (8, 640), (640, 8), (8, 640))
    ]
    a1, b1, a2, b2 = (t.double() for t in factors)
    reference = float(torch.linalg.matrix_norm((a1 @ b1) * (a2 @ b2)))
    assert norms.loha_norm(*factors) == pytest.approx(reference, rel=TOLERANCE)

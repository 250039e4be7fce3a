"""One patch entry with its unit-strength norm already known (a cached figure,
monitors/lora/entries.py): nothing computed, the cached norm scaled by the entry's strength, and
no norm where the patch type has none whatever the cache holds."""

from __future__ import annotations

import torch

from monitors.lora.entries import entry_facts, set_delta
from monitors.numeric.device_figures import figure_value

from .test_lora_norms import Adapter, rand


def lora(rank: int = 4, alpha: float = 2.0) -> Adapter:
    return Adapter("lora", (rand(8, rank, seed=1), rand(rank, 6, seed=2), torch.tensor(alpha)))


def row_with(entry, unit_norm):
    row, raw, reason, function = entry_facts(entry, unit_norm=unit_norm)
    set_delta(row, figure_value(raw), reason, function)
    return row, raw


def test_a_cached_unit_norm_is_scaled_by_the_strength():
    row, raw = row_with((0.5, lora(rank=4, alpha=2.0)), unit_norm=10.0)
    assert raw is not None and figure_value(raw) == 10.0
    assert row["effective_scale"] == 0.25  # 0.5 * 2 / 4
    assert row["delta_norm"] == 2.5
    assert row["delta_norm_unavailable"] is None
    assert row["linear"] is True


def test_a_cached_diff_norm_is_used_as_it_is():
    row, _raw = row_with((2.0, (rand(8, 6, seed=3),)), unit_norm=3.0)
    assert row["type"] == "diff"
    assert row["delta_norm"] == 6.0


def test_a_patch_type_without_a_norm_ignores_the_cache():
    oft = Adapter("oft", (rand(2, 4, 4, seed=4), None, torch.tensor(1.0)))
    row, raw = row_with((1.0, oft), unit_norm=10.0)
    assert raw is None
    assert row["delta_norm"] is None
    assert row["delta_norm_unavailable"] == "OFT: the change is a rotation of the base weight"
    dora = Adapter("lora", (rand(8, 4, seed=1), rand(4, 6, seed=2), None, None, rand(8, 1, seed=5)))
    row, raw = row_with((1.0, dora), unit_norm=10.0)
    assert raw is None
    assert row["delta_norm_unavailable"] == "DoRA: the change depends on the base weight"

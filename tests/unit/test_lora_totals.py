"""Totals of a side's rows (monitors/lora/totals.py): counts by type and reason, the change norm as
the root of summed squares over distinct weights, the relative change over the weights that have
both norms, blocks in name order, and the cap on listed keys."""

from __future__ import annotations

import math

from monitors.lora.totals import MAX_LISTED_KEYS, aggregate, by_block, summarise_rows


def row(key: str, delta: float | None = None, **extra) -> dict:
    """One patch row as entries/analysis build it (the fields totals read)."""
    base = {
        "key": key,
        "block": key.rsplit(".", 1)[0],
        "type": "lora",
        "strength": 1.0,
        "rank": 4,
        "alpha": 4.0,
        "delta_norm": delta,
        "delta_norm_unavailable": None if delta is not None else "no norm",
        "base_norm": None,
        "patch_bytes": 0,
        "patch_device": None,
    }
    base.update(extra)
    return base


def weight(key: str, delta: float | None, base: float | None, block: str | None = None, **extra) -> dict:
    relative = delta / base if delta is not None and base else None
    out = {"key": key, "block": block or key.rsplit(".", 1)[0], "delta_norm": delta, "base_norm": base}
    out["relative_change"] = relative
    out.update(extra)
    return out


def test_norms_are_the_root_of_summed_squares_and_the_ratio_covers_the_same_weights():
    weights = [weight("a.w", 3.0, 4.0), weight("b.w", 4.0, 3.0), weight("c.w", 12.0, None)]
    totals = aggregate([row("a.w", 3.0), row("b.w", 4.0), row("c.w", 12.0)], weights)
    assert totals["delta_norm"] == 13.0  # sqrt(9 + 16 + 144)
    assert totals["base_norm"] == 5.0  # c has no base norm: not in the denominator
    assert totals["relative_change"] == 1.0  # sqrt(9 + 16) / 5: c not in the numerator either
    assert totals["relative_change_partial"] is True
    assert totals["n_with_relative_change"] == 2
    assert totals["n_weights"] == 3
    assert totals["n_weights_without_delta_norm"] == 0
    assert totals["delta_norm_partial"] is False
    assert totals["max_relative_change"] == 4.0 / 3.0
    assert totals["max_relative_change_key"] == "b.w"
    assert totals["reasons_without_base_norm"] == {"no base weight looked up": 1}


def test_every_weight_measured_is_not_partial():
    weights = [weight("a.w", 6.0, 8.0), weight("b.w", 8.0, 6.0)]
    totals = aggregate([row("a.w", 6.0), row("b.w", 8.0)], weights)
    assert totals["relative_change"] == 1.0
    assert totals["relative_change_partial"] is False
    assert totals["reasons_without_base_norm"] == {}


def test_a_weight_without_a_change_norm_makes_the_total_partial():
    weights = [weight("a.w", 3.0, 4.0), weight("b.w", None, 2.0, base_norm_unavailable="never")]
    totals = aggregate([row("a.w", 3.0), row("b.w")], weights)
    assert totals["delta_norm"] == 3.0
    assert totals["delta_norm_partial"] is True
    assert totals["n_weights_without_delta_norm"] == 1
    assert totals["relative_change"] == 0.75
    assert totals["relative_change_partial"] is True
    assert totals["reasons_without_base_norm"] == {}


def test_no_weight_with_a_norm_leaves_every_norm_unknown():
    weights = [weight("a.w", None, None, base_norm_unavailable="the base weight is on the meta device")]
    totals = aggregate([row("a.w")], weights)
    assert totals["delta_norm"] is None
    assert totals["base_norm"] is None
    assert totals["relative_change"] is None
    assert totals["relative_change_partial"] is None
    assert totals["max_relative_change"] is None
    assert totals["max_relative_change_key"] is None
    assert totals["reasons_without_base_norm"] == {"the base weight is on the meta device": 1}


def test_nothing_patched_is_a_known_zero_change():
    totals = aggregate([], [])
    assert totals["delta_norm"] == 0.0
    assert totals["base_norm"] is None
    assert totals["relative_change"] is None
    assert totals["n_keys"] == 0
    assert totals["patch_bytes"] == 0


def test_a_zero_base_norm_gives_no_ratio():
    weights = [weight("a.w", 0.0, 0.0)]
    totals = aggregate([row("a.w", 0.0)], weights)
    assert totals["delta_norm"] == 0.0
    assert totals["base_norm"] == 0.0
    assert totals["relative_change"] is None
    assert totals["relative_change_partial"] is None
    assert totals["n_with_relative_change"] == 1


def test_counts_by_type_reason_and_the_sorted_distinct_figures():
    rows = [
        row("a.w", 1.0, type="lora", strength=0.5, rank=8, alpha=16.0),
        row(
            "a.w", None, type="oft", strength=1.0, rank=4, alpha=None, delta_norm_unavailable="OFT: rotation"
        ),
        row("b.w", 2.0, type="lora", strength=0.5, rank=None, alpha=1.0, applied=False),
        row(
            "c.w",
            None,
            type="glora",
            strength=None,
            delta_norm_unavailable="OFT: rotation",
            shape_mismatch="x",
        ),
    ]
    totals = aggregate(rows, [weight("a.w", None, 1.0), weight("b.w", 0.0, 1.0), weight("c.w", None, 1.0)])
    assert totals["n_keys"] == 3
    assert totals["n_entries"] == 4
    assert totals["n_by_type"] == {"lora": 2, "oft": 1, "glora": 1}
    assert totals["n_with_delta_norm"] == 2
    assert totals["n_without_delta_norm"] == 2
    assert totals["n_not_applied"] == 1  # a row without "applied" is not counted as not applied
    assert totals["n_shape_mismatches"] == 1
    assert totals["reasons_without_norm"] == {"OFT: rotation": 2}
    assert totals["strengths"] == [0.5, 1.0]
    assert totals["ranks"] == [4, 8]
    assert totals["alphas"] == [1.0, 4.0, 16.0]


def test_patch_bytes_in_total_and_per_device():
    rows = [
        row("a.w", 1.0, patch_bytes=100, patch_device="cuda:0"),
        row("b.w", 1.0, patch_bytes=50, patch_device="cpu"),
        row("c.w", 1.0, patch_bytes=25, patch_device="cuda:0"),
        row("d.w", 1.0, patch_bytes=7, patch_device=None),
    ]
    totals = aggregate(rows, [])
    assert totals["patch_bytes"] == 182
    assert totals["patch_bytes_by_device"] == {"cuda:0": 125, "cpu": 50}


def test_weights_from_rows_alone_one_applied_patch_per_weight():
    rows = [
        row("a.w", 3.0, base_norm=4.0),
        row("b.w", 5.0, base_norm=None, base_norm_unavailable="not looked up here"),
        row("c.w", 2.0, base_norm=8.0, applied=False),  # not applied: the weight's change is 0
    ]
    totals = aggregate(rows)
    assert totals["n_weights"] == 3
    assert totals["delta_norm"] == math.sqrt(9 + 25)
    assert totals["base_norm"] == math.sqrt(16 + 64)
    assert totals["relative_change"] == 3.0 / math.sqrt(80)
    assert totals["max_relative_change"] == 0.75
    assert totals["max_relative_change_key"] == "a.w"
    assert totals["reasons_without_base_norm"] == {"not looked up here": 1}
    assert totals["delta_norm_partial"] is False


def test_weights_from_rows_two_applied_patches_need_the_entries():
    rows = [row("a.w", 3.0, base_norm=4.0), row("a.w", 4.0, base_norm=4.0), row("b.w", 1.0, base_norm=2.0)]
    totals = aggregate(rows)
    assert totals["n_weights"] == 2
    assert totals["n_weights_without_delta_norm"] == 1
    assert totals["delta_norm_partial"] is True
    assert totals["delta_norm"] == 1.0
    assert totals["relative_change"] == 0.5
    blocks = by_block(rows)
    assert blocks["a"] == {
        "n_keys": 1,
        "delta_norm": None,
        "delta_norm_partial": True,
        "relative_change": None,
    }


def test_weights_from_rows_a_zero_or_missing_base_gives_no_weight_ratio():
    rows = [row("a.w", 3.0, base_norm=0.0), row("b.w", None, base_norm=2.0)]
    totals = aggregate(rows)
    assert totals["max_relative_change"] is None
    assert totals["n_with_relative_change"] == 1  # a.w: both norms, 0 included
    assert totals["relative_change"] is None  # over a base norm of 0


def test_blocks_in_name_order_with_their_own_norms():
    weights = [
        weight("z.w", 3.0, 4.0, block="z"),
        weight("a.w1", 6.0, 8.0, block="a"),
        weight("a.w2", 8.0, 6.0, block="a"),
        weight("m.w", None, 5.0, block="m"),
        weight("n.w", 2.0, None, block="n"),
    ]
    blocks = by_block([], weights)
    assert list(blocks) == ["a", "m", "n", "z"]
    assert blocks["a"] == {
        "n_keys": 2,
        "delta_norm": 10.0,
        "delta_norm_partial": False,
        "relative_change": 1.0,
    }
    assert blocks["z"] == {
        "n_keys": 1,
        "delta_norm": 3.0,
        "delta_norm_partial": False,
        "relative_change": 0.75,
    }
    assert blocks["m"] == {
        "n_keys": 1,
        "delta_norm": None,
        "delta_norm_partial": True,
        "relative_change": None,
    }
    assert blocks["n"] == {
        "n_keys": 1,
        "delta_norm": 2.0,
        "delta_norm_partial": False,
        "relative_change": None,
    }


def test_blocks_named_none_sort_by_their_text():
    unnamed = {**weight("y", 1.0, 1.0), "block": None}
    blocks = by_block([], [weight("x", 1.0, 1.0, block="b"), unnamed, weight("z", 1.0, 1.0, block="A")])
    assert list(blocks) == ["A", None, "b"]  # "A" < "None" < "b"


def test_listed_keys_are_capped_totals_cover_every_key():
    rows = [row(f"k{i}.w", 1.0) for i in range(5)]
    summary = summarise_rows(rows, max_listed=3)
    assert summary["keys"] == rows[:3]
    assert summary["keys_truncated"] is True
    assert summary["totals"]["n_keys"] == 5
    assert list(summary["by_block"]) == [f"k{i}" for i in range(5)]
    exact = summarise_rows(rows, max_listed=5)
    assert exact["keys"] == rows and exact["keys_truncated"] is False


def test_a_report_lists_at_most_a_thousand_keys_per_side():
    assert MAX_LISTED_KEYS == 1000
    rows = [row(f"k{i}.w", 1.0) for i in range(1001)]
    assert summarise_rows(rows[:1000])["keys_truncated"] is False
    summary = summarise_rows(rows)
    assert summary["keys_truncated"] is True
    assert len(summary["keys"]) == 1000

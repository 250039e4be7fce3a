"""LoRA patch analysis pinned with exact values (issue 18): patch classification and the tensors a
patch holds, GLoRA/OFT/BOFT ranks and alphas, applied or not, base norms of every patched weight,
totals and blocks with their counts, partial norms and relative changes."""

from types import SimpleNamespace

import pytest
import torch

import monitors.lora.analysis as analysis
from monitors.lora.analysis import (
    aggregate,
    analyse_entry,
    by_block,
    classify_patch,
    parent_chain,
    patch_rows,
    patch_tensors,
    summarise_rows,
)
from monitors.lora.side import analyse_side

from .test_lora_norms import Adapter, rand
from .test_lora_patches import Patcher, tiny_module


def entry(value, strength=1.0, strength_model=1.0, offset=None, function=None):
    return (strength, value, strength_model, offset, function)


def diff(*shape, fill=1.0):
    return ("diff", (torch.full(shape, fill),))


# -- what a patch is and what it holds ------------------------------------------------------------


def test_classify_patch_needs_name_and_weights_for_an_adapter():
    assert classify_patch(SimpleNamespace(name="lora")) == "unknown"
    assert classify_patch(SimpleNamespace(weights=())) == "unknown"
    assert classify_patch(SimpleNamespace(name="LoKr", weights=())) == "lokr"
    # a tuple of two with a name first, and of three: only ("name", tensors) is a typed patch
    assert classify_patch(("diff", torch.zeros(1), torch.zeros(1))) == "unknown"
    assert classify_patch((torch.zeros(1), torch.zeros(1))) == "unknown"
    assert classify_patch(("model_as_lora", (torch.zeros(1),))) == "model_as_lora"


def test_patch_tensors_of_each_form():
    t1, t2, t3 = torch.zeros(2), torch.zeros(3), torch.zeros(5)
    assert patch_tensors(Adapter("lora", (t1, None, 1.0, t2))) == [t1, t2]
    assert patch_tensors(SimpleNamespace(weights=(t1,))) == []  # no name: not an adapter
    assert patch_tensors(SimpleNamespace(name="lora")) == []
    # a merge list: (strength, patch) pairs, bare tensors and one-tuples
    merged = patch_tensors([(1.0, ("diff", (t1,))), t2, (t3,)])
    assert [t.numel() for t in merged] == [2, 3, 5]
    assert patch_tensors((t1,)) == [t1]
    assert patch_tensors(("diff", (t1, {"pad_weight": True}))) == [t1]
    assert patch_tensors(("diff", t1, t2)) == []
    assert patch_tensors(object()) == []


def test_patch_bytes_count_each_tensor_once():
    row = analyse_entry(entry([(1.0, ("diff", (torch.zeros(2, dtype=torch.float64),))), (torch.zeros(3),)]))
    assert row["type"] == "merge" and row["patch_bytes"] == 2 * 8 + 3 * 4 and row["patch_device"] == "cpu"
    assert analyse_entry(entry(object()))["patch_bytes"] == 0
    assert analyse_entry(entry(object()))["patch_device"] is None


def test_diff_forms_and_a_diff_without_a_tensor():
    assert analyse_entry(entry((torch.full((2, 2), 3.0),)))["delta_norm"] == pytest.approx(6.0)
    empty = analyse_entry(entry(("diff", ())))
    assert empty["delta_norm"] is None and empty["delta_norm_unavailable"] == "diff without a tensor"
    fake = analyse_entry(entry(("diff", (SimpleNamespace(shape=(2,)),))))
    assert fake["delta_norm"] is None and fake["delta_norm_unavailable"] == "diff without a tensor"
    assert fake["patch_bytes"] == 0


def test_glora_rank_in_either_layout():
    # new layout: b2 rows = b1 cols = a1 cols = a2 rows = r (3); the other sizes all differ
    new = (torch.zeros(5, 3), torch.zeros(3, 7), torch.zeros(6, 3), torch.zeros(3, 8), 2.0, None)
    row = analyse_entry(entry(Adapter("glora", new)))
    assert (row["type"], row["rank"], row["alpha"]) == ("glora", 3, 2.0)
    assert row["adapter_class"] == "Adapter" and row["scale"] is None
    # old layout: a1 [r, in] gives the rank
    old = (torch.zeros(4, 6), torch.zeros(2, 9), torch.zeros(7, 3), torch.zeros(5, 2), None, 1.5)
    row = analyse_entry(entry(Adapter("glora", old)))
    assert (row["rank"], row["alpha"]) == (4, None)


def test_oft_and_boft_rank_is_the_block_size_and_alpha_the_third_weight():
    oft = analyse_entry(entry(Adapter("oft", (torch.zeros(4, 3, 3), None, 0.5, 1.0))))
    assert (oft["rank"], oft["alpha"]) == (3, 0.5)
    boft = analyse_entry(entry(Adapter("boft", (torch.zeros(2, 5, 3, 3), None, 0.25, 1.0))))
    assert (boft["rank"], boft["alpha"]) == (3, 0.25)
    assert oft["rank_unavailable"] is None and oft["delta_norm"] is None


def test_rank_unavailable_only_for_lokr_with_two_full_factors():
    full = Adapter("lokr", (rand(2, 3), rand(4, 5), 1.0, None, None, None, None, None, None))
    row = analyse_entry(entry(full))
    assert row["rank"] is None
    assert row["rank_unavailable"] == "LoKr with two full factors: no factor has a rank"
    factored = Adapter("lokr", (rand(2, 3), None, 4.0, None, None, rand(4, 2), rand(2, 5), None, None))
    assert analyse_entry(entry(factored))["rank_unavailable"] is None
    assert analyse_entry(entry(diff(2, 2)))["rank_unavailable"] is None
    assert analyse_entry(entry(diff(2, 2)))["adapter_class"] is None


def test_function_and_base_weight_scale_make_the_change_non_linear():
    value = diff(2, 2)
    assert analyse_entry(entry(value))["linear"] is True
    assert analyse_entry(entry(value, function=abs))["linear"] is False
    assert analyse_entry(entry(value, strength_model=2.0))["linear"] is False
    assert analyse_entry(entry(("set", (torch.zeros(1),))))["linear"] is False


def test_not_applied_patches_change_nothing():
    up, down = torch.ones(4, 1), torch.ones(1, 3)
    lora = Adapter("lora", (up, down, None, None, None, None))
    fits = analyse_entry(entry(lora), weight_shape=(4, 3))
    assert fits["applied"] is True and fits["delta_norm"] == pytest.approx(12**0.5)
    wrong = analyse_entry(entry(lora), weight_shape=(4, 4))
    assert wrong["applied"] is False and wrong["delta_norm"] == 0.0
    assert wrong["shape_mismatch"] == "file makes [4, 3], model weight is [4, 4]"
    assert wrong["not_applied_reason"] == "shape mismatch: file makes [4, 3], model weight is [4, 4]"
    assert wrong["delta_norm_unavailable"] is None
    # an offset patch targets a slice: the whole weight's shape says nothing about it
    sliced = analyse_entry(entry(lora, offset=(0, 0, 4)), weight_shape=(8, 3))
    assert sliced["applied"] is True and sliced["shape_mismatch"] is None
    skipped = analyse_entry(entry(lora), weight_shape=(4, 3), not_patched="a buffer")
    assert skipped["applied"] is False and skipped["not_applied_reason"] == "a buffer"
    assert skipped["delta_norm"] == 0.0
    # not patched and unknown norm (set): still exactly no change
    unknown = analyse_entry(entry(("set", (torch.zeros(4, 3),))), not_patched="a buffer")
    assert unknown["delta_norm"] == 0.0 and unknown["delta_norm_unavailable"] is None


# -- rows with base norms -------------------------------------------------------------------------


def test_relative_change_by_hand():
    # a diff of ones on a 2 x 2 weight of twos: change 2 * strength, base 4
    weight = torch.full((2, 2), 2.0)
    (row,) = patch_rows({"m.w": [entry(diff(2, 2), strength=0.5)]}, {"m.w": weight}.get)
    assert (row["delta_norm"], row["base_norm"], row["relative_change"]) == (1.0, 4.0, 0.25)
    assert row["key"] == "m.w" and row["block"] == "m"
    (unknown,) = patch_rows({"m.w": [entry(("set", (weight,)))]}, {"m.w": weight}.get)
    assert unknown["base_norm"] == 4.0 and unknown["relative_change"] is None
    (zero,) = patch_rows({"m.w": [entry(diff(2, 2))]}, {"m.w": torch.zeros(2, 2)}.get)
    assert zero["base_norm"] == 0.0 and zero["relative_change"] is None


def test_rows_see_the_weight_shape_from_the_lookup():
    weight = torch.zeros(3, 3)
    (row,) = patch_rows({"w": [entry(diff(2, 2))]}, {"w": weight}.get)
    assert row["applied"] is False and row["shape_mismatch"] == "file [2, 2], model weight is [3, 3]"
    (no_shape,) = patch_rows({"w": [entry(diff(2, 2))]}, {"w": 1.5}.get)
    assert no_shape["applied"] is True
    assert no_shape["base_norm_unavailable"] == "base weight is a float (quantised or offloaded)"
    (no_lookup,) = patch_rows({"w": [entry(diff(2, 2))]})
    assert no_lookup["applied"] is True and no_lookup["base_norm"] is None
    assert no_lookup["base_norm_unavailable"] is None


def test_base_norm_unreadable_quantised_or_on_meta():
    def failing(key):
        raise KeyError(key)

    (row,) = patch_rows({"w": [entry(diff(2, 2))]}, failing)
    assert row["base_norm"] is None and row["base_norm_unavailable"] == "base weight unreadable: KeyError"
    meta = torch.empty(2, 2, device="meta")
    (row,) = patch_rows({"w": [entry(diff(2, 2))]}, {"w": meta}.get)
    assert row["base_norm_unavailable"] == "base weight is a Tensor (quantised or offloaded)"
    param = torch.nn.Parameter(torch.full((2, 2), 2.0))
    (row,) = patch_rows({"w": [entry(diff(2, 2))]}, {"w": param}.get)
    assert row["base_norm"] == 4.0


def test_base_norm_read_once_per_key():
    weight = torch.full((2, 2), 2.0)
    rows = patch_rows({"w": [entry(diff(2, 2)), entry(diff(2, 2), 2.0)]}, {"w": weight}.get)
    assert [r["base_norm"] for r in rows] == [4.0, 4.0]
    assert [r["relative_change"] for r in rows] == [0.5, 1.0]


def test_base_norm_of_the_backup_in_comfyuis_tuple_form():
    base = Patcher(tiny_module())
    key = "diffusion_model.out.weight"
    after = base.clone()
    after.add_patches({key: diff(8, 16)}, 1.0)
    after.backup = {key: (torch.full((8, 16), 0.5), False)}  # (weight, inplace_update)
    (row,) = analyse_side("model", after)["hops"][0]["keys"]
    assert row["base_norm"] == pytest.approx(0.5 * 128**0.5)


def test_no_read_budget_on_base_norms_every_weight_is_measured():
    # expanded tensors: more than the former 2^27-element budget without 512 MiB of memory
    key = "diffusion_model.out.weight"
    n = (1 << 27) + 1
    base = Patcher(tiny_module())
    after = base.clone()
    after.add_patches({key: diff(8, 16)}, 1.0)
    after.backup = {key: (torch.ones(1).expand(n), False)}
    (row,) = analyse_side("model", after)["hops"][0]["keys"]
    assert (row["base_norm"], row["base_norm_unavailable"]) == (pytest.approx(n**0.5), None)


def test_parent_chain_limit():
    head = SimpleNamespace(parent=None)
    for _ in range(100):
        head = SimpleNamespace(parent=head)
    assert len(parent_chain(head)) == 65  # MAX_HOPS = 64 hops
    assert len(parent_chain(head, max_hops=3)) == 4


# -- totals and blocks ----------------------------------------------------------------------------


def make_row(key, delta, base=None, type_="diff", applied=True, **extra):
    return {
        "key": key,
        "block": analysis.block_of(key),
        "type": type_,
        "delta_norm": delta,
        "delta_norm_unavailable": None if delta is not None else "why",
        "base_norm": base,
        "relative_change": delta / base if delta is not None and base else None,
        "applied": applied,
        "shape_mismatch": None,
        "strength": 1.0,
        "rank": None,
        "alpha": None,
        "patch_bytes": 0,
        "patch_device": None,
        **extra,
    }


def test_aggregate_counts_by_hand():
    rows = [
        make_row("a.0.w", 3.0, base=4.0, rank=2, alpha=1.0, patch_device="cpu", patch_bytes=10),
        make_row("a.1.w", 4.0, base=12.0, rank=4, alpha=None, patch_device="cpu", patch_bytes=5),
        make_row("b.w", None, type_="set", patch_device="meta", patch_bytes=7),
        make_row("c.w", 0.0, applied=False, shape_mismatch="file [2], model weight is [3]"),
    ]
    totals = aggregate(rows)
    assert totals["n_keys"] == 4 and totals["n_entries"] == 4
    assert totals["n_by_type"] == {"diff": 3, "set": 1}
    assert (totals["n_with_delta_norm"], totals["n_without_delta_norm"]) == (3, 1)
    assert (totals["n_not_applied"], totals["n_shape_mismatches"]) == (1, 1)
    assert totals["reasons_without_norm"] == {"why": 1}
    assert totals["ranks"] == [2, 4] and totals["alphas"] == [1.0] and totals["strengths"] == [1.0]
    assert totals["patch_bytes"] == 22 and totals["patch_bytes_by_device"] == {"cpu": 15, "meta": 7}
    # per weight without weight rows: one applied patch is its own change, none applied is 0
    assert (totals["n_weights"], totals["n_weights_without_delta_norm"]) == (4, 1)
    assert totals["delta_norm_partial"] is True
    assert totals["delta_norm"] == pytest.approx(5.0)  # sqrt(3^2 + 4^2 + 0^2) over the known ones
    assert totals["n_with_relative_change"] == 2
    assert totals["base_norm"] == pytest.approx(160**0.5)
    assert totals["relative_change"] == pytest.approx(5.0 / 160**0.5)
    assert totals["max_relative_change"] == 0.75 and totals["max_relative_change_key"] == "a.0.w"


def test_aggregate_when_no_weight_has_a_norm():
    totals = aggregate([make_row("b.w", None, type_="set")])
    assert totals["delta_norm"] is None and totals["base_norm"] is None
    assert totals["relative_change"] is None and totals["max_relative_change"] is None


def test_several_patches_on_one_weight_need_weight_rows():
    rows = [make_row("a.w", 3.0, base=4.0), make_row("a.w", 4.0, base=4.0), make_row("b.w", 1.0, base=2.0)]
    totals = aggregate(rows)
    # without the entries no inner product: a.w unknown, b.w alone
    assert totals["n_weights"] == 2 and totals["n_weights_without_delta_norm"] == 1
    assert totals["delta_norm"] == 1.0 and totals["relative_change"] == 0.5
    weights = [
        {"key": "a.w", "block": "a", "delta_norm": 7.0, "base_norm": 4.0, "relative_change": 1.75},
        {"key": "b.w", "block": "b", "delta_norm": 1.0, "base_norm": 2.0, "relative_change": 0.5},
    ]
    with_weights = aggregate(rows, weights)
    assert (
        with_weights["delta_norm"] == pytest.approx(50**0.5) and with_weights["delta_norm_partial"] is False
    )
    assert with_weights["max_relative_change_key"] == "a.w"
    # rows of entries that are not applied, and rows without an `applied` field (applied)
    none_applied = aggregate([make_row("a.w", 0.0, applied=False), make_row("a.w", 0.0, applied=False)])
    assert none_applied["delta_norm"] == 0.0 and none_applied["delta_norm_partial"] is False
    legacy = make_row("a.w", 2.0, base=8.0)
    del legacy["applied"]
    one = aggregate([legacy, make_row("a.w", 0.0, applied=False)])
    assert one["delta_norm"] == 2.0 and one["relative_change"] == 0.25 and one["n_not_applied"] == 1


def test_by_block_by_hand():
    rows = [
        make_row("b.0.x.w", 3.0, base=4.0),
        make_row("b.0.y.w", 4.0, base=None),
        make_row("a.1.z.w", None),
        make_row("a.1.v.w", 1.0, base=1.0),
    ]
    blocks = by_block(rows)
    assert list(blocks) == ["a.1", "b.0"]
    assert blocks["b.0"] == {
        "n_keys": 2,
        "delta_norm": 5.0,
        "delta_norm_partial": False,
        "relative_change": 0.75,
    }
    assert blocks["a.1"] == {
        "n_keys": 2,
        "delta_norm": 1.0,
        "delta_norm_partial": True,
        "relative_change": 1.0,
    }
    # weight rows given: their figures, not the rows'
    weights = [{"key": "b.0.x.w", "block": "b.0", "delta_norm": 8.0, "base_norm": 2.0}]
    assert by_block(rows, weights) == {
        "b.0": {"n_keys": 1, "delta_norm": 8.0, "delta_norm_partial": False, "relative_change": 4.0}
    }
    # blocks in name order, even where a key of the later block sorts first ("m.0.w" < "m.weight")
    assert list(by_block([make_row("m.weight", 1.0), make_row("m.0.weight", 1.0)])) == ["m", "m.0"]
    unknown = by_block([make_row("c.w", None)])["c"]
    assert unknown["delta_norm"] is None and unknown["relative_change"] is None
    zero_base = by_block([make_row("c.w", 1.0, base=0.0)])["c"]
    assert zero_base["relative_change"] is None


def test_summarise_rows_lists_1000_keys():
    rows = [make_row(f"k.{i}.w", 1.0) for i in range(1001)]
    summary = summarise_rows(rows)
    assert len(summary["keys"]) == 1000 and summary["keys_truncated"] is True
    assert summary["totals"]["n_entries"] == 1001 and summary["totals"]["delta_norm"] == pytest.approx(
        1001**0.5
    )
    assert len(summary["by_block"]) == 1001
    exact = summarise_rows(rows[:1000])
    assert len(exact["keys"]) == 1000 and exact["keys_truncated"] is False
    assert summarise_rows(rows[:3], max_listed=2)["keys"] == rows[:2]


def test_relative_change_divides_the_same_weights_and_says_when_it_is_partial():
    """Issue 26, point 4: a weight without a base norm leaves the numerator too, and says why."""
    weights = [
        {"key": "a.w", "block": "a", "delta_norm": 3.0, "base_norm": 4.0, "relative_change": 0.75},
        {"key": "b.w", "block": "b", "delta_norm": 0.0, "base_norm": 0.0, "relative_change": None},
        {
            "key": "c.w",
            "block": "c",
            "delta_norm": 12.0,
            "base_norm": None,
            "base_norm_unavailable": "base weight is a QuantizedTensor (quantised or offloaded)",
            "relative_change": None,
        },
    ]
    rows = [make_row(w["key"], w["delta_norm"], base=w["base_norm"]) for w in weights]
    totals = aggregate(rows, weights)
    assert totals["delta_norm"] == pytest.approx(153**0.5)  # every weight with a change norm
    assert totals["relative_change"] == pytest.approx(3.0 / 4.0)  # a.w and b.w (a zero base counts)
    assert totals["relative_change_partial"] is True and totals["n_with_relative_change"] == 2
    assert totals["reasons_without_base_norm"] == {
        "base weight is a QuantizedTensor (quantised or offloaded)": 1
    }
    whole = aggregate(rows[:2], weights[:2])
    assert whole["relative_change_partial"] is False and whole["relative_change"] == pytest.approx(0.75)
    nothing = aggregate(rows[2:], weights[2:])
    assert nothing["relative_change"] is None and nothing["relative_change_partial"] is None


def test_a_partial_relative_change_is_a_finding_and_in_the_summary():
    from monitors.lora.report import build_lora_step

    base = Patcher(tiny_module())
    after = base.clone()
    after.add_patches(
        {"diffusion_model.out.weight": diff(8, 16), "diffusion_model.blocks.0.weight": diff(24, 16)}
    )
    after.backup = {"diffusion_model.out.weight": (torch.empty(8, 16, device="meta"), False)}  # offloaded
    step = build_lora_step("9", {}, after)
    assert step.summary["model_relative_change_partial"] is True
    assert step.summary["model_n_weights_relative_change"] == 1
    (finding,) = [f for f in step.findings if f.code == "lora_relative_change_partial"]
    assert "covers 1 of 2 patched weights" in finding.message and "quantised or offloaded" in finding.message
    weights = {w["key"]: w for w in step.details["model"]["overall"]["weights"]}
    assert weights["diffusion_model.out.weight"]["base_norm_unavailable"].startswith("base weight is a")

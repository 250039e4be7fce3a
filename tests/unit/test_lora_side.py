"""One side of a LoRA step pinned with exact counts and norms: listing limits across hops, patch
order over all hops, identities, state-dict figures and their unknown reasons (issue 18)."""

from types import SimpleNamespace

import pytest
import torch

import monitors.lora.side as lora_side
from monitors.lora.side import (
    add_weight_figures,
    analyse_side,
    identity_changes,
    not_patched_rule,
    patcher_of,
    placement_changes,
    state_dicts,
    weight_modifications,
)

from .test_lora_patches import WEIGHTS, Patcher, stacked, tiny_module

KEY = "diffusion_model.out.weight"


def calculate(entries, weight, key):
    """ComfyUI's order of application: each entry on the result of the previous (diff adds, set replaces)."""
    for strength, value, *_ in entries:
        tensor = value[1][0]
        weight = tensor.clone() if value[0] == "set" else weight + strength * tensor
    return weight


def norm(t) -> float:
    return float(torch.linalg.vector_norm(t.double()))


def test_patcher_of_each_kind():
    clip = SimpleNamespace(patcher="p")
    assert patcher_of("model", clip) is clip
    assert patcher_of("clip", clip) == "p"
    assert patcher_of("clip", object()) is None


def test_keys_listed_once_across_hops(monkeypatch):
    monkeypatch.setattr(lora_side, "MAX_LISTED_KEYS", 3)
    *_, second, _, _ = stacked()
    side = analyse_side("model", second)
    # hops add 2, 0 and 3 rows: the budget of 3 shows 2, 0 and 1 of them
    assert [len(h["keys"]) for h in side["hops"]] == [2, 0, 1]
    assert [h["keys_truncated"] for h in side["hops"]] == [False, False, True]
    assert side["overall"]["weights_truncated"] is False and len(side["overall"]["weights"]) == 3
    monkeypatch.setattr(lora_side, "MAX_LISTED_KEYS", 2)
    overall = analyse_side("model", second)["overall"]
    assert overall["weights_truncated"] is True
    assert [w["key"] for w in overall["weights"]] == sorted(WEIGHTS)[:2]
    # the totals still cover every weight
    assert overall["totals"]["n_weights"] == 3


def test_hop_counts_and_uuids():
    base, first, second, *_ = stacked()
    side = analyse_side("model", second)
    hops = side["hops"]
    assert [h["index"] for h in hops] == [0, 1, 2]
    assert [h["n_entries_added"] for h in hops] == [2, 0, 3]
    assert [h["n_entries_removed"] for h in hops] == [0, 0, 0]
    assert [h["patches_uuid_changed"] for h in hops] == [True, False, True]
    assert hops[0]["after_object_id"] == id(second) and hops[2]["before_object_id"] == id(base)
    assert hops[0]["after_patches_uuid"] == str(second.patches_uuid)
    assert side["baseline"]["object_id"] == id(base) and side["baseline"]["kind"] == "model"
    assert side["after"]["object_id"] == id(second)


def test_overall_change_applies_every_hop_in_patch_order():
    # the first loader adds a diff, the second replaces the weight (set): the weight ends as the
    # set's tensor, whatever the diff did, so the change is target - W (not target + diff - W)
    base = Patcher(tiny_module())
    weight = base.model.state_dict()[KEY]
    diff, target = torch.full((8, 16), 0.5), torch.full((8, 16), 2.0)
    first = base.clone()
    first.add_patches({KEY: ("diff", (diff,))}, 1.0)
    second = first.clone()
    second.add_patches({KEY: ("set", (target,))}, 1.0)
    side = analyse_side("model", second, calculate=calculate)
    (overall,) = side["overall"]["weights"]
    assert overall["delta_norm"] == pytest.approx(norm(target.double() - weight.double()), rel=1e-6)
    assert overall["n_entries"] == 2 and overall["applied"] is True
    # each hop alone: the set's and the diff's own change (0.5 everywhere on 128 elements)
    (set_row,) = side["hops"][0]["keys"]
    (diff_row,) = side["hops"][1]["keys"]
    assert set_row["type"] == "set" and diff_row["type"] == "diff"
    assert diff_row["delta_norm"] == pytest.approx(0.5 * 128**0.5)
    assert side["overall"]["totals"]["delta_norm"] == pytest.approx(overall["delta_norm"])


def test_an_entry_added_then_removed_still_counts_where_it_was_added():
    base = Patcher(tiny_module())
    first = base.clone()
    first.add_patches({KEY: ("diff", (torch.ones(8, 16),))}, 0.5)
    second = first.clone()
    second.patches[KEY] = []  # a node that drops the patches again
    side = analyse_side("model", second)
    assert [h["n_entries_removed"] for h in side["hops"]] == [1, 0]
    assert [h["n_entries_added"] for h in side["hops"]] == [0, 1]
    (weight,) = side["overall"]["weights"]
    assert weight["n_entries"] == 1 and weight["delta_norm"] == pytest.approx(0.5 * 128**0.5)
    assert weight["n_patches"] == 0 and weight["n_patches_before"] == 0


def test_without_base_norms_nothing_is_read():
    *_, second, _, _ = stacked()
    side = analyse_side("model", second, base_norms=False)
    rows = [r for h in side["hops"] for r in h["keys"]]
    assert all(r["base_norm"] is None and r["relative_change"] is None for r in rows)
    assert side["overall"]["totals"]["relative_change"] is None
    assert side["overall"]["totals"]["delta_norm"] > 0


def test_not_patched_rule_where_the_patcher_has_comfyuis_loader():
    plain = Patcher(tiny_module())
    assert not_patched_rule(plain) is None
    plain._load_list = lambda: []
    rule = not_patched_rule(plain)
    assert rule("diffusion_model.out.weight") is None
    assert rule("diffusion_model.out.missing") == "not a parameter: ComfyUI never patches it"
    plain._load_list = "not callable"
    assert not_patched_rule(plain) is None


def test_keys_the_loader_never_patches_are_not_applied():
    base = Patcher(tiny_module())
    base._load_list = lambda: []
    base.model.diffusion_model.out.register_buffer("scale", torch.ones(8))
    after = base.clone()
    after._load_list = base._load_list
    after.patches["diffusion_model.out.scale"] = [(1.0, ("diff", (torch.ones(8),)), 1.0, None, None)]
    after.patches[KEY] = [(1.0, ("diff", (torch.ones(8, 16),)), 1.0, None, None)]
    side = analyse_side("model", after)
    rows = {r["key"]: r for r in side["hops"][0]["keys"]}
    assert rows["diffusion_model.out.scale"]["applied"] is False
    assert (
        rows["diffusion_model.out.scale"]["not_applied_reason"] == "not a parameter: ComfyUI never patches it"
    )
    assert rows[KEY]["applied"] is True
    assert side["overall"]["totals"]["delta_norm"] == pytest.approx(128**0.5)


def test_identity_of_a_clone_and_of_unrelated_patchers():
    base, first, second, *_ = stacked()
    same = identity_changes("model", first, None, first, first, 0)
    assert same["same_object"] is True and same["cloned"] is False and same["uuid_changed"] is False
    assert same["class_changed"] is False and same["module_shared"] is True
    clone = identity_changes("model", second, None, second, base, 3)
    assert clone["cloned"] is True and clone["same_object"] is False
    assert (clone["n_patch_keys_added"], clone["n_patch_keys_removed"], clone["n_entries_added"]) == (3, 0, 5)
    reverse = identity_changes("model", base, second, base, second, 1)
    assert reverse["cloned"] is False
    assert (reverse["n_patch_keys_added"], reverse["n_patch_keys_removed"]) == (0, 3)
    assert reverse["model_object_id_before"] == id(second)

    class Other(Patcher):
        pass

    other = Other(tiny_module())
    other.patches_uuid = None
    foreign = identity_changes("model", other, None, other, base, 0)
    assert foreign["class_changed"] is True and foreign["module_shared"] is False
    assert foreign["class_before"] == "Patcher" and foreign["class_after"] == "Other"
    assert foreign["patches_uuid_after"] is None and foreign["uuid_changed"] is True
    assert foreign["n_patches_after"] == 0
    assert identity_changes("model", other, None, SimpleNamespace(), base, 0)["n_patches_after"] is None


def test_state_dicts_read_once_when_the_module_is_shared():
    base, first, *_ = stacked()
    (before, before_why), (after, after_why) = state_dicts(base, first)
    assert before is after and before_why is after_why is None
    other = Patcher(tiny_module())
    (before, _), (after, _) = state_dicts(other, first)
    assert before is not after and set(before) == set(after)

    class Broken(torch.nn.Module):
        def state_dict(self, *args, **kwargs):
            raise RuntimeError("offloaded")

    broken = SimpleNamespace(model=Broken())
    assert state_dicts(broken, first)[0] == (None, "state_dict unreadable: RuntimeError: offloaded")
    assert state_dicts(SimpleNamespace(model=None), first)[0] == (None, "NoneType has no state_dict")


def test_weight_figures_say_why_a_shape_is_unknown():
    base, first, *_ = stacked()
    rows = [{"key": KEY}, {"key": "nowhere.weight"}]
    states = state_dicts(base, first)
    add_weight_figures(rows, states, base, first)
    assert rows[0]["shape_before"] == rows[0]["shape_after"] == [8, 16]
    assert rows[0]["shape_unknown_reason"] is None
    assert (rows[0]["n_patches_before"], rows[0]["n_patches"]) == (0, 1)
    assert rows[1]["shape_before"] is None and rows[1]["n_patches"] == 0
    assert rows[1]["shape_unknown_reason"] == "no tensor under this key in the state dict"
    # one side without a state dict: its reason, for every row
    for one_sided, why in (
        (((None, "before why"), states[1]), "before why"),
        ((states[0], (None, "after why")), "after why"),
    ):
        rows = [{"key": KEY}]
        add_weight_figures(rows, one_sided, base, first)
        assert rows[0]["shape_unknown_reason"] == why
    # a key whose value has no shape
    rows = [{"key": KEY}]
    add_weight_figures(rows, (({KEY: 1.0}, None), states[1]), base, first)
    assert rows[0]["shape_before"] is None and rows[0]["shape_after"] == [8, 16]


def test_weight_modifications_counts_and_limits(monkeypatch):
    base, first, *_ = stacked()
    shared = weight_modifications(base, first, {f"k{i}" for i in range(201)})
    assert shared["modified"]["count"] == 201 and len(shared["modified"]["keys"]) == 200
    assert shared["modified"]["truncated"] is True
    assert shared["modified"]["keys"][:2] == ["k0", "k1"]
    exactly = weight_modifications(base, first, {f"k{i}" for i in range(200)})["modified"]
    assert exactly["count"] == 200 and exactly["truncated"] is False
    assert shared["module_shared"] is True and shared["n_state_dict_keys_before"] == 6
    assert all(shared[f]["count"] == 0 for f in ("added", "removed", "shape_changed", "storage_changed"))
    # two modules: removed keys, a shape change, storages compared by pointer
    before, after = Patcher(tiny_module()), Patcher(tiny_module())
    after.model.diffusion_model.out = torch.nn.Linear(16, 4)
    del before.model.diffusion_model.blocks[1]
    result = weight_modifications(before, after, set())
    assert result["removed"]["keys"] == []
    assert result["added"]["keys"] == ["diffusion_model.blocks.1.bias", "diffusion_model.blocks.1.weight"]
    assert result["shape_changed"]["keys"] == ["diffusion_model.out.bias", "diffusion_model.out.weight"]
    assert result["dtype_changed"]["count"] == 0 and result["device_changed"]["count"] == 0
    assert result["storage_changed"]["count"] == 4
    assert result["modified"]["count"] == 4
    assert weight_modifications(after, before, set())["removed"]["count"] == 2
    # one module on the meta device: no storage pointers to compare, the others still are
    meta = Patcher(tiny_module())
    meta.model.diffusion_model.out.to("meta")
    on_meta = weight_modifications(Patcher(tiny_module()), meta, set())
    assert on_meta["device_changed"]["keys"] == ["diffusion_model.out.bias", "diffusion_model.out.weight"]
    assert on_meta["storage_changed"]["count"] == 6
    # an unreadable side: nothing compared, the reason given
    unreadable = weight_modifications(SimpleNamespace(model=None), after, {"x"})
    assert unreadable["n_state_dict_keys_before"] is None and unreadable["modified"]["keys"] == ["x"]
    assert unreadable["unknown_reasons"] == {"n_state_dict_keys_before": "NoneType has no state_dict"}
    after_unreadable = weight_modifications(before, SimpleNamespace(model=None), set())
    assert after_unreadable["unknown_reasons"] == {"n_state_dict_keys_after": "NoneType has no state_dict"}
    assert after_unreadable["n_state_dict_keys_after"] is None
    assert after_unreadable["n_state_dict_keys_before"] == 4
    assert after_unreadable["added"]["count"] == 0


def test_placement_changes_compare_each_field():
    same = {"device": "cpu", "dtype": "float16", "size_bytes": 10}
    assert placement_changes(same, dict(same)) == {}
    assert placement_changes(same, {**same, "size_bytes": 12}) == {"size_bytes": {"before": 10, "after": 12}}
    assert placement_changes({}, {"weights_patched": True}) == {
        "weights_patched": {"before": None, "after": True}
    }
    assert placement_changes({"other": 1}, {"other": 2}) == {}


def test_clip_baseline_describes_the_clip_given_or_the_oldest_patcher():
    base = Patcher(tiny_module())
    clip = SimpleNamespace(patcher=base.clone(), cond_stage_model=base.model, tokenizer=None)
    before = SimpleNamespace(patcher=base, cond_stage_model=base.model, tokenizer=None)
    explicit = analyse_side("clip", clip, before=before)
    assert explicit["mode"] == "explicit" and explicit["baseline"]["kind"] == "clip"
    assert explicit["baseline"]["object_id"] == id(before)
    walked = analyse_side("clip", clip)
    assert walked["baseline"]["kind"] == "clip_patcher" and walked["baseline"]["object_id"] == id(base)
    model_side = analyse_side("model", clip.patcher, before=base)
    assert model_side["baseline"]["kind"] == "model" and model_side["after"]["kind"] == "model"


def test_a_side_without_patches_is_not_analysed():
    result = analyse_side("model", SimpleNamespace(patches=None))
    assert result["analysed"] is True  # a patches attribute, even empty, is analysable
    nothing = analyse_side("clip", SimpleNamespace(patcher=None))
    assert nothing == {"kind": "clip", "analysed": False, "reason": "SimpleNamespace has no patches"}

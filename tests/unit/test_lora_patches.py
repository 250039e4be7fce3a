"""Patch history of ModelPatcher-like objects: hops, per-key rows, blocks, totals, comparisons."""

import gc
import json
import uuid
import weakref
from types import SimpleNamespace

import pytest
import torch

from monitors.lora.analysis import (
    added_entries,
    aggregate,
    block_of,
    classify_patch,
    parent_chain,
    patch_rows,
)
from monitors.lora.side import analyse_side, placement_changes, weight_modifications
from monitors.report import to_jsonable

from .test_lora_norms import Adapter, rand


class Patcher:
    """The ModelPatcher bookkeeping the analysers read (notes 2): clone shares entries."""

    def __init__(self, model):
        self.model = model
        self.patches = {}
        self.patches_uuid = uuid.uuid4()
        self.parent = None
        self.backup = {}
        self.load_device = self.offload_device = torch.device("cpu")

    def clone(self):
        n = Patcher(self.model)
        n.patches = {k: v[:] for k, v in self.patches.items()}
        n.patches_uuid = self.patches_uuid
        n.parent = self
        n.backup = self.backup
        return n

    def add_patches(self, patches, strength_patch=1.0, strength_model=1.0):
        state = self.model.state_dict()
        added = []
        for key, value in patches.items():
            if key in state:
                self.patches.setdefault(key, []).append((strength_patch, value, strength_model, None, None))
                added.append(key)
        self.patches_uuid = uuid.uuid4()
        return added


def tiny_module():
    torch.manual_seed(0)
    root = torch.nn.Module()
    root.diffusion_model = torch.nn.Module()
    root.diffusion_model.blocks = torch.nn.ModuleList([torch.nn.Linear(16, 24), torch.nn.Linear(24, 16)])
    root.diffusion_model.out = torch.nn.Linear(16, 8)
    return root


WEIGHTS = {
    "diffusion_model.blocks.0.weight": (24, 16),
    "diffusion_model.blocks.1.weight": (16, 24),
    "diffusion_model.out.weight": (8, 16),
}


def lora_patches(rank, seed, alpha=None, keys=WEIGHTS):
    return {
        key: Adapter(
            "lora", (rand(m, rank, seed=seed + i), rand(rank, n, seed=seed + 50 + i), alpha, None, None, None)
        )
        for i, (key, (m, n)) in enumerate(keys.items())
    }


def materialised_change(patches, strength, key):
    up, down, alpha, *_ = patches[key].weights
    scale = alpha / down.shape[0] if alpha is not None else 1.0
    return strength * scale * (up.double() @ down.double())


def stacked():
    base = Patcher(tiny_module())
    first_patches, second_patches = lora_patches(4, 1, alpha=2.0), lora_patches(2, 7)
    first = base.clone()
    first.add_patches(first_patches, 0.8)
    passthrough = first.clone()  # e.g. a ModelSampling node: same patches, same UUID
    second = passthrough.clone()
    second.add_patches({k: v for k, v in second_patches.items() if "out" not in k}, -0.5)
    return base, first, second, first_patches, second_patches


def test_classify_patch():
    assert classify_patch(Adapter("LoRA", ())) == "lora"
    assert classify_patch(("diff", (torch.zeros(1),))) == "diff"
    assert classify_patch((torch.zeros(1),)) == "diff"
    assert classify_patch(("set", (torch.zeros(1),))) == "set"
    assert classify_patch(("bogus", ())) == "unknown"
    assert classify_patch([]) == "merge"


def test_block_of():
    assert block_of("diffusion_model.input_blocks.1.1.proj.weight") == "diffusion_model.input_blocks.1"
    assert block_of("clip_l.transformer.text_model.encoder.layers.3.mlp.fc1.weight") == (
        "clip_l.transformer.text_model.encoder.layers.3"
    )
    assert block_of("diffusion_model.patch_embedding.weight") == "diffusion_model.patch_embedding"
    assert block_of("weight") == "weight"


def test_added_entries_by_identity_and_parent_chain():
    base, first, second, *_ = stacked()
    chain = parent_chain(second)
    assert [p is q for p, q in zip(chain, [second, second.parent, first, base], strict=True)] == [True] * 4
    added = added_entries(second.patches, second.parent.patches)
    assert set(added) == {"diffusion_model.blocks.0.weight", "diffusion_model.blocks.1.weight"}
    assert all(len(v) == 1 for v in added.values())
    assert added_entries(second.parent.patches, first.patches) == {}
    assert len(parent_chain(second, max_hops=1)) == 2


def test_parent_chain_stops_on_a_cycle():
    a, b = SimpleNamespace(parent=None), SimpleNamespace(parent=None)
    a.parent, b.parent = b, a
    assert len(parent_chain(a)) == 2


def test_side_walks_one_hop_per_clone_with_exact_norms():
    base, first, second, first_patches, second_patches = stacked()
    side = analyse_side("model", second)
    assert side["mode"] == "parent_chain" and side["analysed"]
    hops = side["hops"]
    assert [h["n_patch_keys_added"] for h in hops] == [2, 0, 3]
    assert [h["patches_uuid_changed"] for h in hops] == [True, False, True]
    assert side["baseline"]["object_id"] == id(base)
    state = base.model.state_dict()
    for hop, patches, strength in ((hops[0], second_patches, -0.5), (hops[2], first_patches, 0.8)):
        for row in hop["keys"]:
            change = materialised_change(patches, strength, row["key"])
            assert row["delta_norm"] == pytest.approx(float(torch.linalg.vector_norm(change)), rel=1e-4)
            base_norm = float(torch.linalg.vector_norm(state[row["key"]].double()))
            assert row["base_norm"] == pytest.approx(base_norm, rel=1e-6)
            assert row["relative_change"] == pytest.approx(row["delta_norm"] / base_norm)
        assert hop["totals"]["strengths"] == [strength]
    overall = side["overall"]["totals"]
    assert overall["n_entries"] == 5 and overall["n_keys"] == 3
    # per weight the norm of the summed change (two LoRAs share two weights), not a root of
    # summed squares of the patches; each weight's base norm counted once
    summed = {}
    for patches, strength, keys in ((first_patches, 0.8, WEIGHTS), (second_patches, -0.5, list(WEIGHTS)[:2])):
        for key in keys:
            summed[key] = summed.get(key, 0) + materialised_change(patches, strength, key)
    exact = sum(float(torch.linalg.vector_norm(c)) ** 2 for c in summed.values()) ** 0.5
    # 1e-6: single-patch weights take float32 Gram matrices (issue 14: within 1e-4 of float64)
    assert overall["delta_norm"] == pytest.approx(exact, rel=1e-6)
    base_total = sum(float(torch.linalg.vector_norm(state[k].double())) ** 2 for k in WEIGHTS) ** 0.5
    assert overall["relative_change"] == pytest.approx(exact / base_total, rel=1e-6)
    assert overall["delta_norm_partial"] is False
    weights = {w["key"]: w for w in side["overall"]["weights"]}
    for key, change in summed.items():
        assert weights[key]["delta_norm"] == pytest.approx(float(torch.linalg.vector_norm(change)), rel=1e-6)
    assert overall["ranks"] == [2, 4] and overall["n_by_type"] == {"lora": 5}
    blocks = side["overall"]["by_block"]
    assert set(blocks) == {"diffusion_model.blocks.0", "diffusion_model.blocks.1", "diffusion_model.out"}
    assert blocks["diffusion_model.out"]["n_keys"] == 1
    identity = side["identity"]
    assert identity["cloned"] and identity["module_shared"] and not identity["same_object"]
    assert identity["uuid_changed"] and identity["n_hops"] == 3
    assert (identity["n_patches_before"], identity["n_patches_after"], identity["n_entries_added"]) == (
        0,
        3,
        5,
    )
    modified = side["weight_modifications"]
    assert (
        modified["module_shared"] and modified["modified"]["count"] == 3 and modified["added"]["count"] == 0
    )
    json.dumps(to_jsonable(side), allow_nan=False)


def test_explicit_before_compares_once():
    base, first, second, *_ = stacked()
    side = analyse_side("model", second, before=first)
    assert side["mode"] == "explicit" and len(side["hops"]) == 1
    assert side["hops"][0]["n_patch_keys_added"] == 2
    assert side["identity"]["cloned"] is True
    unrelated = analyse_side("model", base, before=second)
    assert unrelated["hops"][0]["n_entries_removed"] == 5 and unrelated["identity"]["cloned"] is False


def test_state_dict_key_counts_shapes_and_patch_counts_per_weight():
    base, first, second, *_ = stacked()
    side = analyse_side("model", second)
    state = base.model.state_dict()
    modified = side["weight_modifications"]
    assert modified["n_state_dict_keys_before"] == modified["n_state_dict_keys_after"] == len(state) == 6
    assert modified["unknown_reasons"] == {}
    weights = {w["key"]: w for w in side["overall"]["weights"]}
    assert set(weights) == set(WEIGHTS)
    for key, row in weights.items():
        assert row["shape_before"] == row["shape_after"] == list(state[key].shape) == list(WEIGHTS[key])
        assert row["shape_unknown_reason"] is None
        assert row["n_patches"] == len(second.patches[key]) and row["n_patches_before"] == 0
    # the second loader skipped `out`: one patch there, two on the blocks
    assert [weights[k]["n_patches"] for k in sorted(WEIGHTS)] == [2, 2, 1]
    assert side["identity"]["model_object_id_before"] == id(base)
    assert side["identity"]["model_object_id_after"] == id(second)
    # against `first` only the second loader's patches are new; `first` already holds one per key
    explicit = {w["key"]: w for w in analyse_side("model", second, before=first)["overall"]["weights"]}
    assert {k: (w["n_patches_before"], w["n_patches"]) for k, w in explicit.items()} == {
        "diffusion_model.blocks.0.weight": (1, 2),
        "diffusion_model.blocks.1.weight": (1, 2),
    }


def test_base_norm_uses_the_backup_while_weights_are_patched():
    base, first, *_ = stacked()
    key = "diffusion_model.out.weight"
    original = base.model.state_dict()[key].clone()
    first.backup[key] = SimpleNamespace(weight=original, inplace_update=False)
    with torch.no_grad():
        base.model.diffusion_model.out.weight.mul_(3.0)  # "patched" in place
    side = analyse_side("model", first)
    row = next(r for r in side["hops"][0]["keys"] if r["key"] == key)
    assert row["base_norm"] == pytest.approx(float(torch.linalg.vector_norm(original.double())), rel=1e-6)


def test_base_norms_of_every_key_and_missing_keys():
    _, _, second, *_ = stacked()
    rows = [r for h in analyse_side("model", second)["hops"] for r in h["keys"]]
    assert rows and all(r["base_norm"] is not None and r["base_norm_unavailable"] is None for r in rows)
    no_weight = patch_rows({"x.weight": [(1.0, ("diff", (torch.ones(2),)), 1.0, None, None)]}, lambda k: None)
    assert no_weight[0]["base_norm_unavailable"] == "no base weight under this key"


def test_offset_patch_uses_the_slice_of_the_base_weight():
    weight = rand(12, 4, seed=3)
    entry = (1.0, ("diff", (rand(4, 4, seed=4),)), 1.0, (0, 4, 4), None)
    (row,) = patch_rows({"w": [entry]}, {"w": weight}.get)
    assert row["base_norm"] == pytest.approx(float(torch.linalg.vector_norm(weight[4:8].double())), rel=1e-6)


def test_aggregate_of_nothing():
    totals = aggregate([])
    # nothing patched: the change is exactly 0, relative to nothing
    assert totals["n_entries"] == 0 and totals["delta_norm"] == 0.0 and totals["relative_change"] is None
    assert totals["delta_norm_partial"] is False


def test_clip_side_reads_the_clip_patcher():
    base = Patcher(tiny_module())
    clip = SimpleNamespace(patcher=base.clone(), cond_stage_model=base.model, tokenizer=None)
    clip.patcher.add_patches(lora_patches(2, 3), 1.0)
    side = analyse_side("clip", clip)
    assert side["after"]["kind"] == "clip" and side["baseline"]["kind"] == "clip_patcher"
    assert side["overall"]["totals"]["n_keys"] == 3
    assert side["identity"]["clip_object_id_after"] == id(clip)
    # a CLIP clone does not know the CLIP it came from: unknown, with why
    assert side["identity"]["clip_object_id_before"] is None
    assert "clip_before" in side["identity"]["clip_object_id_before_unknown_reason"]
    before = SimpleNamespace(patcher=base, cond_stage_model=base.model, tokenizer=None)
    identity = analyse_side("clip", clip, before=before)["identity"]
    assert identity["clip_object_id_before"] == id(before)
    assert identity["clip_object_id_before_unknown_reason"] is None


def test_not_a_patcher_is_reported_not_raised():
    side = analyse_side("model", torch.nn.Linear(2, 2))
    assert side["analysed"] is False and "no patches" in side["reason"]
    assert analyse_side("clip", SimpleNamespace())["analysed"] is False


def test_weight_modifications_from_metadata_of_two_modules():
    before, after = Patcher(tiny_module()), Patcher(tiny_module())
    after.model.diffusion_model.out.half()
    after.model.diffusion_model.extra = torch.nn.Linear(2, 2)
    result = weight_modifications(before, after, {"diffusion_model.blocks.0.weight"})
    assert result["module_shared"] is False
    assert result["added"]["keys"] == ["diffusion_model.extra.bias", "diffusion_model.extra.weight"]
    assert result["dtype_changed"]["keys"] == ["diffusion_model.out.bias", "diffusion_model.out.weight"]
    assert result["storage_changed"]["count"] == 6  # two separately built modules share nothing
    assert (result["n_state_dict_keys_before"], result["n_state_dict_keys_after"]) == (6, 8)
    no_module = weight_modifications(SimpleNamespace(model=object()), after, set())
    assert no_module["n_state_dict_keys_before"] is None and no_module["n_state_dict_keys_after"] == 8
    assert no_module["unknown_reasons"] == {"n_state_dict_keys_before": "object has no state_dict"}
    assert "diffusion_model.blocks.0.weight" in result["modified"]["keys"]


def test_placement_changes_lists_only_differences():
    changes = placement_changes(
        {"device": "cpu", "dtype": "float16"}, {"device": "cuda:0", "dtype": "float16"}
    )
    assert changes == {"device": {"before": "cpu", "after": "cuda:0"}}


def test_no_patcher_or_tensor_survives_the_analysis():
    base, first, second, first_patches, second_patches = stacked()
    tensor_ref = weakref.ref(first_patches["diffusion_model.out.weight"].weights[0])
    refs = [weakref.ref(p) for p in (base, first, second)]
    side = analyse_side("model", second)
    del base, first, second, first_patches, second_patches
    gc.collect()
    assert all(r() is None for r in refs) and tensor_ref() is None
    json.dumps(to_jsonable(side), allow_nan=False)

"""LoRA loaders, key coverage and findings pinned at their limits and boundaries (issue 18): walk
and listing limits, strengths and skipped loaders, hop attribution, coverage from load_lora's
result, the foreign-LoRA threshold at equality, each finding's exact text."""

from types import SimpleNamespace

import torch

from monitors.lora.coverage import (
    attribute_hops,
    consumed_keys,
    coverage_from_patches,
    is_lora_loader,
    key_coverage,
    key_group,
    loader_findings,
    loader_info,
    merge_loaders,
    upstream_loaders,
)


def test_walk_stops_after_256_nodes():
    prompt = {"0": {"class_type": "Checkpoint", "inputs": {}}}
    for i in range(1, 301):
        prompt[str(i)] = {"class_type": "LoraLoaderModelOnly", "inputs": {"model": [str(i - 1), 0]}}
    prompt["m"] = {"class_type": "Monitor", "inputs": {"model": ["300", 0]}}
    found = upstream_loaders(prompt, "m", "model")
    assert len(found) == 256 and found[0]["node_id"] == "300" and found[-1]["node_id"] == "45"


def test_walk_follows_two_element_links_only():
    prompt = {
        "1": {"class_type": "LoraLoader", "inputs": {"lora_name": "a"}},
        "2": {"class_type": "M", "inputs": {"model": ["1", 0, "extra"]}},
        "3": {"class_type": "M", "inputs": {"model": "1"}},
        "4": {"class_type": "M", "inputs": {"model": [1, 0]}},  # an integer id: the prompt's keys are str
    }
    assert upstream_loaders(prompt, "2", "model") == []
    assert upstream_loaders(prompt, "3", "model") == []
    assert [x["node_id"] for x in upstream_loaders(prompt, "4", "model")] == ["1"]
    assert [x["node_id"] for x in upstream_loaders(prompt, 4, "model")] == ["1"]
    # a link whose slot names another node: the id is the first element
    prompt["5"] = {"class_type": "M", "inputs": {"model": ["1", "2"]}}
    assert [x["node_id"] for x in upstream_loaders(prompt, "5", "model")] == ["1"]


def test_is_lora_loader():
    assert is_lora_loader({"class_type": "LoraLoader"})
    assert is_lora_loader({"class_type": "LoraLoaderModelOnly", "inputs": None})
    assert is_lora_loader({"class_type": "Custom", "inputs": {"lora_name": "x.safetensors"}})
    assert not is_lora_loader({"class_type": "Custom", "inputs": {"lora_name": ["7", 0]}})
    assert not is_lora_loader({"class_type": "Custom", "inputs": "lora_name"})
    assert not is_lora_loader({"class_type": "Custom"})


def test_loader_strengths_and_skipping():
    def info(**inputs):
        return loader_info("5", {"class_type": "LoraLoader", "inputs": inputs})

    both = info(clip=["1", 1], strength_model=1, strength_clip=0.5)
    assert (both["strength_model"], both["strength_clip"], both["has_clip_input"]) == (1.0, 0.5, True)
    assert isinstance(both["strength_model"], float) and both["skipped"] is False
    assert info(clip=["1", 1], strength_model=0.0, strength_clip=0.0)["skipped"] is True
    assert info(clip=["1", 1], strength_model=0.0, strength_clip=1.0)["skipped"] is False
    assert info(clip=["1", 1], strength_model=1.0, strength_clip=0.0)["skipped"] is False
    model_only = info(strength_model=0.0, strength_clip=1.0)  # no clip input: its strength is 0
    assert model_only["strength_clip"] == 0.0 and model_only["skipped"] is True
    assert info(strength_model=True)["strength_model"] is None  # a boolean is not a strength
    assert info(strength_model="0.5")["strength_model"] is None
    assert info(strength_model=["9", 0])["strength_model"] is None
    odd = loader_info("5", {"class_type": "X", "inputs": [], "_meta": {"title": 3}})
    assert (odd["title"], odd["lora_name"], odd["has_clip_input"]) == (None, None, False)


def test_merge_marks_exactly_the_paths_each_loader_is_on():
    a, b, c = ({"node_id": n} for n in "abc")
    merged = merge_loaders([a, b], [b, c])
    assert [(r["node_id"], r["on_model_path"], r["on_clip_path"]) for r in merged] == [
        ("a", True, False),
        ("b", True, True),
        ("c", False, True),
    ]
    assert merge_loaders([], []) == []


def hop(index, uuid_changed, added, strengths):
    return {
        "index": index,
        "patches_uuid_changed": uuid_changed,
        "n_entries_added": added,
        "totals": {"strengths": strengths},
    }


def test_attribute_hops_counts_a_hop_that_added_entries_under_the_same_uuid():
    hops = [hop(0, False, 2, [0.5]), hop(1, True, 0, []), hop(2, False, 0, [])]
    loaders = [
        {"node_id": "8", "skipped": False, "strength_model": 0.5},
        {"node_id": "5", "skipped": False, "strength_model": None},
    ]
    pairs = attribute_hops(hops, loaders, "strength_model")
    assert [(p["hop_index"], p["loader_node_id"], p["consistent"]) for p in pairs] == [
        (0, "8", True),
        (1, "5", True),
    ]
    # strengths of the hop: none known (consistent), several (not), one other (not)
    for strengths, consistent in (([], True), ([0.5, 0.7], False), ([0.7], False), ([0.5], True)):
        (pair,) = attribute_hops([hop(0, True, 1, strengths)], loaders[:1], "strength_model")
        assert pair["consistent"] is consistent, strengths
    assert attribute_hops([hop(0, True, 1, [])], [], "strength_model") == []


def test_consumed_keys_b_norm_only_with_w_norm():
    present = {"a.w_norm", "a.b_norm", "b.b_norm", "c.w_norm"}
    assert consumed_keys(present, ["a", "b", "c"], ()) == {"a.w_norm", "a.b_norm", "c.w_norm"}
    assert consumed_keys(present, [], {"b.b_norm", "missing"}) == {"b.b_norm"}


def test_key_groups():
    assert key_group("lora_prior_te_text_model.alpha") == "lora_prior_te"
    assert key_group("lora_te2_text_model.alpha") == "lora_te2"
    assert key_group("lora_unet.alpha") == "lora_unet"
    assert key_group("lycoris_x.alpha") == "lycoris"
    assert key_group("text_encoders.clip_l.x") == "text_encoders"
    assert key_group("single") == "single"


def test_key_coverage_lists_200_unmatched():
    keys = [f"lora_te1_k{i:03d}.alpha" for i in range(201)] + ["lora_unet_a.alpha"]
    coverage = key_coverage(keys, {"lora_unet_a.alpha"})
    assert (coverage["n_file_keys"], coverage["n_matched_keys"], coverage["n_unmatched_keys"]) == (
        202,
        1,
        201,
    )
    assert coverage["matched_pct"] == 100.0 / 202
    assert len(coverage["unmatched_keys"]) == 200 and coverage["unmatched_truncated"] is True
    assert coverage["unmatched_keys"][-1] == "lora_te1_k199.alpha"
    assert coverage["n_unmatched_text_encoder_keys"] == 201
    assert coverage["unmatched_by_group"] == {"lora_te1": 201}
    exactly = key_coverage(keys[:200], set())
    assert exactly["unmatched_truncated"] is False and exactly["matched_pct"] == 0.0
    # duplicates count once
    assert key_coverage(["a.x", "a.x", "b.y"], {"a.x"})["matched_pct"] == 50.0


class Module:
    def __init__(self, *keys):
        self.keys = keys

    def state_dict(self):
        return dict.fromkeys(self.keys)


def test_coverage_from_what_load_lora_made():
    up, down, alpha, stray, renamed = (torch.zeros(1) for _ in range(5))
    file = {"m.up": up, "m.down": down, "m.alpha": alpha, "x.stray": stray, "old.diff": renamed}
    origin = {id(t): k for k, t in file.items()}
    # conversion renamed old.diff to n.diff and kept the tensor; a new tensor has no file key
    converted = {"m.up": up, "m.down": down, "m.alpha": alpha, "x.stray": stray, "n.diff": renamed}
    converted["made.alpha"] = torch.zeros(1)
    key_map = {"m": "model.w", "n": "model.v", "made": "model.u"}
    patch_dict = {
        "model.w": SimpleNamespace(loaded_keys={"m.up", "m.down"}),
        ("model.v", (0, 0, 1)): ("diff", (renamed,)),
        "clip.t": SimpleNamespace(loaded_keys=None),
        "gone.w": SimpleNamespace(loaded_keys=set()),
    }
    coverage = coverage_from_patches(
        file, origin, converted, key_map, patch_dict, Module("model.w", "model.v"), Module("clip.t")
    )
    assert coverage["unmatched_keys"] == ["x.stray"]
    assert (coverage["n_file_keys"], coverage["n_matched_keys"]) == (5, 4)
    assert coverage["computed"] is True
    assert (coverage["model_checked"], coverage["clip_checked"]) == (True, True)
    assert (coverage["n_target_weights"], coverage["n_model_targets"], coverage["n_clip_targets"]) == (
        4,
        2,
        1,
    )
    assert coverage["n_targets_not_loaded"] == 1 and coverage["targets_not_loaded"] == ["gone.w"]
    alone = coverage_from_patches(file, origin, converted, key_map, patch_dict)
    assert (alone["model_checked"], alone["clip_checked"]) == (False, False)
    assert alone["n_targets_not_loaded"] == 4 and alone["n_model_targets"] == 0
    many = {f"t{i:02d}": SimpleNamespace(loaded_keys=set()) for i in range(51)}
    listed = coverage_from_patches([], {}, {}, {}, many, object())
    assert listed["n_targets_not_loaded"] == 51 and len(listed["targets_not_loaded"]) == 50
    assert listed["targets_not_loaded"][-1] == "t49" and listed["model_checked"] is True


LOADER = {"node_id": "5", "lora_name": "x.safetensors", "skipped": False, "strength_model": 1.0}


def coverage(n, matched, text=0, clip_checked=False, not_loaded=0):
    return {
        "n_file_keys": n,
        "n_matched_keys": matched,
        "n_unmatched_keys": n - matched,
        "n_unmatched_text_encoder_keys": text,
        "clip_checked": clip_checked,
        "n_targets_not_loaded": not_loaded,
    }


def test_findings_name_the_loader():
    (finding,) = loader_findings({"node_id": "7", "skipped": True}, None, None)
    assert finding.message == (
        "strength 0: LoRA of node 7 (node 7) skipped, the loader passed its inputs unchanged"
    )
    (zero,) = loader_findings({**LOADER, "strength_model": 0.0}, None, None)
    assert zero.level == "info" and zero.message == (
        "LoRA x.safetensors (node 5): model strength 0, the model is unchanged"
    )
    assert loader_findings({**LOADER, "strength_model": 1.0}, None, None) == []
    assert loader_findings({**LOADER, "strength_model": None}, None, None) == []


def test_findings_for_file_states():
    assert loader_findings(LOADER, {"error": None}, None) == []
    assert loader_findings(LOADER, {}, None) == []
    (bad_data,) = loader_findings(
        LOADER, {"error": "truncated data", "header_ok": True, "data_ok": False}, None
    )
    assert bad_data.code == "lora_file_corrupt"
    assert bad_data.message == "LoRA x.safetensors (node 5): truncated data"
    (missing,) = loader_findings(LOADER, {"error": "gone", "header_ok": None, "data_ok": None}, None)
    assert missing.code == "lora_file_missing"
    assert missing.message == "LoRA x.safetensors (node 5): file not found in the loras folders"
    (ok_flags,) = loader_findings(LOADER, {"error": "gone", "header_ok": True, "data_ok": True}, None)
    assert ok_flags.code == "lora_file_missing"


def test_findings_for_coverage_boundaries():
    assert loader_findings(LOADER, None, {"n_file_keys": 0, "n_targets_not_loaded": 3}) == []
    assert loader_findings(LOADER, None, {}) == []
    (not_loaded,) = loader_findings(LOADER, None, coverage(10, 10, not_loaded=3))
    assert not_loaded.code == "lora_targets_not_loaded" and not_loaded.level == "warning"
    assert not_loaded.message.startswith("LoRA x.safetensors (node 5): 3 patched weights do not exist")
    (one,) = loader_findings(LOADER, None, coverage(10, 1))
    assert one.code == "lora_keys_unmatched" and one.message.startswith(
        "LoRA x.safetensors (node 5): 9 of 10"
    )
    # exactly half stray: still a warning; one more: an error
    (half,) = loader_findings(LOADER, None, coverage(700, 350))
    assert half.level == "warning" and "350 of 700" in half.message
    (more,) = loader_findings(LOADER, None, coverage(700, 349))
    assert more.level == "error"
    # text-encoder keys are set aside only while the CLIP was not checked
    text, stray = loader_findings(LOADER, None, coverage(100, 40, text=50))
    assert text.code == "lora_text_encoder_keys" and text.message == (
        "LoRA x.safetensors (node 5): 50 text-encoder keys not applied: LoraLoaderModelOnly ignores them"
    )
    assert stray.level == "warning" and "10 of 100 keys unmatched" in stray.message
    (checked,) = loader_findings(LOADER, None, coverage(100, 40, text=50, clip_checked=True))
    assert checked.level == "error" and "60 of 100 keys unmatched" in checked.message
    (none,) = loader_findings(LOADER, None, coverage(100, 0, text=100))
    assert none.code == "lora_no_key_matched"


def test_a_fused_qkv_adapter_split_by_the_conversion_counts_as_matched():
    """ComfyUI 0.38's convert_lora splits a Krea2 fused `to_qkv` adapter into q, k and v (slices of
    the fused up weight, the down weight and alpha shared) and adds `.row_offset` entries of its
    own: every file key is matched, and nothing the conversion made is counted as a file key."""
    fused = "diffusion_model.blocks.0.attn.to_qkv"
    up, down, alpha = torch.zeros(3 * 8, 4, device="meta"), torch.zeros(4, 8, device="meta"), torch.tensor(4.0)
    file = {f"{fused}.lora_B.weight": up, f"{fused}.lora_A.weight": down, f"{fused}.alpha": alpha}
    origin = {id(t): k for k, t in file.items()}
    converted, key_map, patch_dict = {}, {}, {}
    for index, (name, part) in enumerate(zip("qkv", up.chunk(3), strict=True)):
        split = f"diffusion_model.blocks.0.attn.to_{name}"
        converted |= {
            f"{split}.lora_B.weight": part,
            f"{split}.lora_A.weight": down,
            f"{split}.alpha": alpha,
            f"{split}.row_offset": torch.tensor(8 * index),
        }
        key_map[split] = ("blocks.0.attn.qkv.weight", (0, 8 * index, 8))
        patch_dict[key_map[split]] = SimpleNamespace(
            loaded_keys={f"{split}.lora_B.weight", f"{split}.lora_A.weight", f"{split}.row_offset"}
        )
    coverage = coverage_from_patches(file, origin, converted, key_map, patch_dict)
    assert (coverage["n_file_keys"], coverage["n_matched_keys"], coverage["n_unmatched_keys"]) == (3, 3, 0)
    assert coverage["unmatched_keys"] == [] and coverage["n_slice_targets"] == 3
    copies = {k: (v.clone() if k.endswith("lora_B.weight") else v) for k, v in converted.items()}
    unrelated = coverage_from_patches(file, origin, copies, key_map, patch_dict)
    assert unrelated["unmatched_keys"] == [f"{fused}.lora_B.weight"]  # no view of it: not its key

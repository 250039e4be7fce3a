"""LoRA loaders in the prompt graph, key coverage set arithmetic, hop attribution, findings."""

from monitors.lora.coverage import (
    attribute_hops,
    consumed_keys,
    key_coverage,
    key_group,
    loader_findings,
    merge_loaders,
    upstream_loaders,
)

# 9 (monitor) <- model 8 LoraLoaderModelOnly <- 6 ModelSamplingSD3 <- 5 LoraLoader <- 1 checkpoint
#             <- clip  5 LoraLoader (slot 1) <- 1 checkpoint (slot 1)
PROMPT = {
    "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "x.safetensors"}},
    "5": {
        "class_type": "LoraLoader",
        "inputs": {
            "model": ["1", 0],
            "clip": ["1", 1],
            "lora_name": "first.safetensors",
            "strength_model": 0.8,
            "strength_clip": 1,
        },
        "_meta": {"title": "first"},
    },
    "6": {"class_type": "ModelSamplingSD3", "inputs": {"model": ["5", 0], "shift": 3.0}},
    "8": {
        "class_type": "LoraLoaderModelOnly",
        "inputs": {"model": ["6", 0], "lora_name": "second.safetensors", "strength_model": ["20", 0]},
    },
    "9": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["8", 0], "clip": ["5", 1]}},
    "20": {"class_type": "PrimitiveFloat", "inputs": {"value": 0.5}},
}


def test_upstream_loaders_in_stack_order():
    model = upstream_loaders(PROMPT, "9", "model")
    assert [loader["node_id"] for loader in model] == ["8", "5"]
    second, first = model
    assert second["class_type"] == "LoraLoaderModelOnly" and second["lora_name"] == "second.safetensors"
    assert second["strength_model"] is None  # a link: unknown from the graph
    assert second["strength_clip"] == 0.0 and second["has_clip_input"] is False
    assert first["strength_model"] == 0.8 and first["strength_clip"] == 1.0 and first["title"] == "first"
    assert not first["skipped"] and not second["skipped"]
    clip = upstream_loaders(PROMPT, "9", "clip")
    assert [loader["node_id"] for loader in clip] == ["5"]


def test_merge_marks_paths():
    merged = merge_loaders(upstream_loaders(PROMPT, "9", "model"), upstream_loaders(PROMPT, "9", "clip"))
    rows = {row["node_id"]: row for row in merged}
    assert [row["node_id"] for row in merged] == ["8", "5"]
    assert rows["5"]["on_model_path"] and rows["5"]["on_clip_path"]
    assert rows["8"]["on_model_path"] and not rows["8"]["on_clip_path"]


def test_walk_survives_bad_graphs():
    assert upstream_loaders(None, "9", "model") == []
    assert upstream_loaders(PROMPT, None, "model") == []
    assert upstream_loaders(PROMPT, "404", "model") == []
    cyclic = {
        "1": {"class_type": "LoraLoaderModelOnly", "inputs": {"model": ["2", 0], "lora_name": "a"}},
        "2": {"class_type": "X", "inputs": {"model": ["1", 0]}},
        "3": {"class_type": "M", "inputs": {"model": ["1", 0]}},
    }
    assert [loader["node_id"] for loader in upstream_loaders(cyclic, "3", "model")] == ["1"]
    dangling = {"3": {"class_type": "M", "inputs": {"model": ["77", 0]}}}
    assert upstream_loaders(dangling, "3", "model") == []


def test_third_party_loader_is_recognised_by_lora_name():
    prompt = {
        "1": {
            "class_type": "LoraLoader|pysssss",
            "inputs": {"model": ["0", 0], "lora_name": "x", "strength_model": 0},
        },
        "2": {"class_type": "M", "inputs": {"model": ["1", 0]}},
    }
    (loader,) = upstream_loaders(prompt, "2", "model")
    assert loader["class_type"] == "LoraLoader|pysssss"
    assert loader["skipped"] is True  # no clip input: strength_clip counts as 0


def test_consumed_keys_follow_load_lora_rules():
    file_keys = {
        "a.lora_up.weight",
        "a.lora_down.weight",
        "a.alpha",
        "b.diff",
        "b.diff_b",
        "c.w_norm",
        "c.b_norm",
        "d.b_norm",  # b_norm without w_norm: not read
        "e.set_weight",
        "f.alpha",  # f is not in the key map: its alpha is ignored
        "g.dora_scale",
    }
    consumed = consumed_keys(
        file_keys, ["a", "b", "c", "d", "e", "g"], {"a.lora_up.weight", "a.lora_down.weight", "zzz"}
    )
    assert consumed == file_keys - {"d.b_norm", "f.alpha"}


def test_key_coverage_counts_and_groups():
    keys = [
        "lora_unet_a.lora_up.weight",
        "lora_unet_a.lora_down.weight",
        "lora_te1_b.alpha",
        "lora_unet_zz.alpha",
        "x.y",
    ]
    coverage = key_coverage(keys, {"lora_unet_a.lora_up.weight", "lora_unet_a.lora_down.weight"})
    assert (coverage["n_file_keys"], coverage["n_matched_keys"], coverage["n_unmatched_keys"]) == (5, 2, 3)
    assert coverage["matched_pct"] == 40.0
    assert coverage["unmatched_keys"] == ["lora_te1_b.alpha", "lora_unet_zz.alpha", "x.y"]
    assert coverage["unmatched_by_group"] == {"lora_te1": 1, "lora_unet": 1, "x": 1}
    assert coverage["n_unmatched_text_encoder_keys"] == 1
    assert key_coverage([], set())["matched_pct"] is None


def test_key_group():
    assert key_group("lora_unet_down_blocks_0.alpha") == "lora_unet"
    assert key_group("lora_prior_te_text_model.alpha") == "lora_prior_te"
    assert key_group("lycoris_down_blocks_0.alpha") == "lycoris"
    assert key_group("diffusion_model.blocks.0.lora_A.weight") == "diffusion_model"


def hop(index, changed, strengths, n=1):
    return {
        "index": index,
        "patches_uuid_changed": changed,
        "n_entries_added": n if changed else 0,
        "totals": {"strengths": strengths},
    }


def test_attribute_hops_pairs_patching_hops_with_active_loaders():
    hops = [hop(0, True, [0.5]), hop(1, False, []), hop(2, True, [0.8])]
    loaders = [
        {"node_id": "8", "skipped": False, "strength_model": 0.5},
        {"node_id": "7", "skipped": True, "strength_model": 0.0},
        {"node_id": "5", "skipped": False, "strength_model": 0.9},
    ]
    pairs = attribute_hops(hops, loaders, "strength_model")
    assert [(p["hop_index"], p["loader_node_id"], p["consistent"]) for p in pairs] == [
        (0, "8", True),
        (2, "5", False),
    ]
    assert attribute_hops(hops[:1], loaders, "strength_model") == []


def finding_codes(findings):
    return [f.code for f in findings]


LOADER = {
    "node_id": "5",
    "lora_name": "x.safetensors",
    "skipped": False,
    "strength_model": 1.0,
    "has_clip_input": False,
}


def test_findings_for_missing_and_corrupt_files_and_zero_strength():
    missing = loader_findings(LOADER, {"error": "file not found", "header_ok": None}, None)
    assert finding_codes(missing) == ["lora_file_missing"] and missing[0].level == "error"
    corrupt = loader_findings(LOADER, {"error": "corrupt safetensors header: x", "header_ok": False}, None)
    assert finding_codes(corrupt) == ["lora_file_corrupt"] and "corrupt" in corrupt[0].message
    skipped = loader_findings({**LOADER, "skipped": True, "strength_model": 0.0}, {"error": None}, None)
    assert finding_codes(skipped) == ["lora_strength_zero"] and "strength 0" in skipped[0].message
    model_zero = loader_findings({**LOADER, "strength_model": 0.0, "strength_clip": 1.0}, None, None)
    assert model_zero[0].level == "info"


def coverage(n, matched, text=0, clip_checked=False):
    return {
        "n_file_keys": n,
        "n_matched_keys": matched,
        "n_unmatched_keys": n - matched,
        "n_unmatched_text_encoder_keys": text,
        "clip_checked": clip_checked,
    }


def test_findings_for_key_coverage():
    (none,) = loader_findings(LOADER, None, coverage(700, 0))
    assert (
        none.code == "lora_no_key_matched" and none.level == "error" and "another base model" in none.message
    )
    # a sixth or a third stray: a warning naming the count, no "another base model" verdict
    for matched in (580, 467):
        (some,) = loader_findings(LOADER, None, coverage(700, matched))
        assert some.level == "warning" and "another base model" not in some.message
        assert f"{700 - matched} of 700 keys unmatched, ComfyUI ignores them (their names" in some.message
    # most keys stray (above UNMATCHED_FOREIGN_FRACTION = 50 %): an error
    (most,) = loader_findings(LOADER, None, coverage(700, 340))
    assert most.level == "error" and most.message.endswith(
        "360 of 700 keys unmatched, ComfyUI ignores them: most keys are stray, this LoRA was made for "
        "another base model (their names are in the report, by block)"
    )
    (few,) = loader_findings(LOADER, None, coverage(700, 690))
    assert "10 of 700 keys unmatched, ComfyUI ignores them (their names" in few.message
    text_only = loader_findings(LOADER, None, coverage(700, 500, text=200))
    assert (
        finding_codes(text_only) == ["lora_text_encoder_keys"]
        and "LoraLoaderModelOnly" in text_only[0].message
    )
    with_clip_input = loader_findings({**LOADER, "has_clip_input": True}, None, coverage(700, 500, text=200))
    assert "connect the loader's CLIP" in with_clip_input[0].message
    checked = loader_findings(LOADER, None, coverage(700, 500, text=200, clip_checked=True))
    assert finding_codes(checked) == ["lora_keys_unmatched"] and "200 of 700" in checked[0].message
    assert loader_findings(LOADER, None, coverage(10, 10)) == []

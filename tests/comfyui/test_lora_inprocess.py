"""PipelineMonitorLora in-process on tiny real ComfyUI objects, with LoRA files loaded by the real
LoraLoader: exact change norms against ComfyUI's own calculate_weight, key coverage against
ComfyUI's own "lora key not loaded" log lines, bad inputs, and nothing kept alive."""

from __future__ import annotations

import gc
import json
import logging
import re
import weakref
from pathlib import Path

import pytest
import torch
from lora_support import (
    FORMATS,
    PLANTED_UNMATCHED,
    kohya_lora,
    lora_graph,
    planted,
    rand,
    run_monitor,
    write_lora,
)

pytestmark = pytest.mark.comfyui

REPO_ROOT = Path(__file__).resolve().parents[2]
NOT_LOADED = re.compile(r"^lora key not loaded: (.+)$")


@pytest.fixture(scope="session")
def loras_dir(comfy, tmp_path_factory):
    import folder_paths

    folder = tmp_path_factory.mktemp("loras")
    folder_paths.add_model_folder_path("loras", str(folder))
    return folder


def load(comfy, tiny, name, strength_model=1.0, strength_clip=1.0, model_only=False):
    loader = comfy.nodes.NODE_CLASS_MAPPINGS["LoraLoaderModelOnly" if model_only else "LoraLoader"]()
    if model_only:
        return loader.load_lora_model_only(tiny.model, name, strength_model)[0], None
    return loader.load_lora(tiny.model, tiny.clip, name, strength_model, strength_clip)


def reference_norm(patcher, key: str) -> float:
    """||patched - original|| with ComfyUI's calculate_weight on a float32 copy (the materialised truth)."""
    import comfy.lora

    original = patcher.model.state_dict()[key].detach().float().clone()
    patched = comfy.lora.calculate_weight(patcher.patches[key], original.clone(), key)
    return float(torch.linalg.vector_norm((patched - original).double()))


def not_loaded(caplog) -> set[str]:
    return {m.group(1) for r in caplog.records if (m := NOT_LOADED.match(r.getMessage()))}


def rows_of(step, kind):
    return [row for hop in step["details"][kind]["hops"] for row in hop["keys"]]


EXPECTED = {  # format -> (patch type, model weights patched, clip weights patched)
    "kohya": ("lora", 7, 2),
    "peft": ("lora", 5, 0),
    "loha": ("loha", 5, 0),
    "lokr": ("lokr", 5, 0),
    "diff": ("diff", 3, 0),  # + a diff_b for to_q, which has no bias: ComfyUI logs NOT LOADED
}


@pytest.mark.parametrize("style", sorted(FORMATS))
def test_each_lora_style_norms_and_coverage_match_comfyui(
    comfy, tiny, pack_runtime, loras_dir, caplog, style
):
    sd = FORMATS[style]()
    name = f"pm_{style}.safetensors"
    write_lora(loras_dir, name, sd, metadata={"ss_network_dim": "4", "ss_base_model_version": "sd_v1"})
    caplog.set_level(logging.WARNING)
    model, clip = load(comfy, tiny, name, strength_model=0.8, strength_clip=1.3)
    ignored_by_comfyui = not_loaded(caplog)
    assert ignored_by_comfyui == set(PLANTED_UNMATCHED)
    output, step, _ = run_monitor(comfy, pack_runtime, lora_graph(name, 0.8, 1.3), model=model, clip=clip)
    assert output.result[0] is model and output.result[1] is clip
    assert step["monitor_errors"] == []
    patch_type, n_model, n_clip = EXPECTED[style]
    summary = step["summary"]
    assert summary["model_n_patch_keys_added"] == n_model
    assert summary["clip_n_patch_keys_added"] == n_clip
    assert summary["n_file_keys"] == len(sd)
    assert summary["n_unmatched_keys"] == len(PLANTED_UNMATCHED)
    assert summary["n_matched_keys"] == len(sd) - len(PLANTED_UNMATCHED)
    (loader,) = step["details"]["loaders"]
    assert set(loader["coverage"]["unmatched_keys"]) == ignored_by_comfyui
    assert loader["file"]["exists"] and loader["file"]["network"]["dim"] == 4.0
    assert loader["model_hop_index"] == 0 and loader["model_hop_consistent"] is True
    for kind, patcher, strength in (("model", model, 0.8), ("clip", clip.patcher, 1.3)):
        rows = rows_of(step, kind)
        assert len({r["key"] for r in rows}) == (n_model if kind == "model" else n_clip)
        for row in rows:
            assert row["type"] == patch_type and row["strength"] == pytest.approx(strength)
            assert row["delta_norm"] == pytest.approx(reference_norm(patcher, row["key"]), rel=1e-4), row[
                "key"
            ]
            weight = patcher.model.state_dict()[row["key"]]
            assert row["base_norm"] == pytest.approx(
                float(torch.linalg.vector_norm(weight.double())), rel=1e-5
            )
    assert loader["coverage"]["n_targets_not_loaded"] == (1 if style == "diff" else 0)
    assert ("lora_targets_not_loaded" in [f["code"] for f in step["findings"]]) == (style == "diff")
    assert "lora_keys_unmatched" in [f["code"] for f in step["findings"]]
    assert summary["success"] is True
    json.dumps(step, allow_nan=False)


def test_sdxl_style_clip_lora_on_both_text_encoders(comfy, tiny, pack_runtime, loras_dir, caplog):
    """lora_te1_* (CLIP-L, 32 wide) and lora_te2_* (CLIP-G, 64 wide) on a tiny SDXL-class CLIP."""
    from testing_pack.conditioning_nodes import make_tiny_clip

    sdxl_clip = make_tiny_clip("sdxl", seed=11)
    sd = {}
    for i, (prefix, width) in enumerate((("lora_te1", 32), ("lora_te2", 64))):
        for j, layer in enumerate(("self_attn_q_proj", "self_attn_out_proj", "mlp_fc2")):
            in_dim = 2 * width if layer == "mlp_fc2" else width
            name = f"{prefix}_text_model_encoder_layers_1_{layer}"
            sd[f"{name}.lora_down.weight"] = rand(4, in_dim, seed=10 * i + j)
            sd[f"{name}.lora_up.weight"] = rand(width, 4, seed=10 * i + j + 5)
            sd[f"{name}.alpha"] = torch.tensor(2.0)
    sd.update(planted())
    write_lora(loras_dir, "pm_sdxl_te.safetensors", sd)
    caplog.set_level(logging.WARNING)
    model, clip = comfy.nodes.NODE_CLASS_MAPPINGS["LoraLoader"]().load_lora(
        tiny.model, sdxl_clip, "pm_sdxl_te.safetensors", 1.0, 0.6
    )
    assert not_loaded(caplog) == set(PLANTED_UNMATCHED)
    _, step, _ = run_monitor(
        comfy, pack_runtime, lora_graph("pm_sdxl_te.safetensors", 1.0, 0.6), model=model, clip=clip
    )
    rows = rows_of(step, "clip")
    assert {r["key"].split(".")[0] for r in rows} == {"clip_l", "clip_g"} and len(rows) == 6
    for row in rows:
        assert row["delta_norm"] == pytest.approx(reference_norm(clip.patcher, row["key"]), rel=1e-4), row[
            "key"
        ]
    assert step["summary"]["n_matched_keys"] == 18 and step["summary"]["n_unmatched_keys"] == len(
        PLANTED_UNMATCHED
    )
    assert (
        step["summary"]["model_n_patch_keys_added"] == 0 and step["summary"]["clip_n_patch_keys_added"] == 6
    )
    blocks = step["details"]["clip"]["overall"]["by_block"]
    assert set(blocks) == {
        "clip_l.transformer.text_model.encoder.layers.1",
        "clip_g.transformer.text_model.encoder.layers.1",
    }
    assert step["details"]["clip"]["after"]["module_class"] == "SDXLClipModel"


def test_kohya_rows_carry_rank_alpha_and_scale(comfy, tiny, pack_runtime, loras_dir):
    write_lora(loras_dir, "pm_rank.safetensors", kohya_lora(rank=8, plant=False))
    model, clip = load(comfy, tiny, "pm_rank.safetensors", 0.5, 1.0)
    _, step, _ = run_monitor(comfy, pack_runtime, lora_graph("pm_rank.safetensors"), model=model, clip=clip)
    rows = rows_of(step, "model")
    assert {(r["rank"], r["alpha"], r["scale"], r["effective_scale"]) for r in rows} == {(8, 4.0, 0.5, 0.25)}
    assert step["summary"]["n_unmatched_keys"] == 0 and step["findings"] == []
    totals = step["details"]["model"]["overall"]["totals"]
    assert totals["ranks"] == [8] and totals["n_by_type"] == {"lora": 7}
    assert 0 < step["summary"]["model_relative_change_ratio"] < 1
    assert "diffusion_model.input_blocks.1" in step["details"]["model"]["overall"]["by_block"]
    assert step["details"]["model"]["identity"]["cloned"] is True
    assert step["details"]["clip"]["identity"]["n_patches_after"] == 2
    # A LoRA loader moves nothing. Its CLIP clone's weights are not patched yet (ComfyUI applies
    # the LoRA when it next loads the text encoder); whether the base CLIP's are depends on what
    # earlier tests loaded, so the expected change is read from the base CLIP itself.
    assert step["details"]["model"]["placement_changes"] == {}
    base = tiny.clip.patcher
    base_patched = (
        base.model.current_weight_patches_uuid is not None
        and base.model.current_weight_patches_uuid == base.patches_uuid
    )
    expected = {"weights_patched": {"before": True, "after": False}} if base_patched else {}
    assert step["details"]["clip"]["placement_changes"] == expected


def test_monitor_logs_nothing_for_a_good_lora(comfy, tiny, pack_runtime, loras_dir, caplog):
    """The recomputed coverage uses load_lora(log_missing=False): no duplicate ComfyUI warnings."""
    write_lora(loras_dir, "pm_quiet.safetensors", kohya_lora())
    model, clip = load(comfy, tiny, "pm_quiet.safetensors")
    caplog.clear()
    caplog.set_level(logging.INFO)
    _, step, _ = run_monitor(comfy, pack_runtime, lora_graph("pm_quiet.safetensors"), model=model, clip=clip)
    assert step["summary"]["n_unmatched_keys"] == len(PLANTED_UNMATCHED)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_stacked_loaders_give_one_hop_each(comfy, tiny, pack_runtime, loras_dir):
    write_lora(loras_dir, "pm_stack_a.safetensors", kohya_lora(rank=4, plant=False))
    write_lora(loras_dir, "pm_stack_b.safetensors", FORMATS["loha"]())
    loader = comfy.nodes.NODE_CLASS_MAPPINGS["LoraLoader"]()
    model, clip = loader.load_lora(tiny.model, tiny.clip, "pm_stack_a.safetensors", 1.0, 1.0)
    model, clip = comfy.nodes.NODE_CLASS_MAPPINGS["LoraLoader"]().load_lora(
        model, clip, "pm_stack_b.safetensors", 0.5, 0.0
    )
    prompt = {
        "1": {"class_type": "PMTinyModels", "inputs": {}},
        "2": {
            "class_type": "LoraLoader",
            "inputs": {
                "model": ["1", 0],
                "clip": ["1", 1],
                "lora_name": "pm_stack_a.safetensors",
                "strength_model": 1.0,
                "strength_clip": 1.0,
            },
        },
        "3": {
            "class_type": "LoraLoader",
            "inputs": {
                "model": ["2", 0],
                "clip": ["2", 1],
                "lora_name": "pm_stack_b.safetensors",
                "strength_model": 0.5,
                "strength_clip": 0.0,
            },
        },
        "9": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["3", 0], "clip": ["3", 1]}},
    }
    _, step, _ = run_monitor(comfy, pack_runtime, prompt, model=model, clip=clip)
    hops = step["details"]["model"]["hops"]
    assert [(h["n_patch_keys_added"], h.get("loader_node_id")) for h in hops] == [(5, "3"), (7, "2")]
    assert hops[0]["totals"]["n_by_type"] == {"loha": 5} and hops[1]["totals"]["n_by_type"] == {"lora": 7}
    clip_hops = step["details"]["clip"]["hops"]
    assert [h["n_patch_keys_added"] for h in clip_hops] == [0, 2]
    assert clip_hops[0]["patches_uuid_changed"]  # loader 3 cloned the CLIP with strength 0
    loaders = {row["node_id"]: row for row in step["details"]["loaders"]}
    assert loaders["2"]["coverage"]["n_unmatched_keys"] == 0
    assert loaders["3"]["coverage"]["n_unmatched_keys"] == len(PLANTED_UNMATCHED)
    assert step["summary"]["n_loras"] == 2 and step["summary"]["model_n_hops"] == 2


def test_model_only_loader_leaves_text_encoder_keys_unmatched(comfy, tiny, pack_runtime, loras_dir, caplog):
    write_lora(loras_dir, "pm_model_only.safetensors", kohya_lora(plant=False))
    caplog.set_level(logging.WARNING)
    model, _ = load(comfy, tiny, "pm_model_only.safetensors", model_only=True)
    expected = not_loaded(caplog)
    assert len(expected) == 6 and all(k.startswith("lora_te_") for k in expected)
    prompt = lora_graph("pm_model_only.safetensors", model_only=True, with_clip=False)
    _, step, _ = run_monitor(comfy, pack_runtime, prompt, model=model)
    coverage = step["details"]["loaders"][0]["coverage"]
    assert set(coverage["unmatched_keys"]) == expected and coverage["clip_checked"] is False
    assert [f["code"] for f in step["findings"]] == ["lora_text_encoder_keys"]
    assert "LoraLoaderModelOnly ignores them" in step["findings"][0]["message"]
    assert step["summary"]["clip_n_patch_keys_added"] is None and step["summary"]["success"] is True


def test_explicit_before_inputs(comfy, tiny, pack_runtime, loras_dir):
    write_lora(loras_dir, "pm_before.safetensors", kohya_lora(plant=False))
    model, clip = load(comfy, tiny, "pm_before.safetensors")
    _, step, _ = run_monitor(
        comfy,
        pack_runtime,
        lora_graph("pm_before.safetensors"),
        model=model,
        clip=clip,
        model_before=tiny.model,
        clip_before=tiny.clip,
    )
    for kind in ("model", "clip"):
        side = step["details"][kind]
        assert side["mode"] == "explicit" and len(side["hops"]) == 1
        assert side["baseline"]["object_id"] == id(tiny.model if kind == "model" else tiny.clip)
    assert step["details"]["clip"]["identity"]["clip_object_id_before"] == id(tiny.clip)


def test_key_counts_shapes_patch_counts_and_returned_ids_match_the_real_objects(
    comfy, tiny, pack_runtime, loras_dir
):
    write_lora(loras_dir, "pm_figures.safetensors", kohya_lora(plant=False))
    model, clip = load(comfy, tiny, "pm_figures.safetensors")
    for before in (False, True):
        extra = {"model_before": tiny.model, "clip_before": tiny.clip} if before else {}
        output, step, _ = run_monitor(
            comfy, pack_runtime, lora_graph("pm_figures.safetensors"), model=model, clip=clip, **extra
        )
        out_model, out_clip = output.result[:2]
        returned = step["details"]["returned"]
        assert (returned["model_object_id"], returned["clip_object_id"]) == (id(out_model), id(out_clip))
        assert step["summary"]["n_models_returned"] == 2
        for kind, after, base in (("model", model, tiny.model), ("clip", clip.patcher, tiny.clip.patcher)):
            side = step["details"][kind]
            modified = side["weight_modifications"]
            assert modified["n_state_dict_keys_before"] == len(base.model_state_dict())
            assert modified["n_state_dict_keys_after"] == len(after.model_state_dict())
            assert step["summary"][f"{kind}_n_state_dict_keys_after"] == len(after.model_state_dict())
            weights = side["overall"]["weights"]
            assert len(weights) == EXPECTED["kohya"][1 if kind == "model" else 2]
            after_state, base_state = after.model_state_dict(), base.model_state_dict()
            for row in weights:
                assert row["shape_after"] == list(after_state[row["key"]].shape), row
                assert row["shape_before"] == list(base_state[row["key"]].shape), row
                assert row["n_patches"] == len(after.patches[row["key"]]) == 1
                assert row["n_patches_before"] == len(base.patches.get(row["key"], ())) == 0
        identity = step["details"]["clip"]["identity"]
        assert identity["clip_object_id_before"] == (id(tiny.clip) if before else None)
        assert (identity["clip_object_id_before_unknown_reason"] is None) is before
        assert step["details"]["model"]["identity"]["model_object_id_before"] == id(tiny.model)
        assert step["details"]["exceptions"] == [] and step["details"]["n_exceptions"] == 0


# -- bad input: findings, never a crash --------------------------------------------------------------


def codes(step):
    return [f["code"] for f in step["findings"]]


def test_missing_lora_file(comfy, tiny, pack_runtime, loras_dir):
    output, step, _ = run_monitor(
        comfy, pack_runtime, lora_graph("pm_gone.safetensors"), model=tiny.model, clip=tiny.clip
    )
    assert output.result[0] is tiny.model
    assert "lora_file_missing" in codes(step) and step["summary"]["success"] is False
    assert step["details"]["loaders"][0]["file"]["exists"] is False and step["monitor_errors"] == []


def test_corrupt_lora_file(comfy, tiny, pack_runtime, loras_dir):
    (loras_dir / "pm_corrupt.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}")
    _, step, _ = run_monitor(
        comfy, pack_runtime, lora_graph("pm_corrupt.safetensors"), model=tiny.model, clip=tiny.clip
    )
    (finding,) = [f for f in step["findings"] if f["code"] == "lora_file_corrupt"]
    assert finding["level"] == "error" and "not valid JSON" in finding["message"]
    assert step["monitor_errors"] == []


def test_lora_for_another_model_matches_nothing(comfy, tiny, pack_runtime, loras_dir):
    foreign = {k: v for k, v in kohya_lora().items() if k in PLANTED_UNMATCHED}
    write_lora(loras_dir, "pm_foreign.safetensors", foreign)
    model, clip = load(comfy, tiny, "pm_foreign.safetensors")
    _, step, _ = run_monitor(
        comfy, pack_runtime, lora_graph("pm_foreign.safetensors"), model=model, clip=clip
    )
    assert "lora_no_key_matched" in codes(step) and step["summary"]["success"] is False
    assert step["summary"]["n_matched_keys"] == 0 and step["summary"]["model_n_patch_keys_added"] == 0
    assert step["details"]["model"]["hops"][0]["patches_uuid_changed"] is True


def test_strength_zero_skips_the_lora(comfy, tiny, pack_runtime, loras_dir):
    write_lora(loras_dir, "pm_zero.safetensors", kohya_lora(plant=False))
    model, clip = load(comfy, tiny, "pm_zero.safetensors", 0.0, 0.0)
    assert model is tiny.model  # LoraLoader returned its inputs
    _, step, _ = run_monitor(
        comfy, pack_runtime, lora_graph("pm_zero.safetensors", 0.0, 0.0), model=model, clip=clip
    )
    assert "lora_strength_zero" in codes(step) and step["summary"]["success"] is False
    assert "strength 0" in step["findings"][0]["message"] and step["summary"]["n_loras_skipped"] == 1


def test_clip_not_connected(comfy, tiny, pack_runtime, loras_dir):
    write_lora(loras_dir, "pm_noclip.safetensors", kohya_lora(plant=False))
    model, _ = load(comfy, tiny, "pm_noclip.safetensors")
    output, step, _ = run_monitor(
        comfy, pack_runtime, lora_graph("pm_noclip.safetensors", with_clip=False), model=model
    )
    assert output.result == (model, None) or tuple(output.result) == (model, None)
    assert "lora_clip_not_connected" in codes(step) and "clip" not in step["details"]
    assert step["details"]["loaders"][0]["coverage"]["clip_checked"] is False


def test_non_safetensors_file_is_never_unpickled(comfy, tiny, pack_runtime, loras_dir, monkeypatch):
    torch.save(kohya_lora(), loras_dir / "pm_old.pt")
    model, clip = load(comfy, tiny, "pm_old.pt")  # ComfyUI's loader loads it; the monitor must not

    def no_unpickling(*args, **kwargs):
        raise AssertionError("the monitor unpickled a LoRA file")

    monkeypatch.setattr(torch, "load", no_unpickling)
    _, step, _ = run_monitor(comfy, pack_runtime, lora_graph("pm_old.pt"), model=model, clip=clip)
    loader = step["details"]["loaders"][0]
    assert loader["file"]["format"] == "pt" and loader["coverage"]["computed"] is False
    assert "never unpickled" in loader["coverage"]["reason"] and step["monitor_errors"] == []


def test_monitor_failure_is_recorded_not_raised(comfy, tiny, pack_runtime, monkeypatch):
    lora_report = comfy.pack_module("monitors.lora.report")
    lora_step = comfy.pack_module("monitors.lora.step")

    def boom(*args, **kwargs):
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr(lora_step, "analyse_side", boom)
    monkeypatch.setattr(lora_report, "upstream_loaders", boom)
    output, step, _ = run_monitor(comfy, pack_runtime, {}, model=tiny.model)
    assert output.result[0] is tiny.model
    assert output.ui["text"] == ["lora monitor failed: RuntimeError: analysis exploded"]
    assert step["monitor_errors"] == ["RuntimeError: analysis exploded"]
    assert "Traceback" in step["details"]["traceback"] and "boom" in step["details"]["traceback"]


def test_report_fits_the_schema(comfy, tiny, pack_runtime, loras_dir):
    import jsonschema

    write_lora(loras_dir, "pm_schema.safetensors", kohya_lora())
    model, clip = load(comfy, tiny, "pm_schema.safetensors")
    _, _, report = run_monitor(
        comfy, pack_runtime, lora_graph("pm_schema.safetensors"), model=model, clip=clip
    )
    schema = json.loads((REPO_ROOT / "schemas" / "run_report.schema.json").read_text())
    jsonschema.validate(json.loads(json.dumps(report.to_dict(), allow_nan=False)), schema)


def test_no_model_patcher_or_tensor_survives_the_node(comfy, tiny, pack_runtime, loras_dir):
    write_lora(loras_dir, "pm_gc.safetensors", kohya_lora())

    def run_once():
        model, clip = load(comfy, tiny, "pm_gc.safetensors")
        refs = [weakref.ref(model), weakref.ref(clip.patcher)]
        refs += [
            weakref.ref(t)
            for entries in model.patches.values()
            for e in entries
            for t in e[1].weights
            if torch.is_tensor(t)
        ]
        output, step, report = run_monitor(
            comfy, pack_runtime, lora_graph("pm_gc.safetensors"), model=model, clip=clip
        )
        assert step["summary"]["model_n_patch_keys_added"] == 7
        return refs, report

    # LoraLoader caches the file it loaded on its instance: a fresh loader per run, dropped here.
    refs, report = run_once()
    gc.collect()
    alive = [r() for r in refs if r() is not None]
    assert alive == [], [type(a).__name__ for a in alive]
    assert report.steps  # the report itself is still there, holding plain data only

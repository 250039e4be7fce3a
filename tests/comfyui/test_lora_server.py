"""PipelineMonitorLora on the real headless server: tiny WAN 2.1 -> LoraLoaderModelOnly with a LoRA
that has planted unmatched keys -> the monitor -> KSampler. The report's counts equal the planted
truth, and the sampled latent is bit-identical to the same sampler fed without the monitor."""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import save_file

pytestmark = pytest.mark.comfyui

WAN = "pm_tiny_wan21.safetensors"
LORA = "pm_lora_planted_wan.safetensors"
FOREIGN = "pm_lora_foreign_wan.safetensors"
RANK = 4
# Tiny WAN 2.1 (scripts/make_tiny_models.py): dim 128, ffn 256, 2 layers.
WAN_TARGETS = {
    f"blocks_{b}_{name}": shape
    for b in range(2)
    for name, shape in {
        **{f"{attn}_{p}": (128, 128) for attn in ("self_attn", "cross_attn") for p in "qkvo"},
        "ffn_0": (256, 128),
        "ffn_2": (128, 256),
    }.items()
}
PLANTED_UNMATCHED = {
    "lora_unet_blocks_7_self_attn_q.lora_down.weight": (RANK, 128),  # a 7th block: a bigger model
    "lora_unet_blocks_7_self_attn_q.lora_up.weight": (128, RANK),
    "lora_unet_blocks_7_self_attn_q.alpha": (),
    "lora_unet_vace_blocks_0_after_proj.lora_down.weight": (RANK, 128),  # a VACE model's layer
    "lora_unet_vace_blocks_0_after_proj.lora_up.weight": (128, RANK),
    "lora_te_text_model_encoder_layers_0_mlp_fc1.lora_down.weight": (RANK, 32),  # text encoder
}
N_MATCHED = 3 * len(WAN_TARGETS)  # down, up, alpha per target
SAMPLER = {"seed": 7, "steps": 2, "cfg": 2.0, "sampler_name": "euler", "scheduler": "simple", "denoise": 1.0}


def tensor(shape, seed):
    if shape == ():
        return torch.tensor(float(RANK))
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 0.2


def write_loras(base):
    folder = base / "models" / "loras"
    folder.mkdir(parents=True, exist_ok=True)
    lora = {}
    for i, (name, (out_dim, in_dim)) in enumerate(sorted(WAN_TARGETS.items())):
        lora[f"lora_unet_{name}.lora_down.weight"] = tensor((RANK, in_dim), 2 * i)
        lora[f"lora_unet_{name}.lora_up.weight"] = tensor((out_dim, RANK), 2 * i + 1)
        lora[f"lora_unet_{name}.alpha"] = tensor((), 0)
    planted = {
        key: tensor(shape, 1000 + i) for i, (key, shape) in enumerate(sorted(PLANTED_UNMATCHED.items()))
    }
    save_file(
        {**lora, **planted},
        str(folder / LORA),
        metadata={"ss_network_dim": str(RANK), "ss_base_model_version": "wan_2.1"},
    )
    save_file(planted, str(folder / FOREIGN))


def sampler(model_link, latent_link="6"):
    return {
        "class_type": "KSampler",
        "inputs": {
            **SAMPLER,
            "model": model_link,
            "positive": ["4", 0],
            "negative": ["5", 0],
            "latent_image": [latent_link, 0],
        },
    }


def main_graph():
    return {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN, "weight_dtype": "default"}},
        "2": {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": LORA, "strength_model": 0.75},
        },
        "3": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["2", 0]}},
        "4": {
            "class_type": "PMTestConditioning",
            "inputs": {"tokens": 512, "hidden": 4096, "pooled_size": 0, "seed": 1},
        },
        "5": {
            "class_type": "PMTestConditioning",
            "inputs": {"tokens": 512, "hidden": 4096, "pooled_size": 0, "seed": 2},
        },
        "6": {
            "class_type": "EmptyHunyuanLatentVideo",
            "inputs": {"width": 32, "height": 32, "length": 1, "batch_size": 1},
        },
        "7": sampler(["3", 0]),  # through the monitor
        "8": sampler(["2", 0]),  # the same LoRA'd model, without the monitor
        "9": sampler(["1", 0]),  # no LoRA at all
        "10": {"class_type": "PMTestLatentDigest", "inputs": {"samples": ["7", 0]}},
        "11": {"class_type": "PMTestLatentDigest", "inputs": {"samples": ["8", 0]}},
        "12": {"class_type": "PMTestLatentDigest", "inputs": {"samples": ["9", 0]}},
    }


@pytest.fixture(scope="module")
def lora_runs(server):
    write_loras(server.base)
    runs = []
    for _ in range(2):  # the second run is served from ComfyUI's cache
        prompt_id, history = server.run(main_graph())
        runs.append((prompt_id, history, server.get_json(f"/pipeline_monitor/runs/{prompt_id}")))
    return runs


def lora_step(report):
    steps = [s for s in report["steps"] if s["kind"] == "lora"]
    assert len(steps) == 1, report["steps"]
    return steps[0]


def test_node_is_registered(server):
    info = server.get_json("/object_info/PipelineMonitorLora")["PipelineMonitorLora"]
    assert info["output_node"] is True and info["output"] == ["MODEL", "CLIP"]
    assert set(info["input"]["required"]) == {"model"}
    assert set(info["input"]["optional"]) == {"clip", "model_before", "clip_before"}
    assert info["category"] == "pipeline_monitor"


def test_sampled_latent_is_identical_with_and_without_the_monitor(lora_runs):
    _, history, _ = lora_runs[0]
    assert history["status"]["status_str"] == "success", history["status"]
    outputs = history["outputs"]
    through_monitor, direct, no_lora = (outputs[n]["sha256"][0] for n in ("10", "11", "12"))
    assert through_monitor == direct
    assert no_lora != direct  # the LoRA changed the result, so the comparison means something
    assert outputs["10"]["shape"] == [[1, 16, 1, 4, 4]]


def test_report_counts_equal_the_planted_truth(server, lora_runs):
    _, history, report = lora_runs[0]
    step = lora_step(report)
    assert step["node_id"] == "3" and step["monitor_errors"] == [] and not step["cached"]
    summary = step["summary"]
    assert summary["n_file_keys"] == N_MATCHED + len(PLANTED_UNMATCHED)
    assert summary["n_matched_keys"] == N_MATCHED
    assert summary["n_unmatched_keys"] == len(PLANTED_UNMATCHED)
    assert summary["model_n_patch_keys_added"] == len(WAN_TARGETS) and summary["model_n_hops"] == 1
    assert summary["success"] is True and summary["clip_n_patch_keys_added"] is None
    (loader,) = step["details"]["loaders"]
    assert (loader["node_id"], loader["class_type"], loader["lora_name"]) == (
        "2",
        "LoraLoaderModelOnly",
        LORA,
    )
    assert loader["strength_model"] == 0.75 and loader["model_hop_index"] == 0
    assert loader["profile"]["node_id"] == "2" and loader["profile"]["duration_s"] > 0
    assert loader["file"]["exists"] and loader["file"]["size_bytes"] > 0
    assert loader["file"]["network"]["base_model"] == "wan_2.1"
    coverage = loader["coverage"]
    assert set(coverage["unmatched_keys"]) == set(PLANTED_UNMATCHED)
    assert coverage["n_unmatched_text_encoder_keys"] == 1
    # ComfyUI's own log agrees: the loader logged exactly these keys as not loaded.
    logged = set(re.findall(r"lora key not loaded: (\S+)", server.log()))
    assert set(PLANTED_UNMATCHED) <= logged
    rows = step["details"]["model"]["hops"][0]["keys"]
    assert {r["type"] for r in rows} == {"lora"} and {r["strength"] for r in rows} == {0.75}
    assert all(r["delta_norm"] > 0 and r["relative_change"] > 0 for r in rows)
    findings = {f["code"]: f for f in step["findings"]}
    assert set(findings) == {"lora_keys_unmatched", "lora_text_encoder_keys"}
    assert findings["lora_keys_unmatched"]["message"].endswith("5 of 66 keys unmatched, ComfyUI ignores them (their names are in the report, by block)")
    text = history["outputs"]["3"]["text"][0]
    lines = text.splitlines()  # written out, not recomputed with the node's own function
    assert lines[0] == "applied: yes" and f"unmatched keys: {len(PLANTED_UNMATCHED)}" in lines
    assert "file keys: 66" in lines and "5 of 66 keys unmatched" in text


def test_the_monitor_forces_no_rerun(lora_runs):
    _, history, report = lora_runs[1]
    assert history["status"]["status_str"] == "success"
    rows = {row["node_id"]: row for row in report["nodes"]}
    for node_id in ("3", "7", "8"):
        assert rows[node_id]["cached"] is True, rows[node_id]
    assert lora_step(report)["cached"] is True


def test_bad_inputs_are_findings_and_the_prompt_succeeds(server, lora_runs):
    graph = {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN, "weight_dtype": "default"}},
        "2": {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": LORA, "strength_model": 0.0},
        },
        "3": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["2", 0]}},
        "4": {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": FOREIGN, "strength_model": 1.0},
        },
        "5": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["4", 0]}},
    }
    prompt_id, history = server.run(graph)
    assert history["status"]["status_str"] == "success", history["status"]
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    steps = {s["node_id"]: s for s in report["steps"] if s["kind"] == "lora"}
    zero, foreign = steps["3"], steps["5"]
    assert "lora_strength_zero" in [f["code"] for f in zero["findings"]]
    assert zero["summary"]["success"] is False and zero["summary"]["n_loras_skipped"] == 1
    assert "lora_no_key_matched" in [f["code"] for f in foreign["findings"]]
    assert foreign["summary"]["n_matched_keys"] == 0
    assert foreign["summary"]["n_unmatched_keys"] == len(PLANTED_UNMATCHED)
    assert foreign["summary"]["success"] is False


def test_example_workflow_is_valid_against_object_info(server):
    """example_workflows/text_to_image_lora_monitor.json (UI format): every node type exists, every link
    joins an output and an input of the same type, widget values match the declared widgets, and
    the monitor sits between the LoRA loader and everything that uses MODEL and CLIP."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "example_workflows" / "text_to_image_lora_monitor.json"
    workflow = json.loads(path.read_text())
    object_info = server.get_json("/object_info")
    nodes = {node["id"]: node for node in workflow["nodes"]}
    links = {link[0]: link for link in workflow["links"]}
    assert workflow["last_node_id"] == max(nodes) and workflow["last_link_id"] == max(links)
    for node in nodes.values():
        if node["type"] in ("Note", "MarkdownNote"):  # the frontend's own, never in a prompt
            continue
        info = object_info[node["type"]]
        declared = {**info["input"].get("required", {}), **info["input"].get("optional", {})}
        for slot, item in enumerate(node["inputs"]):
            assert declared[item["name"]][0] == item["type"], (node["type"], item)
            if item["link"] is not None:
                link_id, source, source_slot, target, target_slot, link_type = links[item["link"]]
                assert (target, target_slot, link_type) == (node["id"], slot, item["type"])
                assert nodes[source]["outputs"][source_slot]["type"] == item["type"]
                assert link_id in nodes[source]["outputs"][source_slot]["links"]
            else:
                assert item["name"] in info["input"].get("optional", {}), (node["type"], item["name"])
        outputs = [o["type"] for o in node["outputs"]]
        if outputs != info["output"]:
            # ComfyUI 0.33's SaveImage passes its IMAGE on; the workflow, valid on 0.8 too, lacks it:
            # only a core output node may lack outputs added since, and only at the end.
            assert info.get("output_node") and not node["type"].startswith("PipelineMonitor"), node["type"]
            assert outputs == info["output"][: len(outputs)], node["type"]
        order = info["input_order"]["required"] + info["input_order"].get("optional", [])
        widgets = [
            name
            for name in order
            if isinstance(declared[name][0], list)
            or declared[name][0] in ("INT", "FLOAT", "STRING", "BOOLEAN", "COMBO")
        ]
        controls = sum(
            1
            for name in widgets
            if (declared[name][1] if len(declared[name]) > 1 else {}).get("control_after_generate")
        )
        assert len(node["widgets_values"]) == len(widgets) + controls, node["type"]
    monitor = next(n for n in nodes.values() if n["type"] == "PipelineMonitorLora")
    sources = {
        item["name"]: nodes[links[item["link"]][1]]["type"] for item in monitor["inputs"] if item["link"]
    }
    assert sources == {"model": "LoraLoader", "clip": "LoraLoader"}
    users = {nodes[links[link][3]]["type"] for output in monitor["outputs"] for link in output["links"]}
    assert users == {"KSampler", "CLIPTextEncode", "PipelineMonitorConditioning"}

    def feeders(node_type):
        node = next(n for n in nodes.values() if n["type"] == node_type)
        return {
            item["name"]: nodes[links[item["link"]][1]]["type"] for item in node["inputs"] if item["link"]
        }

    assert feeders("PipelineMonitorModels") == dict.fromkeys(
        ("model", "clip", "vae"), "CheckpointLoaderSimple"
    )
    assert feeders("PipelineMonitorConditioning") == {
        "positive": "CLIPTextEncode",
        "negative": "CLIPTextEncode",
        "clip": "PipelineMonitorLora",
    }
    assert feeders("KSampler")["positive"] == "PipelineMonitorConditioning"


def test_model_events_first_loads_then_none_when_cached(lora_runs):
    """The model manager's loads in the first run (ComfyUI's own loaded_size(), in-process tests
    check the bytes); the identical second run is served from the cache: no load at all."""
    residency = lora_runs[0][2]["model_residency"]
    loads = [e for e in residency["events"] if e["kind"].startswith("load_")]
    assert loads and all(e["bytes_moved"] > 0 and e["first_load"] for e in loads[:1])
    assert {e["node_id"] for e in loads} <= {"7", "8", "9"}
    assert residency["resident_at_end"] and residency["weights_loaded_bytes"] > 0
    again = lora_runs[1][2]["model_residency"]
    assert again["events"] == [] and again["n_loads"] == 0 and again["weights_moved_s"] == 0


def test_a_lora_strength_change_names_the_unpatch_and_the_patch(server, lora_runs):
    residencies = []
    for strength in (0.5, 0.6):  # the first run may follow the base model's sampler: no unpatch there
        graph = main_graph()
        graph["2"]["inputs"]["strength_model"] = strength
        for unused in ("8", "9", "11", "12"):
            del graph[unused]
        prompt_id, history = server.run(graph)
        assert history["status"]["status_str"] == "success"
        residencies.append(server.get_json(f"/pipeline_monitor/runs/{prompt_id}")["model_residency"])
    residency = residencies[1]
    kinds = [(e["kind"], e["node_id"], e["n_weights"]) for e in residency["events"]]
    assert ("unpatch", "7", len(WAN_TARGETS)) in kinds and ("patch", "7", len(WAN_TARGETS)) in kinds, kinds
    (finding,) = [f for f in residency["findings"] if f["code"] == "lora_repatched"]
    assert f"{len(WAN_TARGETS)} weights unpatched and {len(WAN_TARGETS)} patched again" in finding["message"]

"""PipelineMonitorVAEEncode on the real headless server: same latent as core VAEEncode / VAEEncodeTiled
on the same input, the `vae_encode` report step, and the example image-to-video workflow."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.comfyui

WAN_VAE = "pm_tiny_wan21_vae.safetensors"
WORKFLOWS = Path(__file__).resolve().parents[2] / "example_workflows"
TILES = {"tile_size": 512, "overlap": 64, "temporal_size": 64, "temporal_overlap": 8}


def side_by_side(strategy: str, core: str, frames: int = 9, **tiles) -> dict:
    """Node 3 (ours) and node 4 (core) encode the same pixels; 5 and 6 digest their latents."""
    tiles = {**TILES, **tiles}
    core_inputs = {"pixels": ["1", 0], "vae": ["2", 0]}
    if core == "VAEEncodeTiled":
        core_inputs.update(tiles)
    return {
        "1": {
            "class_type": "PMTestNoiseImage",
            "inputs": {"width": 64, "height": 64, "frames": frames, "channels": 3, "seed": 3},
        },
        "2": {"class_type": "VAELoader", "inputs": {"vae_name": WAN_VAE}},
        "3": {
            "class_type": "PipelineMonitorVAEEncode",
            "inputs": {
                "pixels": ["1", 0],
                "vae": ["2", 0],
                "strategy": strategy,
                "allow_dummy": False,
                **tiles,
            },
        },
        "4": {"class_type": core, "inputs": core_inputs},
        "5": {"class_type": "PMTestLatentDigest", "inputs": {"samples": ["3", 0]}},
        "6": {"class_type": "PMTestLatentDigest", "inputs": {"samples": ["4", 0]}},
    }


def run_and_report(server, prompt):
    prompt_id, history = server.run(prompt)
    assert history["status"]["status_str"] == "success", history["status"]
    return history, server.get_json(f"/pipeline_monitor/runs/{prompt_id}")


def vae_steps(report):
    return [s for s in report["steps"] if s["kind"] == "vae_encode"]


@pytest.mark.parametrize(
    "strategy, core, tiles",
    [("direct", "VAEEncode", {}), ("auto", "VAEEncode", {}), ("tiled", "VAEEncodeTiled", {"tile_size": 64})],
)
def test_same_latent_as_core_on_the_server(server, strategy, core, tiles):
    history, report = run_and_report(server, side_by_side(strategy, core, **tiles))
    ours, theirs = history["outputs"]["5"], history["outputs"]["6"]
    assert ours["shape"] == [[1, 16, 3, 8, 8]]
    assert ours == theirs, (ours, theirs)
    (step,) = vae_steps(report)
    assert step["node_id"] == "3"
    s = step["summary"]
    assert s["strategy_requested"] == strategy
    assert s["strategy_used"] == ("tiled" if strategy == "tiled" else "direct")
    assert s["latent_type"] == "video" and s["latent_shape"] == [1, 16, 3, 8, 8]
    assert s["temporal_compression_ratio"] == 3.0 and s["spatial_compression_ratio"] == 64.0
    assert s["peak_rss_bytes"] > 0 and s["frames_per_s"] > 0
    text = history["outputs"]["3"]["text"]
    # The node's text, written out: not the function the node itself calls.
    lines = text[0].splitlines()
    assert len(text) == 1 and lines[:2] == [f"strategy used: {s['strategy_used']}", f"strategy requested: {strategy}"]
    assert {"latent type: video", "latent shape: [1, 16, 3, 8, 8]", "attempts: 1", "out of memory: 0"} <= set(lines)
    rows = {row["node_id"]: row for row in report["nodes"]}
    assert rows["3"]["class_type"] == "PipelineMonitorVAEEncode" and rows["3"]["status"] == "executed"


def test_schema_matches_core_tiled_defaults(server):
    ours = server.get_json("/object_info/PipelineMonitorVAEEncode")["PipelineMonitorVAEEncode"]
    core = server.get_json("/object_info/VAEEncodeTiled")["VAEEncodeTiled"]
    assert ours["output"] == ["LATENT"] and ours["category"] == "pipeline_monitor"
    required = ours["input"]["required"]
    assert list(required)[:2] == ["pixels", "vae"]
    assert required["strategy"][1]["default"] == "auto"
    assert required["strategy"][1]["options"] == ["auto", "direct", "tiled", "cpu"]
    assert required["allow_dummy"][1]["default"] is False
    for name in TILES:
        for key in ("default", "min", "max", "step"):
            expected = core["input"]["required"][name][1][key]
            if key == "min" and name in ("tile_size", "temporal_size"):
                expected = 0  # ours only: 0 asks for ComfyUI's own retry tiling (see the tooltips)
            assert required[name][1][key] == expected, (name, key)
    assert "0: ComfyUI's own retry tiling" in required["tile_size"][1]["tooltip"]


def test_empty_batch_fails_with_a_clear_error_and_an_error_step(server):
    prompt = side_by_side("auto", "VAEEncode", frames=0)
    del prompt["4"], prompt["6"]
    prompt_id, history = server.run(prompt)
    assert history["status"]["status_str"] == "error"
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    assert report["error"]["node_id"] == "3"
    assert "VAEEncodeInputError" in report["error"]["exception_type"]
    assert "Empty image batch" in report["error"]["exception_message"]
    (step,) = vae_steps(report)
    assert [f["code"] for f in step["findings"] if f["level"] == "error"] == ["empty_batch"]


def ui_to_api(ui: dict, object_info: dict) -> dict:
    """The API prompt a UI-format workflow describes: links by id, widget values in input order."""
    links = {link[0]: link for link in ui["links"]}
    prompt = {}
    for node in ui["nodes"]:
        if node["type"] in ("Note", "MarkdownNote"):  # the frontend's own, never in a prompt
            continue
        spec = object_info[node["type"]]["input"]
        declared = {**spec.get("required", {}), **spec.get("optional", {})}
        inputs = {
            i["name"]: [str(links[i["link"]][1]), links[i["link"]][2]] for i in node["inputs"] if i["link"]
        }
        socket_names = {i["name"] for i in node["inputs"]}
        widgets = [name for name in declared if name not in socket_names]
        inputs.update(zip(widgets, node["widgets_values"], strict=True))
        prompt[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    return prompt


def test_image_to_video_workflow_runs_and_matches_its_api_copy(server):
    ui = json.loads((WORKFLOWS / "image_to_video_vae_chain.json").read_text())
    api = json.loads((WORKFLOWS / "api" / "image_to_video_vae_chain.json").read_text())
    object_info = server.get_json("/object_info")
    assert all(node["type"] in object_info for node in ui["nodes"] if node["type"] != "Note")
    converted = ui_to_api(ui, object_info)
    assert converted == {k: {"class_type": v["class_type"], "inputs": v["inputs"]} for k, v in api.items()}
    assert len(ui["links"]) == ui["last_link_id"] and max(n["id"] for n in ui["nodes"]) == ui["last_node_id"]
    history, report = run_and_report(server, api)
    encode_ids = [k for k, v in api.items() if v["class_type"] == "PipelineMonitorVAEEncode"]
    steps = {s["node_id"]: s for s in vae_steps(report)}
    assert set(encode_ids) <= set(steps)
    for node_id in encode_ids:
        s = steps[node_id]["summary"]
        assert s["strategy_used"] == "direct" and s["latent_shape"] == [1, 16, 3, 32, 32]
        assert not [f for f in steps[node_id]["findings"] if f["level"] == "error"]

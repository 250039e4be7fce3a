"""A real headless ComfyUI server with the pack, the test pack and tiny WAN 2.1 model files."""

from __future__ import annotations

import re
import shutil

import pytest

pytestmark = pytest.mark.comfyui

# Copies of the tiny files under names no other test uses: the session server is shared, and a
# loader another test already ran with the same file would be served from ComfyUI's cache.
WAN = "pm_tiny_wan21_server_test.safetensors"
WAN_VAE = "pm_tiny_wan21_vae_server_test.safetensors"
# 4 sees the monitor's outputs, 5 the loaders' outputs directly: equal ids = same objects.
PIPELINE = {
    "1": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN, "weight_dtype": "default"}},
    "2": {"class_type": "VAELoader", "inputs": {"vae_name": WAN_VAE}},
    "3": {"class_type": "PipelineMonitorModels", "inputs": {"model": ["1", 0], "vae": ["2", 0]}},
    "4": {"class_type": "PMTestObjectId", "inputs": {"model": ["3", 0], "vae": ["3", 2]}},
    "5": {"class_type": "PMTestObjectId", "inputs": {"model": ["1", 0], "vae": ["2", 0]}},
}
FAILING = {
    "11": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0}},
    "12": {"class_type": "PMTestRaise", "inputs": {"image": ["11", 0], "message": "pm boom"}},
}


@pytest.fixture(scope="session")
def pipeline_runs(server):
    """The pipeline queued twice in a row (the second run is served from ComfyUI's cache)."""
    models = server.base / "models"
    for folder, source, copy in (
        ("diffusion_models", "pm_tiny_wan21.safetensors", WAN),
        ("vae", "pm_tiny_wan21_vae.safetensors", WAN_VAE),
    ):
        if not (models / folder / copy).exists():
            shutil.copyfile(models / folder / source, models / folder / copy)
    runs = []
    for _ in range(2):
        prompt_id, history = server.run(PIPELINE)
        runs.append((prompt_id, history, server.get_json(f"/pipeline_monitor/runs/{prompt_id}")))
    return runs


def rows_by_id(report):
    return {row["node_id"]: row for row in report["nodes"]}


def test_packs_import_cleanly(server):
    log = server.log()
    startup = log.split("Starting server", 1)[0]
    for folder in ("pipeline-monitor", "pm_testing_pack"):
        lines = [
            line
            for line in startup.splitlines()
            if re.search(rf"seconds.*: .*custom_nodes[/\\]{folder}$", line)
        ]
        assert len(lines) == 1, f"no import line for {folder}:\n{startup[-3000:]}"
        assert "IMPORT FAILED" not in lines[0]
    # The pack says nothing while ComfyUI starts (no warning, no traceback).
    assert not re.search(
        r"pipeline[ _]monitor", startup.replace("custom_nodes/pipeline-monitor", ""), re.I
    ), startup
    info = server.get_json("/object_info/PipelineMonitorModels")["PipelineMonitorModels"]
    assert info["output_node"] is True
    assert info["output"] == ["MODEL", "CLIP", "VAE"]
    # every monitor reports even when its outputs are not connected (README's promise)
    pack_nodes = {
        name: node
        for name, node in server.get_json("/object_info").items()
        if node.get("category") == "pipeline_monitor"
    }
    assert len(pack_nodes) >= 7, sorted(pack_nodes)
    assert {name for name, node in pack_nodes.items() if node["output_node"] is not True} == set()


def test_pipeline_succeeds_and_passes_the_same_objects(pipeline_runs):
    _, history, report = pipeline_runs[0]
    assert history["status"]["status_str"] == "success", history["status"]
    outputs = history["outputs"]
    assert outputs["4"] == outputs["5"], outputs
    assert set(outputs["4"]) == {"model", "vae"}
    objects = [s for s in report["steps"] if s["kind"] == "models"][0]["details"]["objects"]
    assert [str(objects["model"]["object_id"])] == outputs["4"]["model"]
    assert [str(objects["vae"]["object_id"])] == outputs["4"]["vae"]


def test_every_executed_node_has_time_and_peak_rss(pipeline_runs):
    prompt_id, _, report = pipeline_runs[0]
    assert report["prompt_id"] == prompt_id
    assert report["status"] == "success" and report["error"] is None
    rows = rows_by_id(report)
    assert set(rows) == set(PIPELINE)
    for node_id, row in rows.items():
        assert row["status"] == "executed" and row["cached"] is False, row
        assert row["class_type"] == PIPELINE[node_id]["class_type"]
        assert row["duration_s"] is not None and row["duration_s"] > 0, row
        assert row["peak_rss_bytes"] is not None and row["peak_rss_bytes"] > 0, row
        assert row["peak_rss_method"], row


def test_models_step_lists_both_objects_with_loader_times(pipeline_runs):
    _, _, report = pipeline_runs[0]
    steps = [s for s in report["steps"] if s["kind"] == "models"]
    assert len(steps) == 1 and steps[0]["node_id"] == "3"
    step = steps[0]
    objects = step["details"]["objects"]
    assert set(objects) == {"model", "vae"}
    assert objects["model"]["module_class"] == "WAN21" and objects["model"]["class"] == "ModelPatcher"
    assert objects["vae"]["module_class"] == "WanVAE" and objects["vae"]["latent_channels"] == 16
    for info in objects.values():
        assert info["size_bytes"] > 1_000_000 and info["device"] == "cpu"
    rows = rows_by_id(report)
    loaders = step["details"]["loaders"]
    assert loaders["model"]["node_id"] == "1" and loaders["model"]["class_type"] == "UNETLoader"
    assert loaders["vae"]["node_id"] == "2" and loaders["vae"]["class_type"] == "VAELoader"
    for kind, node_id in (("model", "1"), ("vae", "2")):
        assert loaders[kind]["duration_s"] == rows[node_id]["duration_s"] > 0
        assert loaders[kind]["cached"] is False
    assert step["summary"]["loaders_duration_s"] == pytest.approx(
        rows["1"]["duration_s"] + rows["2"]["duration_s"]
    )
    assert step["summary"]["n_objects"] == 2


def test_requeued_prompt_is_cached_and_nothing_downstream_reruns(pipeline_runs):
    (first_id, first_history, _), (second_id, history, report) = pipeline_runs
    assert second_id != first_id
    assert history["status"]["status_str"] == "success"
    assert history["outputs"] == first_history["outputs"]  # the cached ui, same objects
    assert report["status"] == "success"
    rows = rows_by_id(report)
    assert {"3", "4", "5"} <= set(rows), rows
    for row in rows.values():
        assert row["status"] == "cached" and row["cached"] is True, row
        assert row["duration_s"] is None, row


def test_runs_list_and_api_mirror(server, pipeline_runs):
    ids = [run[0] for run in pipeline_runs]
    listing = server.get_json("/pipeline_monitor/runs")
    mirror = server.get_json("/api/pipeline_monitor/runs")
    assert [r["prompt_id"] for r in mirror["runs"]] == [r["prompt_id"] for r in listing["runs"]]
    listed = {r["prompt_id"]: r for r in listing["runs"]}
    assert set(ids) <= set(listed)
    assert listed[ids[0]]["status"] == "success" and listed[ids[0]]["n_nodes"] == len(PIPELINE)
    assert mirror["profile_enabled"] is True
    assert server.get_json(f"/api/pipeline_monitor/runs/{ids[0]}") == pipeline_runs[0][2]


@pytest.mark.parametrize("run_id", ["no-such-run-0123", "..%2F..%2Fetc%2Fpasswd", "x" * 200])
def test_unknown_run_is_a_404_json(server, run_id):
    for prefix in ("", "/api"):
        response = server.get(f"{prefix}/pipeline_monitor/runs/{run_id}")
        assert response.status_code == 404
        assert response.headers["Content-Type"].startswith("application/json")
        assert "error" in response.json()


def test_runtime_failure_gives_an_error_report(server, pipeline_runs):
    prompt_id, history = server.run(FAILING)
    assert history["status"]["status_str"] == "error"
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    assert report["status"] == "error"
    error = report["error"]
    assert error["node_id"] == "12" and error["node_type"] == "PMTestRaise"
    assert "RuntimeError" in error["exception_type"] and "pm boom" in error["exception_message"]
    rows = rows_by_id(report)
    assert rows["11"]["status"] == "executed"
    assert rows["12"]["status"] == "error" and rows["12"]["duration_s"] is not None


def test_demo_workflow_runs_and_matches_its_ui_copy(server):
    """example_workflows/api/models_profile_demo.json (queued by scripts/demo.sh) runs, and the UI-format
    copy in example_workflows/ describes the same graph: node types, links and widget values."""
    import json
    from pathlib import Path

    workflows = Path(__file__).resolve().parents[2] / "example_workflows"
    api = json.loads((workflows / "api" / "models_profile_demo.json").read_text())
    ui = json.loads((workflows / "models_profile_demo.json").read_text())
    object_info = server.get_json("/object_info")
    links = {link[0]: link for link in ui["links"]}
    # Note nodes are the frontend's own (what to look at); they never reach a prompt
    nodes = [n for n in ui["nodes"] if n["type"] not in ("Note", "MarkdownNote")]
    assert any(n["type"] == "Note" for n in ui["nodes"]), "each example says what to look at"
    assert {str(n["id"]) for n in nodes} == set(api)
    for node in nodes:
        api_node = api[str(node["id"])]
        assert node["type"] == api_node["class_type"] and node["type"] in object_info
        spec = object_info[node["type"]]["input"]
        declared = {**spec.get("required", {}), **spec.get("optional", {})}
        linked = {
            i["name"]: [str(links[i["link"]][1]), links[i["link"]][2]] for i in node["inputs"] if i["link"]
        }
        widgets = [
            name
            for name in declared
            if name not in linked and name not in {i["name"] for i in node["inputs"]}
        ]
        assert {**linked, **dict(zip(widgets, node["widgets_values"], strict=True))} == api_node["inputs"], (
            node["type"]
        )
    prompt_id, history = server.run(api)
    assert history["status"]["status_str"] == "success", history["status"]
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    assert report["status"] == "success"
    assert [s["kind"] for s in report["steps"]] == ["models"]
    rows = {row["class_type"]: row for row in report["nodes"]}
    for class_type in ("VAEEncode", "VAEDecode", "SaveImage"):
        assert rows[class_type]["status"] == "executed" and rows[class_type]["duration_s"] > 0


def test_cached_loader_is_reported_as_cached_in_the_models_step(server, pipeline_runs):
    # The loader runs in the first prompt; a new monitor over it runs while it is cached.
    server.run({"2": PIPELINE["2"], "30": {"class_type": "PMTestObjectId", "inputs": {"vae": ["2", 0]}}})
    prompt = {
        "2": PIPELINE["2"],
        "31": {"class_type": "PipelineMonitorModels", "inputs": {"vae": ["2", 0]}},
    }
    prompt_id, history = server.run(prompt)
    assert history["status"]["status_str"] == "success"
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    step = [s for s in report["steps"] if s["kind"] == "models" and s["node_id"] == "31"][0]
    assert step["cached"] is False
    assert step["details"]["loaders"]["vae"]["cached"] is True
    assert rows_by_id(report)["2"]["cached"] is True

"""A real headless server: EmptyLatentImage -> PipelineMonitorLatent -> PipelineMonitorTensorDump,
then PipelineMonitorTensorCompare of the dumps in a second prompt; the report steps, the combo list,
validation errors, and downloading a dump through the route."""

from __future__ import annotations

import uuid

import pytest
import requests

pytestmark = pytest.mark.comfyui

TAG = uuid.uuid4().hex[:6]
LATENT_A, LATENT_LARGE = f"pm_srv_latent_a_{TAG}", f"pm_srv_latent_large_{TAG}"
COND_1, COND_2 = f"pm_srv_cond_1_{TAG}", f"pm_srv_cond_2_{TAG}"
LIVE = "(live value)"


def wan_cond(seed):
    return {
        "class_type": "PMTestConditioning",
        "inputs": {"tokens": 512, "hidden": 4096, "pooled_size": 0, "seed": seed},
    }


def dump_node(name, **links):
    return {"class_type": "PipelineMonitorTensorDump", "inputs": {"name": name, "npy": False, **links}}


DUMPS = {
    "1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "2": {"class_type": "PipelineMonitorLatent", "inputs": {"latent": ["1", 0]}},
    "3": dump_node(LATENT_A, latent=["2", 0]),
    "4": {"class_type": "EmptyLatentImage", "inputs": {"width": 128, "height": 128, "batch_size": 1}},
    "5": dump_node(LATENT_LARGE, latent=["4", 0]),
    "6": wan_cond(1),
    "7": dump_node(COND_1, conditioning=["6", 0]),
    "8": wan_cond(2),
    "9": dump_node(COND_2, conditioning=["8", 0]),
}


def compare_node(a, b, **links):
    inputs = {"dump_a": f"{a}.safetensors", "dump_b": b if b == LIVE else f"{b}.safetensors"}
    return {
        "class_type": "PipelineMonitorTensorCompare",
        "inputs": {**inputs, "rtol": 1e-5, "atol": 1e-8, **links},
    }


COMPARES = {
    "11": compare_node(LATENT_A, LATENT_LARGE),
    "12": compare_node(COND_1, COND_2),
    "13": wan_cond(1),
    "14": compare_node(COND_1, LIVE, conditioning=["13", 0]),
}


@pytest.fixture(scope="module")
def runs(server):
    dump_id, dump_history = server.run(DUMPS)
    compare_id, compare_history = server.run(COMPARES)
    return {
        "dump": (dump_history, server.get_json(f"/pipeline_monitor/runs/{dump_id}")),
        "compare": (compare_history, server.get_json(f"/pipeline_monitor/runs/{compare_id}")),
    }


def steps_by_node(report):
    return {s["node_id"]: s for s in report["steps"]}


def test_dump_prompt_reports_latent_and_dump_steps(runs):
    history, report = runs["dump"]
    assert history["status"]["status_str"] == "success", history["status"]
    assert report["status"] == "success"
    steps = steps_by_node(report)
    assert steps["2"]["kind"] == "latent"
    latent = steps["2"]["summary"]
    assert latent["shape"] == [1, 4, 8, 8] and latent["family"] == "SD1 / SD2 / SDXL"
    assert latent["source_class"] == "EmptyLatentImage" and latent["has_noise_mask"] is False
    for node_id, name, n_tensors in (("3", LATENT_A, 1), ("5", LATENT_LARGE, 1), ("7", COND_1, 1)):
        step = steps[node_id]
        assert step["kind"] == "tensor_dump" and step["summary"]["written"], step
        assert step["summary"]["file_name"] == f"{name}.safetensors"
        assert step["summary"]["n_tensors"] == n_tensors
        assert history["outputs"][node_id]["dump"] == [f"{name}.safetensors"]
        lines = history["outputs"][node_id]["text"][0].splitlines()  # written out, not recomputed
        # A writer thread writes the file: the node's text says "written: yes" only when the writer
        # was done before the node returned; the report (the prompt's end waits for it) says yes.
        lines = [line for line in lines[:3] if line != "written: yes"]
        assert lines[:2] == [f"file: {name}.safetensors", f"tensors: {n_tensors}"]
        assert step["details"]["write"]["state"] == "written", step["details"]["write"]
    assert steps["7"]["summary"]["encoder_family"].startswith("WAN")
    assert history["outputs"]["2"]["text"][0].splitlines()[:3] == [
        "latent type: image",
        "shape: [1, 4, 8, 8]",
        "latent family: SD1 / SD2 / SDXL",
    ]


def test_dumps_land_in_the_output_folder_only(server, runs):
    dumps = server.base / "output" / "pipeline_monitor" / "dumps"
    for name in (LATENT_A, LATENT_LARGE, COND_1, COND_2):
        assert (dumps / f"{name}.safetensors").is_file()
    assert not list(dumps.glob(".tmp-*"))


def test_compare_prompt_gives_verdicts(runs):
    history, report = runs["compare"]
    assert history["status"]["status_str"] == "success", history["status"]
    steps = steps_by_node(report)
    assert {s["kind"] for s in steps.values()} == {"tensor_compare"}
    expected = {"11": "incompatible", "12": "different", "14": "identical"}
    for node_id, status in expected.items():
        step = steps[node_id]
        assert step["summary"]["status"] == status and step["pending"] is False, step["summary"]
        # compared on the writer thread: the report (the prompt's end waits for it) has the verdict;
        # the node returned it only when the comparison was done before the node returned
        assert step["details"]["work"]["state"] == "done" and step["details"]["work"]["background"] is True
        lines = history["outputs"][node_id]["text"][0].splitlines()
        assert lines[0] == f"status: {status}" and lines[1].startswith("verdict: ") or lines[-1].startswith(
            "tensor_compare: comparing on the dump writer's thread"
        ), lines
    assert report["complete"] is True
    assert "[1, 4, 8, 8] vs [1, 4, 16, 16]" in steps["11"]["summary"]["verdict"]
    assert steps["12"]["summary"]["min_cosine_similarity"] < 0.1  # two unrelated seeds
    assert steps["14"]["details"]["b"]["live"] is True


def test_combo_lists_the_new_dumps(server, runs):
    info = server.get_json("/object_info/PipelineMonitorTensorCompare")["PipelineMonitorTensorCompare"]
    options = info["input"]["required"]["dump_a"][1]["options"]
    # listed without the suffix: a value ending in .safetensors is a model file to the frontend
    assert {LATENT_A, LATENT_LARGE, COND_1, COND_2} <= set(options)
    assert not any(option.endswith(".safetensors") for option in options)
    assert info["input"]["required"]["dump_b"][1]["options"][0] == LIVE
    assert info["output_node"] is True and info["output"] == []


def test_download_through_the_route(server, runs):
    from safetensors.torch import load

    for prefix in ("", "/api"):
        response = server.get(f"{prefix}/pipeline_monitor/dumps/{LATENT_A}.safetensors")
        assert response.status_code == 200
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        tensors = load(response.content)
        assert list(tensors) == ["latent.samples"] and tensors["latent.samples"].shape == (1, 4, 8, 8)
    listing = server.get_json("/pipeline_monitor/dumps")["dumps"]
    assert f"{LATENT_A}.safetensors" in {row["name"] for row in listing}


@pytest.mark.parametrize(
    "name",
    [
        "..%2F..%2Fuser%2Fcomfyui.db",
        "%2e%2e%2f%2e%2e%2fserver.log",
        "%252e%252e%252fserver.log",
        "missing.safetensors",
    ],
)
def test_traversal_is_a_404_json(server, runs, name):
    for prefix in ("", "/api"):
        response = server.get(f"{prefix}/pipeline_monitor/dumps/{name}")
        assert response.status_code == 404
        assert response.headers["Content-Type"].startswith("application/json")


def test_bad_dump_name_is_rejected_at_validation(server):
    prompt = {
        "1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        "2": dump_node("../../etc/passwd", latent=["1", 0]),
    }
    response = requests.post(
        f"{server.url}/prompt", json={"prompt": prompt, "client_id": server.client_id}, timeout=10
    )
    assert response.status_code == 400
    errors = response.json()["node_errors"]["2"]["errors"]
    assert any("refused" in e["details"] and "path separator" in e["details"] for e in errors), errors
    assert not (server.base / "etc").exists()


def test_dump_and_compare_workflow_runs_and_matches_its_ui_copy(server):
    """example_workflows/dump_and_compare.json (UI format) and its API copy describe the same graph with node
    types the server knows; queued, the dump is written before the comparison reads it."""
    import json
    from pathlib import Path

    workflows = Path(__file__).resolve().parents[2] / "example_workflows"
    api = json.loads((workflows / "api" / "dump_and_compare.json").read_text())
    ui = json.loads((workflows / "dump_and_compare.json").read_text())
    object_info = server.get_json("/object_info")
    links = {link[0]: link for link in ui["links"]}
    # Note nodes (what to look at) are the frontend's own and never reach a prompt
    nodes = [n for n in ui["nodes"] if n["type"] not in ("Note", "MarkdownNote")]
    assert {str(n["id"]) for n in nodes} == set(api)
    for node in nodes:
        api_node = api[str(node["id"])]
        assert node["type"] == api_node["class_type"] and node["type"] in object_info
        spec = object_info[node["type"]]["input"]
        declared = {**spec.get("required", {}), **spec.get("optional", {})}
        sockets = {i["name"] for i in node["inputs"]}
        assert sockets <= set(declared), node["type"]
        linked = {
            i["name"]: [str(links[i["link"]][1]), links[i["link"]][2]] for i in node["inputs"] if i["link"]
        }
        widgets = [name for name in declared if name not in sockets]
        assert {**linked, **dict(zip(widgets, node["widgets_values"], strict=True))} == api_node["inputs"]
        for output in node["outputs"]:
            for link_id in output["links"]:
                assert links[link_id][1] == node["id"] and links[link_id][5] == output["type"]
    prompt_id, history = server.run(api)
    assert history["status"]["status_str"] == "success", history["status"]
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    assert [s["kind"] for s in report["steps"]] == ["latent", "tensor_dump", "tensor_compare"]
    latent, dumped, compared = report["steps"]
    assert latent["summary"]["family"] == "WAN 2.1 / HunyuanVideo / Kandinsky 5"
    assert dumped["summary"]["file_name"] == "pm_demo_direct.safetensors"
    assert compared["details"]["only_in_a"] == ["image"]
    summary = compared["summary"]
    # Tiled encoding is not bit-equal to direct (tiles are blended): the comparison measures how far.
    assert summary["status"] in ("close", "different"), summary
    assert summary["n_compared"] == 1 and 0 < summary["max_abs_diff"] < 1
    assert 0.5 < summary["min_cosine_similarity"] < 1
    assert compared["details"]["work"]["state"] == "done"


def test_image_to_video_workflow_reports_the_latent_and_dumps_it(server):
    """The latent monitor and dump in example_workflows/image_to_video_vae_chain.json (the UI/API agreement
    is checked by the VAE encode tests): 9 frames -> a 3-frame WAN 2.1 latent, dumped."""
    import json
    from pathlib import Path

    from safetensors.torch import load

    api = json.loads(
        (
            Path(__file__).resolve().parents[2] / "example_workflows" / "api" / "image_to_video_vae_chain.json"
        ).read_text()
    )
    prompt_id, history = server.run(api)
    assert history["status"]["status_str"] == "success", history["status"]
    steps = {s["kind"]: s for s in server.get_json(f"/pipeline_monitor/runs/{prompt_id}")["steps"]}
    latent = steps["latent"]["summary"]
    assert latent["latent_type"] == "video" and latent["shape"] == [1, 16, 3, 32, 32] and latent["n_frames"] == 3
    assert latent["family"] == "WAN 2.1 / HunyuanVideo / Kandinsky 5" and latent["n_nan"] == 0
    assert steps["tensor_dump"]["summary"]["file_name"] == "pm_i2v_latent.safetensors"
    tensors = load(server.get("/pipeline_monitor/dumps/pm_i2v_latent.safetensors").content)
    assert tensors["latent.samples"].shape == (1, 16, 3, 32, 32)


def test_the_verdict_reaches_the_client_that_queued_the_compare(server, runs):
    """The node returns at once; the client that queued the prompt gets each comparison's text
    (`pipeline_monitor.step_text`) unless the node returned the verdict itself."""
    import asyncio
    import json

    import aiohttp

    async def queue_and_listen():
        seen = []
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(f"{server.url}/ws?clientId={server.client_id}")
            prompt_id = await asyncio.to_thread(server.queue, {**COMPARES, "13": wan_cond(uuid.uuid4().int % 1000 + 7)})
            # the texts come after execution_success (the prompt's end waits for the writer), the
            # run's announcement after they were sent
            while not any(k == "pipeline_monitor.run" and d.get("prompt_id") == prompt_id for k, d in seen):
                message = await ws.receive(timeout=120)
                if message.type == aiohttp.WSMsgType.TEXT:
                    event = json.loads(message.data)
                    seen.append((event["type"], event.get("data") or {}))
            await ws.close()
        return prompt_id, seen

    prompt_id, seen = asyncio.run(asyncio.wait_for(queue_and_listen(), timeout=300))
    returned = {d["node"]: d["output"]["text"][0] for k, d in seen if k == "executed" and d.get("prompt_id") == prompt_id}
    pushed = {d["node_id"]: d["text"][0] for k, d in seen if k == "pipeline_monitor.step_text"}
    # "11" and "12" compare dumps that did not change: cached, ComfyUI sends the text they returned
    # before, and the client gets their verdicts again at the run's end
    for node_id, status in (("11", "incompatible"), ("12", "different")):
        assert pushed.get(node_id, returned.get(node_id, "")).splitlines()[0] == f"status: {status}"
    text = pushed.get("14", returned["14"])
    assert text.splitlines()[0] == "status: different", text  # a new seed: a different live value
    if "14" in pushed:  # the pending text came first
        assert "comparing on the dump writer's thread" in returned["14"]
    (step,) = [s for s in server.get_json(f"/pipeline_monitor/runs/{prompt_id}")["steps"] if s["node_id"] == "14"]
    assert step["summary"]["status"] == "different" and step["pending"] is False

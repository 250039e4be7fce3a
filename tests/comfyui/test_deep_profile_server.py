"""Deep profile on demand against a real ComfyUI server: the demo workflow with a tiny WAN sampler
in front of its VAE decode, deep-profiled once through the route; the sampler's convolutions and
matmuls land under KSampler and the VAE's under VAEDecode, the next prompt is plain again, and
the exported trace nests the ops inside the node spans."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import requests

from monitors.cli.commands import main as cli_main

pytestmark = pytest.mark.comfyui

REPO = Path(__file__).resolve().parents[2]
MATRIX_OPS = ("conv", "linear", "mm", "matmul", "addmm", "bmm", "attention")


def demo_with_sampler(seed: int) -> dict:
    prompt = json.loads((REPO / "example_workflows" / "api" / "models_profile_demo.json").read_text())
    prompt["4"]["inputs"].update(width=32, height=32)
    prompt["8"] = {
        "class_type": "PMTestConditioning",
        "inputs": {"tokens": 16, "hidden": 4096, "pooled_size": 0, "seed": 1},
    }
    prompt["9"] = {
        "class_type": "KSampler",
        "inputs": {
            "model": ["3", 0],
            "seed": seed,
            "steps": 2,
            "cfg": 1.0,
            "sampler_name": "euler",
            "scheduler": "simple",
            "denoise": 1.0,
            "positive": ["8", 0],
            "negative": ["8", 0],
            "latent_image": ["5", 0],
        },
    }
    prompt["6"]["inputs"]["samples"] = ["9", 0]
    prompt["7"]["inputs"]["filename_prefix"] = "pm_deep_profile"
    return prompt


def deep_step(report):
    return next((s for s in report["steps"] if s["kind"] == "deep_profile"), None)


@pytest.fixture(scope="module")
def deep_and_plain(server):
    def arm(armed):
        response = requests.post(
            f"{server.url}/pipeline_monitor/deep_profile", json={"armed": armed}, timeout=10
        )
        assert response.status_code == 200, response.text
        return response.json()

    assert arm(True)["armed"] is True
    deep_id, history = server.run(demo_with_sampler(seed=11))
    assert history["status"]["status_str"] == "success", history["status"]
    state = server.get_json("/pipeline_monitor/deep_profile")
    plain_id, history = server.run(demo_with_sampler(seed=12))
    assert history["status"]["status_str"] == "success", history["status"]
    return (
        server.get_json(f"/pipeline_monitor/runs/{deep_id}"),
        state,
        server.get_json(f"/pipeline_monitor/runs/{plain_id}"),
    )


def test_the_sampler_and_the_vae_show_their_own_top_host_ops(deep_and_plain):
    report, _, _ = deep_and_plain
    step = deep_step(report)
    assert step is not None and step["monitor_errors"] == []
    rows = {row["class_type"]: row for row in step["details"]["nodes"]}
    sampler, decode = rows["KSampler"], rows["VAEDecode"]
    for row in (sampler, decode):
        assert row["top_ops_by"] == "host" and row["host_op_time_s"] > 0 and row["device_time_s"] is None
        assert row["device_time_unknown_reason"]
    sampler_ops = [op["name"] for op in sampler["top_ops"]]
    assert any(word in name for name in sampler_ops for word in MATRIX_OPS), sampler_ops
    decode_ops = [op["name"] for op in decode["top_ops"]]
    assert any("conv" in name for name in decode_ops), decode_ops
    assert step["summary"]["n_trace_events"] > 0


def test_the_request_is_used_up_and_the_next_prompt_is_plain(deep_and_plain):
    _, state, plain = deep_and_plain
    assert state["armed"] is False
    assert deep_step(plain) is None


def test_the_run_list_marks_the_deep_run(server, deep_and_plain):
    report, _, plain = deep_and_plain
    runs = {r["prompt_id"]: r for r in server.get_json("/pipeline_monitor/runs")["runs"]}
    assert "deep_profile" in runs[report["prompt_id"]]["step_kinds"]
    assert "deep_profile" not in runs[plain["prompt_id"]]["step_kinds"]


def test_the_trace_export_nests_the_ops_inside_the_node_spans(server, deep_and_plain, tmp_path, capsys):
    report, _, _ = deep_and_plain
    path = server.base / "output" / "pipeline_monitor" / "reports" / f"{report['prompt_id']}.json"
    for _ in range(100):  # the store writes reports in batches after the prompts
        if path.exists():
            break
        time.sleep(0.1)
    out = tmp_path / "deep.trace.json"
    assert cli_main(["trace", str(path), "-o", str(out)]) == 0
    events = json.loads(out.read_text())["traceEvents"]
    spans = {
        (e["tid"], e["args"]["node_id"]): e
        for e in events
        if e.get("ph") == "X" and e.get("cat") not in ("op", "run", "kernel", "node_kernels")
    }
    ops = [e for e in events if e.get("cat") == "op"]
    assert ops
    for op in ops:
        span = spans[(op["tid"], op["args"]["node_id"])]
        assert span["ts"] <= op["ts"] and op["ts"] + op["dur"] <= span["ts"] + span["dur"] + 0.01
    sampler_ids = {n["node_id"] for n in report["nodes"] if n["class_type"] == "KSampler"}
    assert any(op["args"]["node_id"] in sampler_ids for op in ops)
    assert any(e.get("ph") == "C" and e["name"] == "process_rss_bytes" for e in events)

"""A LoRA file's first analysis after the prompt, on the real headless server (issue 35): three
prompts queued back to back, the first with a LoRA file the server has not seen. The first
prompt's report is pending at its `execution_success` (`complete: false`), is complete once its
work ran (`?wait_s=` waits for it), and that work started only after the third prompt had
executed: the queue was not delayed by it (proved by order, never by a time bar).

The two prompts after the first run a slow node (PMTestSlow), so the queue is still busy when the
first prompt's report is read; the LoRA monitor is cached in them: their reports repeat the
pending step and complete with it."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest
import torch
from safetensors.torch import save_file

pytestmark = pytest.mark.comfyui

WAN = "pm_tiny_wan21.safetensors"
RANK = 4
WATCHDOG_S = 300  # a hang watchdog only: the machine may be loaded
SLOW_S = 2.0  # the later prompts' slow node: keeps the queue busy while the first report is read


def write_lora(base, name: str) -> None:
    folder = base / "models" / "loras"
    folder.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(11)
    tensors = {}
    for block in range(2):
        for attn in ("self_attn", "cross_attn"):
            for p in "qkvo":
                key = f"lora_unet_blocks_{block}_{attn}_{p}"
                tensors[f"{key}.lora_down.weight"] = torch.randn(RANK, 128, generator=gen) * 0.1
                tensors[f"{key}.lora_up.weight"] = torch.randn(128, RANK, generator=gen) * 0.1
                tensors[f"{key}.alpha"] = torch.tensor(float(RANK))
    save_file(tensors, str(folder / name))


def graph(lora: str, seed: int, slow_s: float = 0.0) -> dict:
    prompt = {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN, "weight_dtype": "default"}},
        "2": {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": lora, "strength_model": 0.75},
        },
        "3": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["2", 0]}},
        "4": {"class_type": "PMTestConditioning", "inputs": {"tokens": 64, "hidden": 4096, "pooled_size": 0, "seed": 1}},
        "5": {"class_type": "PMTestConditioning", "inputs": {"tokens": 64, "hidden": 4096, "pooled_size": 0, "seed": 2}},
        "6": {"class_type": "EmptyHunyuanLatentVideo", "inputs": {"width": 32, "height": 32, "length": 1, "batch_size": 1}},
        "7": {
            "class_type": "KSampler",
            "inputs": {
                "model": ["3", 0], "positive": ["4", 0], "negative": ["5", 0], "latent_image": ["6", 0],
                "seed": seed, "steps": 2, "cfg": 2.0, "sampler_name": "euler", "scheduler": "simple", "denoise": 1.0,
            },
        },
        "8": {"class_type": "PMTestLatentDigest", "inputs": {"samples": ["7", 0]}},
    }
    if slow_s:
        prompt["9"] = {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": seed}}
        prompt["10"] = {"class_type": "PMTestSlow", "inputs": {"image": ["9", 0], "seconds": slow_s, "seed": seed}}
        prompt["11"] = {"class_type": "PreviewImage", "inputs": {"images": ["10", 0]}}
    return prompt


def lora_step(report: dict) -> dict:
    (step,) = [s for s in report["steps"] if s["kind"] == "lora"]
    return step


async def _three_prompts(server, lora: str) -> dict:
    """Queue three prompts back to back; at the first's execution_success read its report at
    once. The websocket's messages in order, and the reports read."""
    import aiohttp

    seen: list[tuple[str, dict]] = []
    got: dict = {}
    async with aiohttp.ClientSession() as session:
        ws = await session.ws_connect(f"{server.url}/ws?clientId={server.client_id}")
        seed = uuid.uuid4().int % 10_000
        ids = [
            await asyncio.to_thread(server.queue, graph(lora, seed + i, slow_s=SLOW_S if i else 0.0))
            for i in range(3)
        ]
        deadline = time.monotonic() + WATCHDOG_S
        while time.monotonic() < deadline and not _all_complete(seen, ids):
            message = await ws.receive(timeout=WATCHDOG_S)
            if message.type != aiohttp.WSMsgType.TEXT:
                continue
            event = json.loads(message.data)
            seen.append((event["type"], event.get("data") or {}))
            if event["type"] == "execution_success" and event["data"].get("prompt_id") == ids[0]:
                got["at_success"] = await _first_report(session, server, ids[0])
        await ws.close()
    got["ids"], got["seen"] = ids, seen
    return got


async def _first_report(session, server, prompt_id: str) -> dict:
    """The report as soon as it is stored (it is stored just after execution_success is sent)."""
    while True:
        async with session.get(f"{server.url}/pipeline_monitor/runs/{prompt_id}") as response:
            if response.status == 200:
                return await response.json()
        await asyncio.sleep(0.02)


def _all_complete(seen: list, ids: list) -> bool:
    done = {data.get("prompt_id") for kind, data in seen if kind == "pipeline_monitor.run" and data.get("complete")}
    return set(ids) <= done


@pytest.fixture(scope="module")
def three(deferring_server):
    lora = f"pm_first_{uuid.uuid4().hex[:8]}.safetensors"  # a file this server has never seen
    write_lora(deferring_server.base, lora)
    got = asyncio.run(asyncio.wait_for(_three_prompts(deferring_server, lora), timeout=2 * WATCHDOG_S))
    got["final"] = [deferring_server.get_json(f"/pipeline_monitor/runs/{i}?wait_s=120") for i in got["ids"]]
    return got


def test_the_first_prompt_is_pending_at_its_execution_success(three):
    report = three["at_success"]
    assert report["status"] == "success" and report["complete"] is False
    step = lora_step(report)
    assert step["pending"] is True and step["unfinished_reason"] is None
    assert step["summary"]["model_delta_norm"] is None and step["summary"]["n_loras"] == 1
    assert step["summary"]["n_matched_keys"] == 48  # the loaders' coverage is there at once
    assert step["details"]["deferred"]["after_prompt_s"] is None
    assert "lora_figures_after_prompt" in {f["code"] for f in step["findings"]}


def test_the_report_completes_after_the_prompt_with_every_figure(three, deferring_server):
    first = three["final"][0]
    assert first["complete"] is True
    step = lora_step(first)
    assert step["pending"] is False and step["unfinished_reason"] is None and step["monitor_errors"] == []
    summary = step["summary"]
    assert summary["success"] is True and summary["model_n_patch_keys_added"] == 16
    assert summary["model_delta_norm"] > 0 and summary["model_relative_change_ratio"] > 0
    deferred = step["details"]["deferred"]
    assert deferred["after_prompt_s"] > 0
    assert deferred["finished_unix_s"] >= deferred["started_unix_s"]  # one clock: its end after its start
    rows = step["details"]["model"]["hops"][0]["keys"]
    assert len(rows) == 16 and all(r["delta_norm"] > 0 and r["base_norm"] > 0 for r in rows)
    summary_row = deferring_server.get_json("/pipeline_monitor/runs?limit=10")["runs"]
    assert {r["prompt_id"]: r["complete"] for r in summary_row}[three["ids"][0]] is True


def test_the_queue_ran_before_the_pending_work(three):
    """Order, not time: the first prompt's work started after the third prompt had finished, and
    its completion was announced after the third prompt's execution_success."""
    ids, seen, final = three["ids"], three["seen"], three["final"]
    started = lora_step(final[0])["details"]["deferred"]["started_unix_s"]
    assert all(report["status"] == "success" for report in final)
    assert started >= final[2]["finished_unix_s"]  # one clock: an order of events (the server's), no speed
    order = [
        (kind, data.get("prompt_id"), data.get("complete"))
        for kind, data in seen
        if kind in ("execution_success", "pipeline_monitor.run")
    ]
    third_done = order.index(("execution_success", ids[2], None))
    first_complete = order.index(("pipeline_monitor.run", ids[0], True))
    assert first_complete > third_done
    assert ("pipeline_monitor.run", ids[0], False) in order[:first_complete]  # announced pending first


def test_the_node_text_comes_after_the_prompt_to_the_client_that_queued_it(three):
    texts = [data for kind, data in three["seen"] if kind == "pipeline_monitor.step_text"]
    assert [(t["prompt_id"], t["node_id"], t["kind"]) for t in texts] == [(three["ids"][0], "3", "lora")]
    assert texts[0]["text"][0].splitlines()[0] == "applied: yes"
    executed = [d for kind, d in three["seen"] if kind == "executed" and d.get("node") == "3"]
    assert "figures come after the prompt" in executed[0]["output"]["text"][0]  # what the node returned


def test_later_runs_repeating_the_pending_step_complete_with_it(three):
    first = lora_step(three["final"][0])
    for report in three["final"][1:]:
        assert report["complete"] is True
        step = lora_step(report)
        assert step["cached"] is True and step["pending"] is False
        assert step["summary"]["model_delta_norm"] == first["summary"]["model_delta_norm"]


def test_a_repeat_at_a_new_strength_stays_in_the_prompt(three, deferring_server):
    step = lora_step(three["final"][0])
    lora = step["details"]["loaders"][0]["lora_name"]
    prompt = graph(lora, 1)
    prompt["2"]["inputs"]["strength_model"] = 0.5
    prompt_id, history = deferring_server.run(prompt)
    assert history["status"]["status_str"] == "success"
    report = deferring_server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    assert report["complete"] is True
    again = lora_step(report)
    assert again["pending"] is False and "deferred" not in again["details"]
    assert again["summary"]["model_delta_norm"] == pytest.approx(first_norm(step) * 0.5 / 0.75, rel=1e-9)


def first_norm(step: dict) -> float:
    return step["summary"]["model_delta_norm"]


def test_a_failed_prompt_leaves_its_pending_step_unfinished_with_the_reason(deferring_server):
    """A node after the monitor and the sampler (fed by them, so it runs after them) raises: the
    monitor's step, pending at that point, is stored not finished, and the report is complete."""
    lora = f"pm_first_failed_{uuid.uuid4().hex[:8]}.safetensors"
    write_lora(deferring_server.base, lora)
    prompt = graph(lora, uuid.uuid4().int % 10_000)
    prompt["12"] = {"class_type": "VAELoader", "inputs": {"vae_name": "pm_tiny_wan21_vae.safetensors"}}
    prompt["13"] = {"class_type": "VAEDecode", "inputs": {"samples": ["7", 0], "vae": ["12", 0]}}
    prompt["14"] = {"class_type": "PMTestRaise", "inputs": {"image": ["13", 0], "message": "pm after the monitor"}}
    prompt_id, history = deferring_server.run(prompt)
    assert history["status"]["status_str"] == "error"
    report = deferring_server.get_json(f"/pipeline_monitor/runs/{prompt_id}?wait_s=0")
    assert report["status"] == "error" and report["complete"] is True
    step = lora_step(report)
    assert step["pending"] is False and "ended error" in step["unfinished_reason"]
    assert step["summary"]["n_loras"] == 1 and step["summary"]["model_delta_norm"] is None

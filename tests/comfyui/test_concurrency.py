"""Concurrency: prompts queued back to back, a prompt interrupted in the middle of a monitored step,
a server shut down while the pack's sampler runs, two watchers at once, and no pack thread left
behind in-process.

Every timeout here is a hang watchdog (WATCHDOG_S, a minute or more): it fails a test only when
something never happens, never because a loaded machine was slow. How fast the server answers and
exits: bench/server_responsiveness.py."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
import time
import uuid

import pytest
import requests
from conftest import ComfyServer

from tests.watchdog import wait_until

pytestmark = pytest.mark.comfyui

OWN_PORTS = range(8800, 8850)
WATCHDOG_S = 60


def latent_prompt(batch: int, slow_s: float = 0.0, seed: int = 0) -> dict:
    prompt = {
        "1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": batch}},
        "2": {"class_type": "PipelineMonitorLatent", "inputs": {"latent": ["1", 0]}},
    }
    if slow_s:
        prompt["3"] = {
            "class_type": "EmptyImage",
            "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": seed},
        }
        prompt["4"] = {
            "class_type": "PMTestSlow",
            "inputs": {"image": ["3", 0], "seconds": slow_s, "seed": seed},
        }
        prompt["5"] = {
            "class_type": "PipelineMonitorTensorDump",
            "inputs": {"name": "pm_slow", "npy": False, "image": ["4", 0]},
        }
    return prompt


def test_prompts_queued_back_to_back(server):
    batches = [1, 2, 3, 4, 5, 6]
    ids = [server.queue(latent_prompt(b, seed=b)) for b in batches]  # queued without waiting
    for prompt_id, batch in zip(ids, batches, strict=True):
        assert server.wait(prompt_id)["status"]["status_str"] == "success"
        report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
        steps = [s for s in report["steps"] if s["kind"] == "latent"]
        # Each report has its own prompt's step, not a neighbour's.
        assert report["status"] == "success" and len(steps) == 1
        assert steps[0]["summary"]["shape"] == [batch, 4, 8, 8]


def node_running(server, prompt_id: str, node_id: str) -> bool:
    queue = server.get_json("/queue")
    running = [item[1] for item in queue.get("queue_running", [])]
    if prompt_id not in running:
        return False
    # The profile opens the node's span when it starts: the live route names the running node.
    runs = server.get_json("/pipeline_monitor/runs?limit=1")
    return runs.get("active_prompt_id") == prompt_id


def test_interrupt_in_the_middle_of_a_step_gives_an_interrupted_report(server):
    seed = uuid.uuid4().int % 10_000
    prompt_id = server.queue(latent_prompt(1, slow_s=30.0, seed=seed))
    wait_until(lambda: node_running(server, prompt_id, "4"), "slow node did not start", WATCHDOG_S)
    time.sleep(0.3)  # well inside the slow node
    assert requests.post(server.url + "/interrupt", timeout=WATCHDOG_S).status_code == 200
    # An interrupt that is not honoured lets the node finish its 30 s: status success, caught below.
    history = server.wait(prompt_id, timeout=2 * WATCHDOG_S)
    assert history["status"]["status_str"] == "error"
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    assert report["status"] == "interrupted", report["status"]
    rows = {n["node_id"]: n for n in report["nodes"]}
    assert rows["4"]["status"] == "interrupted" and "5" not in rows
    # The server goes on: the next prompt runs and reports normally.
    _, again = server.run(latent_prompt(2, seed=seed))
    assert again["status"]["status_str"] == "success"


async def _two_watchers(server):
    import aiohttp

    ids = [f"pm-watch-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    received = {i: [] for i in ids}
    async with aiohttp.ClientSession() as session:
        sockets = [await session.ws_connect(f"{server.url}/ws?clientId={i}") for i in ids]

        async def listen(client_id, ws):
            async for message in ws:
                if message.type == aiohttp.WSMsgType.TEXT and "pipeline_monitor.sample" in message.data:
                    received[client_id].append(message.data)

        listeners = [asyncio.create_task(listen(i, ws)) for i, ws in zip(ids, sockets, strict=True)]
        for client_id in ids:
            async with session.post(
                f"{server.url}/pipeline_monitor/live", json={"client_id": client_id, "watching": True}
            ) as response:
                assert response.status == 200, await response.text()
        status = await (await session.get(f"{server.url}/pipeline_monitor/live")).json()
        # A prompt runs while both watch; both get samples; requests are answered meanwhile (a
        # route blocked by the watchers would hang here until the watchdog).
        prompt_id = await asyncio.to_thread(
            server.queue, latent_prompt(1, slow_s=1.5, seed=uuid.uuid4().int % 9999)
        )
        for _ in range(10):
            async with session.get(
                f"{server.url}/pipeline_monitor/runs?limit=3", timeout=aiohttp.ClientTimeout(total=WATCHDOG_S)
            ) as response:
                assert response.status == 200, "route failed while watching"
            await asyncio.sleep(0.2)
        await asyncio.to_thread(server.wait, prompt_id, WATCHDOG_S)
        deadline = time.monotonic() + WATCHDOG_S
        while not all(received.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        for client_id in ids:
            async with session.post(
                f"{server.url}/pipeline_monitor/live", json={"client_id": client_id, "watching": False}
            ) as response:
                assert response.status == 200
        for ws in sockets:
            await ws.close()
        for task in listeners:
            task.cancel()
    return status, received


def test_two_watchers_no_deadlock(server):
    status, received = asyncio.run(asyncio.wait_for(_two_watchers(server), timeout=5 * WATCHDOG_S))
    assert all(received.values()), {k: len(v) for k, v in received.items()}
    assert status  # the live route answered while two clients watched


def test_server_exits_on_sigterm_while_the_sampler_runs(server, tmp_path):
    """A separate server (own port), killed with SIGTERM while KSampler steps: it exits (the pack's
    threads do not keep it alive); a process still there after the watchdog is a hang."""
    base = tmp_path / "base"
    for sub in ("input", "output", "user"):
        (base / sub).mkdir(parents=True)
    (base / "custom_nodes").symlink_to(server.base / "custom_nodes", target_is_directory=True)
    (base / "models").symlink_to(server.base / "models", target_is_directory=True)
    port = next(p for p in OWN_PORTS if _port_free(p))
    own = ComfyServer(base, port, tmp_path / "server.log")
    own.start()
    try:
        prompt_id = own.queue(long_sampling_prompt())
        wait_until(lambda: node_running(own, prompt_id, "5"), "prompt did not start", WATCHDOG_S)
        # KSampler's progress bar in the log: the sampler is stepping (and the pack's background
        # sampler thread runs: it starts with the first prompt).
        wait_until(lambda: "/5000" in own.log(), "KSampler did not start stepping", 2 * WATCHDOG_S)
        assert "sample_interval_ms" in own.get_json("/pipeline_monitor/live")
        own.process.send_signal(signal.SIGTERM)
        own.process.wait(timeout=WATCHDOG_S)  # TimeoutExpired: it hangs on SIGTERM
    finally:
        if own.process.poll() is None:
            own.process.kill()
            own.process.wait(timeout=10)
        shutil.rmtree(base / "output", ignore_errors=True)


def long_sampling_prompt() -> dict:
    """Tiny WAN 2.1 with 5,000 sampler steps behind the models monitor: minutes on a CPU."""
    conditioning = {"tokens": 16, "hidden": 4096, "pooled_size": 0}
    return {
        "1": {
            "class_type": "UNETLoader",
            "inputs": {"unet_name": "pm_tiny_wan21.safetensors", "weight_dtype": "default"},
        },
        "2": {"class_type": "PipelineMonitorModels", "inputs": {"model": ["1", 0]}},
        "3": {"class_type": "PMTestConditioning", "inputs": {**conditioning, "seed": 1}},
        "4": {
            "class_type": "EmptyHunyuanLatentVideo",
            "inputs": {"width": 32, "height": 32, "length": 1, "batch_size": 1},
        },
        "5": {
            "class_type": "KSampler",
            "inputs": {
                "seed": 7,
                "steps": 5000,
                "cfg": 1.0,
                "sampler_name": "euler",
                "scheduler": "simple",
                "denoise": 1.0,
                "model": ["2", 0],
                "positive": ["3", 0],
                "negative": ["3", 0],
                "latent_image": ["4", 0],
            },
        },
        "6": {"class_type": "PMTestLatentDigest", "inputs": {"samples": ["5", 0]}},  # the output
    }


def _port_free(port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def pack_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("pipeline-monitor")}


def test_no_pack_thread_left_behind(comfy, monkeypatch, tmp_path):
    sampler_mod = comfy.pack_module("monitors.engine.sampler")
    store_mod = comfy.pack_module("monitors.engine.store")
    probes = comfy.pack_module("monitors.probes.fake").fake_probes()
    before = pack_threads()  # other tests' runtimes may hold theirs

    def new_threads():
        return {t.name for t in pack_threads() - before}

    sampler = sampler_mod.Sampler(interval_s=0.01, probes=probes)
    ticks = []
    sampler.add_sink(ticks.append)
    assert new_threads() == {"pipeline-monitor-sampler"}
    wait_until(lambda: len(ticks) >= 3, "sampler did not tick", WATCHDOG_S)
    sampler.stop()
    assert new_threads() == set()
    # The background report writer ends itself once idle, and comes back for the next report.
    monkeypatch.setattr(store_mod, "WRITER_IDLE_EXIT_S", 0.1)
    recorder_mod = comfy.pack_module("monitors.engine.recorder")
    store = store_mod.RunStore(str(tmp_path / "reports"), background_writes=True)
    recorder = recorder_mod.RunRecorder(store, probes=probes)
    for i in range(2):
        recorder.begin_run(f"pm-thread-{i}", None)
        recorder.end_run("success")
        store.flush()
        assert os.path.isfile(tmp_path / "reports" / f"pm-thread-{i}.json")
        wait_until(lambda: new_threads() == set(), f"threads left: {new_threads()}", WATCHDOG_S)

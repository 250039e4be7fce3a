"""A server restart: the run list comes back from the reports on disk, and the first run of a
workflow after the restart shows its real changed inputs (the last inputs per workflow name are
kept beside the reports, monitors/engine/input_changes.py InputFiles), not "changes unknown".

Every timeout here is a hang watchdog: it fails only when something never happens."""

from __future__ import annotations

import socket
import time

import pytest
import requests
from conftest import ComfyServer

from tests.watchdog import wait_until

pytestmark = pytest.mark.comfyui

OWN_PORTS = range(8850, 8900)
WATCHDOG_S = 60
WORKFLOW = "pm restart demo"


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def named_prompt(width: int, seed: int) -> dict:
    return {
        "1": {"class_type": "EmptyLatentImage", "inputs": {"width": width, "height": 64, "batch_size": 1}},
        "2": {"class_type": "PipelineMonitorLatent", "inputs": {"latent": ["1", 0]}},
        "3": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": seed}},
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
    }


def queue_named(server: ComfyServer, prompt: dict) -> str:
    """POST /prompt with the graph's extra data as the frontend sends it for a workflow the panel named."""
    body = {
        "prompt": prompt,
        "client_id": server.client_id,
        "extra_data": {
            "extra_pnginfo": {
                "workflow": {"id": "pm-restart", "nodes": [], "extra": {"pipeline_monitor_workflow_name": WORKFLOW}}
            }
        },
    }
    response = requests.post(server.url + "/prompt", json=body, timeout=10)
    assert response.status_code == 200, response.text[:2000]
    return response.json()["prompt_id"]


def report_of(server: ComfyServer, prompt_id: str) -> dict:
    server.wait(prompt_id, timeout=WATCHDOG_S)
    deadline = time.monotonic() + WATCHDOG_S
    while time.monotonic() < deadline:
        response = server.get(f"/pipeline_monitor/runs/{prompt_id}")
        if response.status_code == 200:
            return response.json()
        time.sleep(0.1)
    raise TimeoutError(f"no report for {prompt_id}")


def test_the_first_run_after_a_restart_shows_its_real_changes(server, tmp_path):
    base = tmp_path / "base"
    for sub in ("input", "output", "user"):
        (base / sub).mkdir(parents=True)
    (base / "custom_nodes").symlink_to(server.base / "custom_nodes", target_is_directory=True)
    (base / "models").symlink_to(server.base / "models", target_is_directory=True)
    reports = base / "output" / "pipeline_monitor" / "reports"
    port = next(p for p in OWN_PORTS if _port_free(p))

    before = ComfyServer(base, port, tmp_path / "before.log").start()
    try:
        first = queue_named(before, named_prompt(64, seed=1))
        assert report_of(before, first)["input_changes"]["first_run"] is True
        # written off the execution thread: wait until the report and the inputs are on disk
        wait_until(lambda: (reports / f"{first}.json").is_file(), "the first report was not written", WATCHDOG_S)
        wait_until(lambda: any((reports / ".last_inputs").glob("*.json")), "the last inputs were not written", WATCHDOG_S)
    finally:
        before.stop()

    after = ComfyServer(base, port, tmp_path / "after.log").start()
    try:
        listed = [r["prompt_id"] for r in after.get_json("/pipeline_monitor/runs")["runs"]]
        assert listed == [first], "the run list is read back from the reports on disk"
        second = queue_named(after, named_prompt(96, seed=2))
        changes = report_of(after, second)["input_changes"]
        assert changes["compared_with_prompt_id"] == first and changes["first_run"] is False
        assert changes["unknown_reason"] is None, changes
        assert {(c["node_id"], c["input"], c["before"], c["after"]) for c in changes["changes"]} == {
            ("1", "width", "64", "96"),
            ("3", "color", "1", "2"),
        }
        summary = next(r for r in after.get_json("/pipeline_monitor/runs")["runs"] if r["prompt_id"] == second)
        assert summary["input_changes"]["n_changes"] == 2
    finally:
        after.stop()

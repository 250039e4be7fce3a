"""The panel shows a LoRA step whose figures come after the prompt (issue 35), in real Chromium on
the server that defers them: the run's card says "pending" while a slow prompt queued behind it
keeps ComfyUI busy, and once that prompt ends (interrupted here: the queue goes idle) the same open
view is drawn again from the run event, with the step's figures and no "pending" badge."""

from __future__ import annotations

import uuid

import pytest
import requests

from tests.comfyui.test_lora_after_prompt_server import graph, write_lora

from .browser_support import app_page, queue_from_page

pytestmark = pytest.mark.browser

WAIT_MS = 300_000  # hang watchdogs only: a loaded machine may be slow


def slow_prompt(seed: int) -> dict:
    return {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": seed}},
        "2": {"class_type": "PMTestSlow", "inputs": {"image": ["1", 0], "seconds": 600.0, "seed": seed}},
        "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    }


def test_a_pending_lora_step_then_its_figures_in_the_open_run(deferring_server):
    server = deferring_server
    lora = f"pm_first_browser_{uuid.uuid4().hex[:8]}.safetensors"
    write_lora(server.base, lora)
    seed = uuid.uuid4().int % 10_000
    with app_page(server) as page:
        first = queue_from_page(page, graph(lora, seed))
        queue_from_page(page, slow_prompt(seed))  # ComfyUI stays busy: the first's work waits
        row = f'.pm-run-row[data-prompt-id="{first}"]:not(.pm-running-row)'
        page.wait_for_selector(row, timeout=WAIT_MS)
        page.click(row)
        pending = page.wait_for_selector('.pm-step[data-kind="lora"][data-pending="true"]', timeout=WAIT_MS)
        head = pending.inner_text()
        assert "pending" in head and "computed after the prompt" in head
        assert server.get_json(f"/pipeline_monitor/runs/{first}")["complete"] is False
        assert requests.post(server.url + "/interrupt", timeout=60).status_code == 200
        done = page.wait_for_selector('.pm-step[data-kind="lora"][data-pending="false"]', timeout=WAIT_MS)
        text = done.inner_text()
        assert "model weight change" in text, text  # a headline figure the pending card did not have
        assert "model weight change" not in head
        badges = page.inner_text('.pm-step[data-kind="lora"] .pm-step-head')
        assert "pending" not in badges
        assert page.errors == []
    assert server.get_json(f"/pipeline_monitor/runs/{first}")["complete"] is True

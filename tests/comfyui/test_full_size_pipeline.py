"""The full-size SD1.5 text-to-image LoRA example on a real server (slow: ~2 GB generated once per
session base, a 64x64 2-step CPU run). Only one runs at a time on a machine (a file lock): two
would need twice the ~8 GB it takes."""

from __future__ import annotations

import fcntl
import json
import tempfile
from pathlib import Path

import pytest

from tests.comfyui.conftest import load_script

pytestmark = [pytest.mark.comfyui, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "workflows" / "api" / "text_to_image_lora_monitor_full_size.json"
LOCK = Path(tempfile.gettempdir()) / "pipeline_monitor_full_size.lock"
RUN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def full_size_run(server):
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            load_script("make_models").make_full_size(str(server.base))
            prompt_id = server.queue(json.loads(WORKFLOW.read_text()))
            history = server.wait(prompt_id, timeout=RUN_TIMEOUT_S)
            report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return history, report


def test_full_size_example_runs_with_every_monitor(full_size_run):
    history, report = full_size_run
    assert history["status"]["status_str"] == "success", history["status"]
    assert report["status"] == "success"
    steps = {s["kind"]: s for s in report["steps"]}
    assert {"models", "lora", "conditioning"} <= set(steps)
    for step in steps.values():
        assert step["monitor_errors"] == [], step["monitor_errors"]
    assert steps["models"]["summary"]["model_class"] == "BaseModel"
    assert steps["models"]["summary"]["total_size_bytes"] > 1_500_000_000
    lora = steps["lora"]["summary"]
    assert lora["n_file_keys"] > 700 and lora["n_unmatched_keys"] == 0
    assert lora["model_n_patch_keys_added"] > 0 and lora["clip_n_patch_keys_added"] > 0
    cond = steps["conditioning"]["summary"]
    assert cond["family"] == "SD1.x" and cond["encoder_class"] == "SD1ClipModel"
    assert cond["positive_n_tokens"] == 77 and cond["positive_hidden_size"] == 768
    assert cond["positive_pooled_size"] == 768
    assert history["outputs"]["11"]["images"]

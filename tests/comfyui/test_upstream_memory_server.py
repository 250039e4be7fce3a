"""The LoRA step's memory picture on the real headless server: measured over the LoRA loader's own
span when it ran, None with the reason when ComfyUI served it from its cache."""

from __future__ import annotations

import pytest

from monitors.engine.upstream_memory import CACHED_REASON
from tests.comfyui.test_lora_server import LORA, WAN, write_loras

pytestmark = pytest.mark.comfyui

STRENGTH = 0.61  # used by no other test, so the loader runs on the first prompt here


def graph(compare_with_base: bool) -> dict:
    monitor_inputs = {"model": ["2", 0]}
    if compare_with_base:
        # a new input for the monitor only: it runs again while its upstream nodes stay cached
        monitor_inputs["model_before"] = ["1", 0]
    return {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN, "weight_dtype": "default"}},
        "2": {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": LORA, "strength_model": STRENGTH},
        },
        "3": {"class_type": "PipelineMonitorLora", "inputs": monitor_inputs},
    }


def lora_step(server, prompt_id: str) -> dict:
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    (step,) = [s for s in report["steps"] if s["kind"] == "lora"]
    return step, {row["node_id"]: row for row in report["nodes"]}


@pytest.fixture(scope="module")
def runs(server):
    write_loras(server.base)
    found = []
    for compare_with_base in (False, False, True):
        prompt_id, history = server.run(graph(compare_with_base))
        assert history["status"]["status_str"] == "success", history["status"]
        found.append(lora_step(server, prompt_id))
    return found


def test_lora_step_memory_is_the_loaders_picture(runs):
    step, rows = runs[0]
    assert rows["2"]["cached"] is False and not step["cached"]
    details = step["details"]
    assert details["memory_unknown_reason"] is None
    assert details["memory_scope"]["measured_node_ids"] == ["2"]
    memory = details["memory"]
    rss = memory["process_rss_bytes"]
    assert rss["baseline"] > 0 and rss["end"] > 0 and rss["peak"] >= max(rss["baseline"], rss["end"])
    assert rss["change"] == rss["end"] - rss["baseline"]
    assert isinstance(rss["peak_at_s"], float)  # when, within the loader's span
    ram = memory["system_ram"]
    assert ram["used_bytes"]["baseline"] > 0 and ram["used_bytes"]["peak_at_s"] is not None
    assert ram["available_bytes"]["low"] > 0
    assert memory["duration_s"] == rows["2"]["duration_s"]  # the loader's own span, not the prompt's


def test_identical_prompt_repeats_the_cached_step_from_the_run_that_executed_it(runs):
    first, _ = runs[0]
    step, rows = runs[1]
    assert rows["2"]["cached"] is True and rows["3"]["cached"] is True and step["cached"] is True
    assert step["details"]["memory"] == first["details"]["memory"]


def test_monitor_run_on_cached_upstream_says_nothing_ran(runs):
    step, rows = runs[2]
    assert rows["2"]["cached"] is True and rows["3"]["cached"] is False and not step["cached"]
    details = step["details"]
    assert details["memory"] is None and details["memory_unknown_reason"] == CACHED_REASON
    assert details["memory_scope"]["not_run_node_ids"] == ["2"]

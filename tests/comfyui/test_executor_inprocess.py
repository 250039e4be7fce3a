"""The per-node profile under ComfyUI's real PromptExecutor, in-process, including failing probes."""

from __future__ import annotations

import logging
import uuid

import pytest

from tests.comfyui.conftest import classic_executor

PROMPT = {
    "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
    "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
    "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    "4": {"class_type": "PipelineMonitorModels", "inputs": {}},
}
OUTPUTS = ["3", "4"]


@pytest.fixture
def executor(comfy):
    return classic_executor(comfy)


def run(executor, prompt=PROMPT):
    prompt_id = str(uuid.uuid4())
    executor.execute(prompt, prompt_id, {}, OUTPUTS)
    return prompt_id


@pytest.fixture
def probes_swap(comfy):
    probes_mod = comfy.pack_module("monitors.probes")
    previous = probes_mod.get_probes()
    yield probes_mod
    probes_mod.set_probes(previous)


def test_every_executed_node_is_timed_and_peaked(executor, pack_runtime):
    prompt_id = run(executor)
    assert executor.success
    report = pack_runtime.store.get(prompt_id)
    assert report["status"] == "success"
    rows = {n["node_id"]: n for n in report["nodes"]}
    assert set(rows) == {"1", "2", "3", "4"}
    for row in rows.values():
        assert row["status"] == "executed" and row["duration_s"] > 0
        assert row["peak_rss_bytes"] > 0 and row["peak_rss_method"] in ("kernel_hwm", "sampled")
    assert [s["kind"] for s in report["steps"]] == ["models"]
    # Run again: everything is cached, the monitor's step comes back marked cached.
    again = pack_runtime.store.get(run(executor))
    assert all(n["cached"] for n in again["nodes"]) and len(again["nodes"]) == 4
    assert [(s["kind"], s["cached"]) for s in again["steps"]] == [("models", True)]


def test_every_probe_raising_still_succeeds_with_unknowns_and_reasons(
    comfy, executor, pack_runtime, probes_swap, caplog
):
    fake = comfy.pack_module("monitors.probes.fake").fake_probes("1 GPU")
    fake.host.fail.add("*")
    fake.torch.fail.add("*")
    probes_swap.set_probes(fake)
    caplog.set_level(logging.WARNING)
    prompt_id = run(executor)
    assert executor.success
    report = pack_runtime.store.get(prompt_id)
    assert report["status"] == "success" and len(report["nodes"]) == 4
    assert all(n["peak_rss_bytes"] is None for n in report["nodes"])
    assert any("host.process_rss_bytes" in e for e in report["monitor_errors"])
    assert any("host.process_rss_bytes" in r.getMessage() for r in caplog.records)


def test_unreadable_proc_falls_back_to_sampling(comfy, executor, pack_runtime, probes_swap, tmp_path):
    probes_mod = probes_swap
    host = comfy.pack_module("monitors.probes.host").HostBackend(
        proc_status=str(tmp_path / "no-status"), proc_clear_refs=str(tmp_path / "no-dir" / "clear_refs")
    )
    probes_mod.set_probes(probes_mod.Probes(host=host))
    report = pack_runtime.store.get(run(executor))
    assert report["status"] == "success"
    assert {n["peak_rss_method"] for n in report["nodes"]} == {"sampled"}
    assert all(n["peak_rss_bytes"] > 0 for n in report["nodes"])
    assert any("host.reset_peak_rss" in e for e in report["monitor_errors"])


def test_failing_node_gives_an_error_report(executor, pack_runtime):
    bad = dict(PROMPT)
    bad["2"] = {
        "class_type": "ImageScaleBy",
        "inputs": {"image": ["1", 0], "upscale_method": "no-such-method", "scale_by": 2.0},
    }
    prompt_id = run(executor, bad)
    assert not executor.success
    report = pack_runtime.store.get(prompt_id)
    assert report["status"] == "error" and report["error"]["node_id"] == "2"
    assert {n["node_id"]: n["status"] for n in report["nodes"]}.get("2") == "error"


def test_the_run_announcement_carries_the_summary_the_store_made(comfy, executor, pack_runtime):
    comfy.server.sent.clear()
    prompt_id = run(executor)
    announced = [data for event, data, _ in comfy.server.sent if event == "pipeline_monitor.run"]
    assert len(announced) == 1 and announced[0]["prompt_id"] == prompt_id
    assert announced[0] is pack_runtime.store.summary(prompt_id)  # the store's row, not made again
    assert announced[0] == pack_runtime.store.summaries()[0]

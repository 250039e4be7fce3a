"""GET /pipeline_monitor/metrics on a real aiohttp app: parsed with prometheus-client's own parser."""

import importlib

import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from monitors.engine.sampler import Sampler
from monitors.probes.fake import GiB, fake_probes
from monitors.report import StepReport
from tests.unit.test_routes import PACK, import_pack


@pytest.fixture(params=["written at once"])
async def metrics_client(aiohttp_client, tmp_path, request):
    routes_mod, runtime_mod = import_pack()
    metrics_mod = importlib.import_module(f"{PACK}.nodes.metrics")
    store_mod = importlib.import_module(f"{PACK}.monitors.engine.store")
    recorder_mod = importlib.import_module(f"{PACK}.monitors.engine.recorder")
    report_mod = importlib.import_module(f"{PACK}.monitors.report")
    probes = fake_probes("1 GPU")
    if request.param == "in batches":  # as in a server, with a batch that never comes by itself
        store = store_mod.RunStore(str(tmp_path), background_writes=True, write_quiet_s=3600, write_latest_s=3600)
    else:
        store = store_mod.RunStore(str(tmp_path))
    recorder = recorder_mod.RunRecorder(store, probes=probes)
    sampler = Sampler(probes=probes)
    previous = runtime_mod.set_runtime(runtime_mod.Runtime(store, recorder, sampler))
    previous_metrics = metrics_mod.set_fleet_metrics(None)  # a fresh registry per test
    table = web.RouteTableDef()
    routes_mod.register(table)
    app = web.Application()
    app.add_routes(table)
    yield await aiohttp_client(app), recorder, probes, sampler, report_mod
    metrics_mod.set_fleet_metrics(previous_metrics)
    runtime_mod.set_runtime(previous)


def run(recorder, report_mod, prompt_id, steps=(), gpu_bytes=0, probes=None):
    recorder.begin_run(prompt_id, {"1": {"class_type": "VAEEncode"}, "2": {"class_type": "KSampler"}})
    recorder.node_started("1")
    if gpu_bytes:
        probes.torch.allocate(0, gpu_bytes)
    recorder.node_finished("1")
    recorder.node_started("2")
    residency = importlib.import_module(report_mod.__name__.rsplit(".", 1)[0] + ".engine.model_residency")
    for kind in ("load_full", "unload_full"):  # the model counters (docs/metrics.md)
        recorder.model_event(residency.ModelEvent(kind, "SDXL", 1, 1, "cpu", 0.1, bytes_moved=1024))
    recorder.node_finished("2")
    recorder.node_finished("3")  # a finish without a start: cached
    for kind, summary in steps:
        recorder.add_step(report_mod.StepReport(kind=kind, node_id="9", summary=summary))
    return recorder.end_run("success")


async def scrape(client) -> dict:
    response = await client.get("/pipeline_monitor/metrics")
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


async def test_runs_before_the_first_scrape_and_after_are_each_counted_once(metrics_client):
    client, recorder, probes, sampler, report_mod = metrics_client
    run(recorder, report_mod, "first", gpu_bytes=3 * GiB, probes=probes)
    samples = await scrape(client)  # counted from the store on first scrape
    assert value(samples, "pipeline_monitor_prompt_duration_seconds_count", status="success") == 1
    run(recorder, report_mod, "second")  # counted by the store listener
    samples = await scrape(client)
    samples = await scrape(client)  # scraping again counts nothing twice
    assert value(samples, "pipeline_monitor_prompt_duration_seconds_count", status="success") == 2
    assert value(samples, "pipeline_monitor_node_duration_seconds_count", class_type="VAEEncode") == 2
    assert value(samples, "pipeline_monitor_node_duration_seconds_count", class_type="KSampler") == 2
    assert value(samples, "pipeline_monitor_nodes_cached_total", class_type="unknown") == 2
    assert value(samples, "pipeline_monitor_prompt_peak_rss_bytes_count") == 2
    assert (
        value(samples, "pipeline_monitor_last_prompt_peak_rss_bytes") == 512 * 1024**2
    )  # the fake host's RSS
    assert value(samples, "pipeline_monitor_prompt_peak_gpu_allocated_bytes_count") == 2
    assert value(samples, "pipeline_monitor_last_prompt_peak_gpu_allocated_bytes") == 3 * GiB
    assert value(samples, "pipeline_monitor_prompt_running") == 0


@pytest.mark.parametrize("metrics_client", ["in batches"], indirect=True)
async def test_a_scrape_counts_the_runs_still_waiting_for_their_batch(metrics_client):
    client, recorder, probes, sampler, report_mod = metrics_client
    run(recorder, report_mod, "first")
    samples = await scrape(client)
    assert value(samples, "pipeline_monitor_prompt_duration_seconds_count", status="success") == 1
    run(recorder, report_mod, "second")  # its batch would come in an hour
    samples = await scrape(client)
    assert value(samples, "pipeline_monitor_prompt_duration_seconds_count", status="success") == 2


async def test_vae_fallbacks_and_lora_unmatched_keys(metrics_client):
    client, recorder, _, _, report_mod = metrics_client
    vae = [
        ("vae_encode", {"strategy_requested": "auto", "strategy_used": "direct", "n_out_of_memory": 0}),
        ("vae_encode", {"strategy_requested": "auto", "strategy_used": "tiled", "n_out_of_memory": 1}),
        ("vae_encode", {"strategy_requested": "tiled", "strategy_used": "tiled", "n_out_of_memory": 0}),
        ("vae_encode", {"strategy_requested": "direct", "strategy_used": "cpu", "n_out_of_memory": 2}),
    ]
    lora = [
        ("lora", {"n_unmatched_keys": 120}),
        ("lora", {"n_unmatched_keys": 0}),
        ("lora", {"n_unmatched_keys": None}),
    ]
    run(recorder, report_mod, "p1", steps=vae + lora)
    samples = await scrape(client)
    assert value(samples, "pipeline_monitor_vae_encode_total", requested="auto", used="tiled") == 1
    assert value(samples, "pipeline_monitor_vae_encode_total", requested="auto", used="direct") == 1
    assert (
        value(samples, "pipeline_monitor_vae_encode_fallbacks_total", used="tiled") == 1
    )  # tiled asked is no fallback
    assert value(samples, "pipeline_monitor_vae_encode_fallbacks_total", used="cpu") == 1
    assert value(samples, "pipeline_monitor_vae_encode_out_of_memory_total") == 3
    assert value(samples, "pipeline_monitor_lora_checks_total") == 3
    assert value(samples, "pipeline_monitor_lora_checks_with_unmatched_keys_total") == 1
    assert value(samples, "pipeline_monitor_lora_unmatched_keys_total") == 120


async def test_an_out_of_memory_comfyui_caught_is_counted_and_its_retry_is_a_fallback(metrics_client):
    client, recorder, _, _, report_mod = metrics_client
    summary = {"strategy_requested": "auto", "strategy_used": "tiled (ComfyUI retry)", "n_out_of_memory": 1}
    run(recorder, report_mod, "p-retry", steps=[("vae_encode", summary)])
    samples = await scrape(client)
    assert value(samples, "pipeline_monitor_vae_encode_out_of_memory_total") == 1
    assert value(samples, "pipeline_monitor_vae_encode_fallbacks_total", used="tiled (ComfyUI retry)") == 1
    assert (
        value(samples, "pipeline_monitor_vae_encode_total", requested="auto", used="tiled (ComfyUI retry)")
        == 1
    )


async def test_cached_steps_are_not_counted_again(metrics_client):
    client, recorder, _, _, report_mod = metrics_client
    recorder.begin_run("p", {})
    recorder.add_step(StepReport(kind="lora", node_id=None, summary={"n_unmatched_keys": 5}, cached=True))
    recorder.end_run("success")
    samples = await scrape(client)
    assert value(samples, "pipeline_monitor_lora_unmatched_keys_total") == 0


async def test_sampler_gauges_from_the_latest_sample(metrics_client):
    client, _, probes, sampler, _ = metrics_client
    probes.torch.allocate(0, 2 * GiB)
    probes.nvml.devices[0]["utilization_pct"] = 77.0
    probes.host.set_rss(700 * 1024**2)
    sampler.sample_once()
    samples = await scrape(client)
    assert value(samples, "pipeline_monitor_process_rss_bytes") == 700 * 1024**2
    assert value(samples, "pipeline_monitor_gpu_allocated_bytes", device="cuda:0") == 2 * GiB
    assert value(samples, "pipeline_monitor_gpu_utilization_pct", device="cuda:0") == 77.0
    assert value(samples, "pipeline_monitor_gpu_temperature_celsius", device="cuda:0") == 40.0
    assert value(samples, "pipeline_monitor_cpu_pct") == 12.5


async def test_node_class_labels_are_bounded(metrics_client, monkeypatch):
    client, recorder, _, _, report_mod = metrics_client
    prometheus_mod = importlib.import_module(f"{PACK}.monitors.exporters.prometheus")
    monkeypatch.setattr(prometheus_mod, "MAX_CLASS_LABELS", 1)
    run(recorder, report_mod, "p")
    samples = await scrape(client)
    assert value(samples, "pipeline_monitor_node_duration_seconds_count", class_type="VAEEncode") == 1
    assert value(samples, "pipeline_monitor_node_duration_seconds_count", class_type="other") == 1


async def test_own_registry_not_the_global_one(metrics_client):
    from prometheus_client import REGISTRY

    client, *_ = metrics_client
    await scrape(client)
    assert not any(name.startswith("pipeline_monitor_") for name in REGISTRY._names_to_collectors)


async def test_dashboard_and_docs_use_only_exported_metric_names(metrics_client):
    import json
    import os
    import re

    client, recorder, probes, sampler, report_mod = metrics_client
    steps = [
        ("vae_encode", {"strategy_requested": "auto", "strategy_used": "tiled", "n_out_of_memory": 1}),
        ("lora", {"n_unmatched_keys": 3}),
    ]
    run(recorder, report_mod, "p", steps=steps, gpu_bytes=GiB, probes=probes)
    sampler.sample_once()
    exported = {name for name, _ in await scrape(client)}
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    dashboard = json.load(open(os.path.join(repo, "docs", "grafana-dashboard.json")))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs.append(dashboard["templating"]["list"][0]["definition"])
    used = {name for expr in exprs for name in re.findall(r"pipeline_monitor_[a-z_]+", expr)}
    assert len(used) >= 10
    assert used <= exported, used - exported
    docs = open(os.path.join(repo, "docs", "metrics.md"), encoding="utf-8").read()
    documented = set(re.findall(r"`(pipeline_monitor_[a-z_]+)`", docs))
    families = {re.sub(r"_(bucket|sum|count|created)$", "", n) for n in exported}
    assert documented <= families | exported, documented - families - exported

"""The Prometheus exporter's figures read back from its own exposition text: histogram bucket
bounds, the prompt-running gauge at 0 and 1, the latest of several samples, what counts as a
fallback or an out of memory, and what is never counted (fakes, no server)."""

from __future__ import annotations

import types

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitors.engine.sampler import Sampler
from monitors.exporters import prometheus
from monitors.probes.fake import GiB, fake_probes

MiB = 1024**2
# The contract with dashboards: these bounds, in bytes and seconds, as the exposition writes them.
BYTE_BOUNDS = [
    268435456.0,
    536870912.0,
    1073741824.0,
    2147483648.0,
    4294967296.0,
    8589934592.0,
    17179869184.0,
    25769803776.0,
    34359738368.0,
    51539607552.0,
    68719476736.0,
    103079215104.0,
    137438953472.0,
]
PROMPT_BOUNDS = [0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0]
NODE_BOUNDS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0]


class Runtime:
    def __init__(self, probes):
        self.sampler = Sampler(probes=probes)
        self.recorder = types.SimpleNamespace(active_prompt_id=None)


@pytest.fixture
def fleet():
    probes = fake_probes("1 GPU")
    runtime = Runtime(probes)
    metrics = prometheus.FleetMetrics(lambda: runtime)
    return metrics, runtime, probes


def scrape(metrics) -> dict:
    samples = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def buckets(samples, name, **labels):
    """le bound -> cumulative count, +Inf left out."""
    found = {}
    for (sample, sample_labels), count in samples.items():
        labels_dict = dict(sample_labels)
        le = labels_dict.pop("le", None)
        if sample == f"{name}_bucket" and labels_dict == labels and le != "+Inf":
            found[float(le)] = count
    return found


def report(prompt_id, duration_s=1.0, status="success", nodes=(), steps=(), peak_rss_bytes=None):
    return {
        "prompt_id": prompt_id,
        "status": status,
        "duration_s": duration_s,
        "span": {"peak_rss_bytes": peak_rss_bytes},
        "nodes": list(nodes),
        "steps": list(steps),
    }


def node(class_type, duration_s=0.2, cached=False, gpu_peaks=()):
    return {
        "class_type": class_type,
        "duration_s": duration_s,
        "cached": cached,
        "gpu_peaks": list(gpu_peaks),
    }


def vae(requested, used, n_oom=0, cached=False):
    summary = {"strategy_requested": requested, "strategy_used": used, "n_out_of_memory": n_oom}
    return {"kind": "vae_encode", "summary": summary, "cached": cached}


def test_byte_histograms_have_their_bounds_and_put_a_peak_in_the_right_bucket(fleet):
    metrics, *_ = fleet
    peak = {"device": "cuda:0", "peak_allocated_bytes": 3 * GiB}
    metrics.observe(report("p", nodes=[node("KSampler", gpu_peaks=[peak])], peak_rss_bytes=600 * MiB))
    samples = scrape(metrics)
    rss = buckets(samples, "pipeline_monitor_prompt_peak_rss_bytes")
    assert sorted(rss) == BYTE_BOUNDS
    assert rss[536870912.0] == 0 and rss[1073741824.0] == 1  # 600 MiB: above 512 MiB, below 1 GiB
    gpu = buckets(samples, "pipeline_monitor_prompt_peak_gpu_allocated_bytes")
    assert sorted(gpu) == BYTE_BOUNDS and gpu[2147483648.0] == 0 and gpu[4294967296.0] == 1
    assert value(samples, "pipeline_monitor_prompt_peak_gpu_allocated_bytes_sum") == 3 * GiB
    assert value(samples, "pipeline_monitor_last_prompt_peak_rss_bytes") == 600 * MiB


def test_the_last_prompts_gpu_peak_is_its_highest_node_not_its_last(fleet):
    metrics, *_ = fleet
    nodes = [
        node("KSampler", gpu_peaks=[{"device": "cuda:0", "peak_allocated_bytes": 5 * GiB}]),
        node("VAEDecode", gpu_peaks=[{"device": "cuda:0", "peak_allocated_bytes": 2 * GiB}]),
    ]
    metrics.observe(report("p", nodes=nodes))
    samples = scrape(metrics)
    assert value(samples, "pipeline_monitor_last_prompt_peak_gpu_allocated_bytes") == 5 * GiB
    # the histogram too: one observation per prompt, its highest node
    assert value(samples, "pipeline_monitor_prompt_peak_gpu_allocated_bytes_sum") == 5 * GiB
    assert value(samples, "pipeline_monitor_prompt_peak_gpu_allocated_bytes_count") == 1


def test_time_histograms_have_their_bounds(fleet):
    metrics, *_ = fleet
    metrics.observe(report("p", duration_s=7.0, nodes=[node("KSampler", duration_s=0.003)]))
    samples = scrape(metrics)
    prompt = buckets(samples, "pipeline_monitor_prompt_duration_seconds", status="success")
    assert sorted(prompt) == PROMPT_BOUNDS and prompt[5.0] == 0 and prompt[10.0] == 1
    nodes = buckets(samples, "pipeline_monitor_node_duration_seconds", class_type="KSampler")
    assert sorted(nodes) == NODE_BOUNDS and nodes[0.001] == 0 and nodes[0.005] == 1


def test_the_prompt_running_gauge_is_1_while_a_prompt_runs(fleet):
    metrics, runtime, _ = fleet
    assert value(scrape(metrics), "pipeline_monitor_prompt_running") == 0
    runtime.recorder.active_prompt_id = "p-running"
    assert value(scrape(metrics), "pipeline_monitor_prompt_running") == 1
    runtime.recorder.active_prompt_id = None
    assert value(scrape(metrics), "pipeline_monitor_prompt_running") == 0


def test_the_gauges_show_the_latest_of_several_samples(fleet):
    metrics, runtime, probes = fleet
    probes.host.set_rss(700 * MiB)
    probes.nvml.devices[0]["utilization_pct"] = 10.0
    runtime.sampler.sample_once()
    probes.host.set_rss(900 * MiB)
    probes.nvml.devices[0]["utilization_pct"] = 95.0
    probes.torch.allocate(0, 3 * GiB)
    probes.torch.allocate(0, -1 * GiB)  # freed, kept by the allocator: reserved stays at 3 GiB
    runtime.sampler.sample_once()
    samples = scrape(metrics)
    assert value(samples, "pipeline_monitor_process_rss_bytes") == 900 * MiB
    assert value(samples, "pipeline_monitor_gpu_utilization_pct", device="cuda:0") == 95.0
    assert value(samples, "pipeline_monitor_gpu_allocated_bytes", device="cuda:0") == 2 * GiB
    assert value(samples, "pipeline_monitor_gpu_reserved_bytes", device="cuda:0") == 3 * GiB
    text = generate_latest(metrics.registry).decode()
    for figure in ("allocated", "reserved"):
        help_line = f"# HELP pipeline_monitor_gpu_{figure}_bytes Torch allocator: bytes {figure} (latest sample)"
        assert help_line in text
    latest = runtime.sampler.points()[-1].unix_time_s
    assert value(samples, "pipeline_monitor_sample_timestamp_seconds") == latest


def test_without_a_sample_the_gauges_read_now_and_unknown_figures_are_left_out(fleet):
    metrics, runtime, probes = fleet
    probes.host.set_rss(300 * MiB)
    probes.nvml.devices[0]["power_w"] = None  # unknown: no gauge, never 0
    samples = scrape(metrics)
    assert not runtime.sampler.points()  # no tick yet: the gauges read the probes now
    assert value(samples, "pipeline_monitor_process_rss_bytes") == 300 * MiB
    assert not any(name == "pipeline_monitor_gpu_power_watts" for name, _ in samples)


def test_fallbacks_and_out_of_memory_count_by_what_was_asked(fleet):
    metrics, *_ = fleet
    steps = [
        vae("auto", "direct"),  # auto starts at direct: no fallback
        vae("tiled", "tiled"),  # asked for tiled: no fallback
        vae("direct", "tiled", n_oom=1),
        vae("auto", "tiled (ComfyUI retry)", n_oom=1),
        vae("auto", None, n_oom=3),  # every strategy failed: no strategy used, no fallback
        vae("auto", "cpu", n_oom=2, cached=True),  # a cached step: counted in its own run
    ]
    metrics.observe(report("p", steps=steps))
    samples = scrape(metrics)
    fallbacks = {
        dict(labels)["used"]: count
        for (name, labels), count in samples.items()
        if name == "pipeline_monitor_vae_encode_fallbacks_total"
    }
    assert fallbacks == {"tiled": 1, "tiled (ComfyUI retry)": 1}
    assert value(samples, "pipeline_monitor_vae_encode_out_of_memory_total") == 5
    assert value(samples, "pipeline_monitor_vae_encode_total", requested="auto", used="none") == 1
    assert value(samples, "pipeline_monitor_vae_encode_total", requested="auto", used="cpu") is None


def test_lora_steps_count_unmatched_keys_only_when_there_are_some(fleet):
    metrics, *_ = fleet
    steps = [{"kind": "lora", "summary": {"n_unmatched_keys": n}} for n in (0, 4, None, True)]
    metrics.observe(report("p", steps=steps))
    samples = scrape(metrics)
    assert value(samples, "pipeline_monitor_lora_checks_total") == 4
    assert value(samples, "pipeline_monitor_lora_checks_with_unmatched_keys_total") == 1
    assert value(samples, "pipeline_monitor_lora_unmatched_keys_total") == 4  # True is no count


def test_a_run_is_counted_once_until_it_leaves_the_seen_window(fleet, monkeypatch):
    metrics, *_ = fleet
    monkeypatch.setattr(prometheus, "MAX_SEEN_RUNS", 2)
    for prompt_id in ("a", "b", "a", "c", "a"):
        metrics.observe(report(prompt_id))
    # "a" again while seen: skipped; after "c" pushed it out of the last 2, counted again
    count = value(scrape(metrics), "pipeline_monitor_prompt_duration_seconds_count", status="success")
    assert count == 4


def test_what_is_not_a_number_is_not_observed(fleet):
    metrics, *_ = fleet
    nodes = [node("A", duration_s=None), node("B", duration_s=True), node("C", cached=True)]
    metrics.observe(report("p", duration_s=True, nodes=nodes, peak_rss_bytes="1 GiB"))
    samples = scrape(metrics)
    assert value(samples, "pipeline_monitor_prompt_duration_seconds_count", status="success") is None
    assert value(samples, "pipeline_monitor_node_duration_seconds_count", class_type="A") is None
    assert value(samples, "pipeline_monitor_nodes_cached_total", class_type="C") == 1
    assert value(samples, "pipeline_monitor_prompt_peak_rss_bytes_count") == 0
    assert value(samples, "pipeline_monitor_last_prompt_peak_rss_bytes") == 0
    metrics.observe(report("q", duration_s=2, nodes=[node("A", duration_s=1)]))  # whole numbers count
    samples = scrape(metrics)
    assert value(samples, "pipeline_monitor_prompt_duration_seconds_sum", status="success") == 2.0
    assert value(samples, "pipeline_monitor_node_duration_seconds_count", class_type="A") == 1


def test_the_largest_gpu_peak_of_the_prompt_is_kept(fleet):
    metrics, *_ = fleet
    peaks = [{"peak_allocated_bytes": GiB}, {"peak_allocated_bytes": None}]
    nodes = [node("A", gpu_peaks=peaks), node("B", gpu_peaks=[{"peak_allocated_bytes": 5 * GiB}])]
    metrics.observe(report("p", nodes=nodes))
    samples = scrape(metrics)
    assert value(samples, "pipeline_monitor_last_prompt_peak_gpu_allocated_bytes") == 5 * GiB
    assert value(samples, "pipeline_monitor_prompt_peak_gpu_allocated_bytes_count") == 1


def test_the_default_bounds_500_class_labels_and_10000_runs(fleet):
    metrics, *_ = fleet
    nodes = [node(f"Class{i}") for i in range(501)]
    metrics.observe(report("many-classes", nodes=nodes))
    samples = scrape(metrics)
    assert value(samples, "pipeline_monitor_node_duration_seconds_count", class_type="Class499") == 1
    assert value(samples, "pipeline_monitor_node_duration_seconds_count", class_type="Class500") is None
    assert value(samples, "pipeline_monitor_node_duration_seconds_count", class_type="other") == 1
    for i in range(10_000):
        metrics.observe(report(f"run{i}"))
    metrics.observe(report("run0"))  # still among the last 10,000 seen: skipped
    metrics.observe(report("many-classes"))  # pushed out by them: counted again
    count = value(scrape(metrics), "pipeline_monitor_prompt_duration_seconds_count", status="success")
    assert count == 1 + 10_000 + 1


def test_a_run_report_object_is_read_as_its_dict(fleet):
    from monitors.node_fields import NodeProfile
    from monitors.report import RunReport, StepReport

    metrics, *_ = fleet
    run_report = RunReport(
        prompt_id="obj",
        status="error",
        started_unix_s=1.0,
        finished_unix_s=3.0,
        duration_s=2.0,
        nodes=(
            NodeProfile(node_id="1", class_type="VAEEncode", status="executed", cached=False, duration_s=0.5),
        ),
        steps=(
            StepReport(
                kind="vae_encode",
                node_id="1",
                summary={"strategy_requested": "auto", "strategy_used": "tiled", "n_out_of_memory": 1},
            ),
        ),
    )
    metrics.observe(run_report)
    samples = scrape(metrics)
    assert value(samples, "pipeline_monitor_prompt_duration_seconds_sum", status="error") == 2.0
    assert value(samples, "pipeline_monitor_node_duration_seconds_count", class_type="VAEEncode") == 1
    assert value(samples, "pipeline_monitor_vae_encode_out_of_memory_total") == 1

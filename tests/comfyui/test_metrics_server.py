"""GET /pipeline_monitor/metrics of the real headless server, parsed with prometheus-client's parser:
after a prompt with a VAE encode monitor and a LoRA monitor (a LoRA whose keys match nothing), the
counters grew by exactly what that run's report says."""

from __future__ import annotations

import pytest
import torch
from prometheus_client.parser import text_string_to_metric_families
from safetensors.torch import save_file

pytestmark = pytest.mark.comfyui

WAN = "pm_tiny_wan21.safetensors"
WAN_VAE = "pm_tiny_wan21_vae.safetensors"
LORA = "pm_metrics_foreign_lora.safetensors"  # a name no other test uses: never served from the cache


def write_foreign_lora(base) -> None:
    """Keys of a bigger WAN (a 7th block) and of a VACE layer: none match the tiny 2-block WAN."""
    folder = base / "models" / "loras"
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(5)
    save_file(
        {
            "lora_unet_blocks_7_self_attn_q.lora_down.weight": torch.randn(4, 128, generator=g),
            "lora_unet_blocks_7_self_attn_q.lora_up.weight": torch.randn(128, 4, generator=g),
            "lora_unet_vace_blocks_0_after_proj.lora_down.weight": torch.randn(4, 128, generator=g),
            "lora_unet_vace_blocks_0_after_proj.lora_up.weight": torch.randn(128, 4, generator=g),
        },
        str(folder / LORA),
    )


PROMPT = {
    "1": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN, "weight_dtype": "default"}},
    "2": {
        "class_type": "LoraLoaderModelOnly",
        "inputs": {"model": ["1", 0], "lora_name": LORA, "strength_model": 1.0},
    },
    "3": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["2", 0]}},
    "4": {
        "class_type": "PMTestNoiseImage",
        "inputs": {"width": 32, "height": 32, "frames": 5, "channels": 3, "seed": 11},
    },
    "5": {"class_type": "VAELoader", "inputs": {"vae_name": WAN_VAE}},
    "6": {
        "class_type": "PipelineMonitorVAEEncode",
        "inputs": {
            "pixels": ["4", 0],
            "vae": ["5", 0],
            "strategy": "auto",
            "allow_dummy": False,
            "tile_size": 512,
            "overlap": 64,
            "temporal_size": 64,
            "temporal_overlap": 8,
        },
    },
    "7": {"class_type": "PMTestLatentDigest", "inputs": {"samples": ["6", 0]}},  # makes the encode run
}


def scrape(server) -> tuple[dict, set]:
    response = server.get("/pipeline_monitor/metrics")
    assert response.status_code == 200, response.text[:2000]
    assert response.headers["Content-Type"].startswith("text/plain")
    samples, families = {}, set()
    for family in text_string_to_metric_families(response.text):
        families.add((family.name, family.type))
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples, families


def value(samples, name, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_route_counts_a_real_prompt(server):
    write_foreign_lora(server.base)
    before, _ = scrape(server)
    prompt_id, history = server.run(PROMPT)
    assert history["status"]["status_str"] == "success", history["status"]
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    after, families = scrape(server)
    assert server.get("/api/pipeline_monitor/metrics").status_code == 200  # mirrored under /api

    def grew(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("pipeline_monitor_prompt_duration_seconds_count", status="success") == 1
    assert grew("pipeline_monitor_prompt_duration_seconds_sum", status="success") == pytest.approx(
        report["duration_s"], rel=1e-6
    )
    executed = [n for n in report["nodes"] if not n["cached"]]
    assert {n["class_type"] for n in executed} >= {"PipelineMonitorLora", "PipelineMonitorVAEEncode"}
    for node in executed:
        assert grew("pipeline_monitor_node_duration_seconds_count", class_type=node["class_type"]) >= 1
    assert value(after, "pipeline_monitor_last_prompt_peak_rss_bytes") == report["span"]["peak_rss_bytes"]
    assert grew("pipeline_monitor_prompt_peak_rss_bytes_count") == 1

    (vae,) = [s for s in report["steps"] if s["kind"] == "vae_encode"]
    used = vae["summary"]["strategy_used"]
    assert grew("pipeline_monitor_vae_encode_total", requested="auto", used=used) == 1
    if used == "direct":
        assert grew("pipeline_monitor_vae_encode_fallbacks_total", used="direct") == 0
    (lora,) = [s for s in report["steps"] if s["kind"] == "lora"]
    unmatched = lora["summary"]["n_unmatched_keys"]
    assert unmatched and unmatched >= 4
    assert grew("pipeline_monitor_lora_unmatched_keys_total") == unmatched
    assert grew("pipeline_monitor_lora_checks_with_unmatched_keys_total") == 1

    assert value(after, "pipeline_monitor_process_rss_bytes") > 0  # sampler gauge (latest sample)
    assert value(after, "pipeline_monitor_prompt_running") == 0
    assert ("pipeline_monitor_prompt_duration_seconds", "histogram") in families
    assert ("pipeline_monitor_node_duration_seconds", "histogram") in families
    assert ("pipeline_monitor_vae_encode_fallbacks", "counter") in families

"""PipelineMonitorLatent in-process, on latents made by ComfyUI's own nodes and tiny KL VAE."""

from __future__ import annotations

import pytest
import torch
from dump_support import codes, run_node

pytestmark = pytest.mark.comfyui

NODE = "PipelineMonitorLatent"
PROMPT = {
    "1": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 48, "batch_size": 2}},
    "9": {"class_type": NODE, "inputs": {"latent": ["1", 0]}},
}


def run_latent(comfy, runtime, latent, prompt=None):
    output, steps = run_node(comfy, runtime, NODE, "latent", prompt=prompt, latent=latent)
    assert len(steps) == 1, steps
    return output, steps[0]


def test_schema(comfy):
    from comfy_api.latest._io import first_real_override

    node = comfy.nodes.NODE_CLASS_MAPPINGS[NODE]
    inputs = node.INPUT_TYPES()
    assert inputs["required"] == {"latent": ("LATENT", {})} and not inputs.get("optional")
    assert node.RETURN_TYPES == ["LATENT"] and node.OUTPUT_NODE is True
    # A passthrough with a fingerprint would re-run everything downstream: it has none.
    assert first_real_override(node, "fingerprint_inputs") is None


def test_empty_latent_image_passes_through_and_is_described(comfy, pack_runtime):
    latent = comfy.nodes.NODE_CLASS_MAPPINGS["EmptyLatentImage"]().generate(64, 48, 2)[0]
    output, step = run_latent(comfy, pack_runtime, latent, PROMPT)
    assert output.result[0] is latent and output.result[0]["samples"] is latent["samples"]
    summary = step["summary"]
    assert isinstance(output.ui["text"], list) and output.ui["text"][0].splitlines()[:4] == [
        "latent type: image",
        "shape: [2, 4, 6, 8]",
        "latent family: SD1 / SD2 / SDXL",
        "channels: 4",
    ]
    assert step["node_id"] == "9" and step["monitor_errors"] == []
    assert summary["latent_type"] == "image" and summary["shape"] == [2, 4, 6, 8]
    assert summary["family"] == "SD1 / SD2 / SDXL" and summary["n_channels"] == 4
    assert summary["size_bytes"] == 2 * 4 * 6 * 8 * 4 and summary["dtype"] == "float32"
    assert summary["n_nan"] == 0 and summary["has_noise_mask"] is False
    assert summary["source_class"] == "EmptyLatentImage"
    assert step["details"]["samples"]["decoded_size"] == {"height": 48, "width": 64}
    assert "all_zero" in codes(step)


def test_vae_encoded_latent_with_noise_mask(comfy, tiny, pack_runtime):
    pixels = torch.rand(1, 64, 64, 3)
    with torch.inference_mode():
        latent = comfy.nodes.NODE_CLASS_MAPPINGS["VAEEncode"]().encode(tiny.vae, pixels)[0]
        mask = torch.zeros(64, 64)
        mask[:, 32:] = 1
        masked = comfy.nodes.NODE_CLASS_MAPPINGS["SetLatentNoiseMask"]().set_mask(latent, mask)[0]
    _, step = run_latent(comfy, pack_runtime, masked)
    summary = step["summary"]
    assert summary["shape"] == [1, 4, 8, 8] and summary["family"] == "SD1 / SD2 / SDXL"
    assert summary["std"] > 0 and "all_zero" not in codes(step)
    assert summary["has_noise_mask"] is True
    assert step["details"]["noise_mask"]["shape"] == [1, 1, 64, 64]
    assert step["details"]["noise_mask"]["mean"] == pytest.approx(0.5)


def test_batch_index_from_latent_from_batch(comfy, pack_runtime):
    latent = {"samples": torch.randn(4, 16, 8, 8)}
    picked = comfy.nodes.NODE_CLASS_MAPPINGS["LatentFromBatch"]().frombatch(latent, 1, 2)[0]
    _, step = run_latent(comfy, pack_runtime, picked)
    assert step["details"]["batch_index"] == [1, 2]
    assert step["summary"]["family"] == "SD3 / Flux.1"


def test_video_latent_with_nan(comfy, pack_runtime):
    samples = torch.randn(1, 16, 3, 8, 8)
    samples[0, 0, 0, 0, :2] = float("nan")
    _, step = run_latent(comfy, pack_runtime, {"samples": samples})
    assert step["summary"]["latent_type"] == "video" and step["summary"]["n_frames"] == 3
    assert step["summary"]["n_nan"] == 2 and "non_finite" in codes(step, "error")


@pytest.mark.parametrize(
    ("latent", "code"),
    [
        (None, "not_a_latent"),
        ({}, "no_samples"),
        ({"samples": torch.zeros(0, 4, 8, 8)}, "empty"),
        ({"samples": torch.tensor(3.0)}, "unusual_rank"),
        ({"samples": torch.zeros(1).expand(1, 16, 500, 1000, 1000)}, "stats_skipped"),
    ],
)
def test_bad_latents_are_findings_and_still_pass_through(comfy, pack_runtime, latent, code):
    output, step = run_latent(comfy, pack_runtime, latent)
    assert output.result[0] is latent
    assert code in codes(step) and step["monitor_errors"] == []


def test_an_analyser_crash_is_recorded_not_raised(comfy, pack_runtime, monkeypatch):
    latent_report = comfy.pack_module("monitors.latent.report")

    def boom(*args, **kwargs):
        raise RuntimeError("analyser broke")

    monkeypatch.setattr(latent_report, "analyse_latent", boom)
    latent = {"samples": torch.zeros(1, 4, 8, 8)}
    output, step = run_latent(comfy, pack_runtime, latent)
    assert output.result[0] is latent and output.ui["text"] == [
        "latent monitor failed: RuntimeError: analyser broke"
    ]
    assert step["monitor_errors"] == ["RuntimeError: analyser broke"]

"""PipelineMonitorConditioning on a real headless ComfyUI server.

CLIPLoader cannot load a tiny text encoder, so the graphs get CONDITIONING from the test pack:
PMTestConditioning (a fixed WAN-shaped [1,512,4096] tensor) and PMTestTinyClip (a tiny SD1 CLIP
built in the server, encoded by ComfyUI's own CLIPTextEncode).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.comfyui

WAN = "pm_tiny_wan21.safetensors"
NODE = "PipelineMonitorConditioning"


def wan_conditioning(seed, n_nan=0):
    inputs = {"tokens": 512, "hidden": 4096, "pooled_size": 0, "seed": seed, "n_nan": n_nan}
    return {"class_type": "PMTestConditioning", "inputs": inputs}


def conditioning_steps(server, prompt_id):
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    assert report["status"] == "success", report.get("error")
    return report, [s for s in report["steps"] if s["kind"] == "conditioning"]


def codes(step, level):
    return [f["code"] for f in step["findings"] if f["level"] == level]


@pytest.fixture(scope="module")
def wan_run(server):
    prompt = {
        "1": wan_conditioning(seed=1),
        "2": wan_conditioning(seed=2, n_nan=3),
        "9": {"class_type": NODE, "inputs": {"positive": ["1", 0], "negative": ["2", 0]}},
        "10": {"class_type": "PMTestConditioningId", "inputs": {"conditioning": ["9", 0]}},
        "11": {"class_type": "PMTestConditioningId", "inputs": {"conditioning": ["1", 0]}},
        "12": {"class_type": "PMTestConditioningId", "inputs": {"conditioning": ["9", 1]}},
        "13": {"class_type": "PMTestConditioningId", "inputs": {"conditioning": ["2", 0]}},
    }
    prompt_id, history = server.run(prompt)
    return prompt_id, history


def test_node_is_served(server):
    info = server.get_json(f"/object_info/{NODE}")[NODE]
    assert info["output"] == ["CONDITIONING", "CONDITIONING", "CLIP"]
    assert info["output_node"] is True and info["category"] == "pipeline_monitor"
    assert list(info["input"]["required"]) == ["positive"]
    assert set(info["input"]["optional"]) == {"negative", "clip", "model", "memory_budget_mib"}


def test_wan_shaped_conditioning_step(server, wan_run):
    prompt_id, history = wan_run
    assert history["status"]["status_str"] == "success", history["status"]
    outputs = history["outputs"]
    # Downstream nodes get the very same objects, values unchanged.
    assert outputs["10"] == outputs["11"] and outputs["12"] == outputs["13"]
    _, steps = conditioning_steps(server, prompt_id)
    assert len(steps) == 1 and steps[0]["node_id"] == "9"
    step = steps[0]
    assert step["monitor_errors"] == []
    summary = step["summary"]
    assert summary["family"] == "WAN 2.1/2.2" and summary["negative_family"] == "WAN 2.1/2.2"
    assert summary["positive_n_tokens"] == 512 and summary["positive_hidden_size"] == 4096
    assert summary["positive_pooled_size"] is None and summary["positive_bytes"] == 512 * 4096 * 4
    assert summary["positive_n_nan"] == 0 and summary["negative_n_nan"] == 3
    assert summary["hidden_size_match"] is True and summary["encoder_class"] is None
    entry = step["details"]["positive"]["entries"][0]
    assert entry["shape"] == [1, 512, 4096] and entry["dtype"] == "float32" and entry["pooled_shape"] is None
    assert entry["std"] == pytest.approx(1.0, rel=0.01)  # seeded standard normal values
    assert step["details"]["positive"]["family"]["confidence"] == "exact"
    assert "nan_values" in codes(step, "error") and "no_clip" in codes(step, "info")
    unresolved = [f["message"] for f in step["findings"] if f["code"] == "text_unresolved"]
    assert len(unresolved) == 2 and all("PMTestConditioning" in m for m in unresolved)
    lines = outputs["9"]["text"][0].splitlines()  # written out, not recomputed
    assert lines[0] == "encoder family: WAN 2.1/2.2" and "hidden sizes match: yes" in lines
    assert "positive tokens: 512" in lines and "positive hidden size: 4,096" in lines


def test_real_text_encoding_on_the_server(server):
    prompt = {
        "1": {"class_type": "PMTestTinyClip", "inputs": {"kind": "sd1", "seed": 0}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a photo of a cat <b>", "clip": ["1", 0]}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "", "clip": ["1", 0]}},
        "4": {
            "class_type": "ConditioningSetTimestepRange",
            "inputs": {"conditioning": ["2", 0], "start": 0.0, "end": 0.8},
        },
        "9": {"class_type": NODE, "inputs": {"positive": ["4", 0], "negative": ["3", 0], "clip": ["1", 0]}},
    }
    prompt_id, history = server.run(prompt)
    assert history["status"]["status_str"] == "success", history["status"]
    report, steps = conditioning_steps(server, prompt_id)
    rows = {row["node_id"]: row for row in report["nodes"]}
    step = steps[0]
    positive = step["details"]["positive"]
    assert step["summary"]["family"] == "SD1.x" and step["summary"]["encoder_class"] == "SD1ClipModel"
    assert positive["entries"][0]["shape"] == [1, 77, 32]
    assert positive["entries"][0]["extra_keys"] == ["end_percent", "start_percent"]
    text = positive["encoders"][0]["texts"][0]
    assert positive["encoders"][0]["node_id"] == "2" and text["text"] == "a photo of a cat <b>"
    assert text["n_characters"] == 20 and text["n_words"] == 6 and text["has_markup"] is True
    assert positive["encode_duration_s"] == rows["2"]["duration_s"] > 0
    assert step["summary"]["positive_characters_per_s"] == pytest.approx(20 / rows["2"]["duration_s"])
    assert "empty_prompt" in codes(step, "info") and "markup_in_prompt" in codes(step, "info")
    assert step["details"]["clip"]["n_patches"] == 0 and step["details"]["clip"]["patches_uuid"]


def test_the_monitor_does_not_change_what_the_sampler_makes(server):
    """The same WAN sampling graph with and without the monitor gives the same latent."""
    from pathlib import Path

    from safetensors.torch import load_file

    def graph(with_monitor: bool, prefix: str) -> dict:
        source = ["9", 0] if with_monitor else ["1", 0]
        negative = ["9", 1] if with_monitor else ["2", 0]
        prompt = {
            "1": wan_conditioning(seed=1),
            "2": wan_conditioning(seed=2),
            "3": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN, "weight_dtype": "default"}},
            "4": {
                "class_type": "EmptyHunyuanLatentVideo",
                "inputs": {"width": 32, "height": 32, "length": 1, "batch_size": 1},
            },
            "5": {
                "class_type": "KSampler",
                "inputs": {
                    "model": ["3", 0],
                    "seed": 7,
                    "steps": 2,
                    "cfg": 4.0,
                    "sampler_name": "euler",
                    "scheduler": "simple",
                    "positive": source,
                    "negative": negative,
                    "latent_image": ["4", 0],
                    "denoise": 1.0,
                },
            },
            "6": {"class_type": "SaveLatent", "inputs": {"samples": ["5", 0], "filename_prefix": prefix}},
        }
        if with_monitor:
            prompt["9"] = {"class_type": NODE, "inputs": {"positive": ["1", 0], "negative": ["2", 0]}}
        return prompt

    latents = []
    for with_monitor in (True, False):
        prompt_id, history = server.run(
            graph(with_monitor, f"pm_conditioning/{'with' if with_monitor else 'without'}")
        )
        assert history["status"]["status_str"] == "success", history["status"]
        saved = history["outputs"]["6"]["latents"][0]
        latents.append(
            load_file(str(Path(server.base) / "output" / saved["subfolder"] / saved["filename"]))[
                "latent_tensor"
            ]
        )
        report, steps = conditioning_steps(server, prompt_id)
        assert {row["node_id"]: row["status"] for row in report["nodes"]}["5"] == "executed"  # not cached
        assert len(steps) == (1 if with_monitor else 0)
    assert latents[0].shape == latents[1].shape and latents[0].isfinite().all()
    assert (latents[0] == latents[1]).all()

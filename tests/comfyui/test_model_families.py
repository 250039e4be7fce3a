"""Every model family of scripts/make_models.py through ComfyUI's stock loaders on a real server.

Per family: UNETLoader -> PipelineMonitorModels; LoraLoaderModelOnly with the family's small kohya
LoRA -> PipelineMonitorLora; a CONDITIONING of the family's real text-encoder shape (tokens,
hidden, pooled: what its encoder gives for a short prompt) -> PipelineMonitorConditioning with no
CLIP connected. The report names ComfyUI's detected class, dtype and sizes, the LoRA's keys all
matched, and the conditioning monitor names the family from the shape, or says "ambiguous" with
the candidates where the shape fits several families.
"""

from __future__ import annotations

import json

import pytest

from tests.comfyui.conftest import load_script

pytestmark = pytest.mark.comfyui

make_models = load_script("make_models")

# What each family's text encoder gives for a short prompt (ComfyUI 0.8): tokens, hidden, pooled,
# and the conditioning monitor's expected answer from that shape alone.
REAL_CONDITIONING = {
    "SD15": (77, 768, 768, "SD1.x", "exact"),  # CLIP-L
    "SD20": (77, 1024, 1024, "SD2.x", "exact"),  # OpenCLIP-H
    "SD3": (154, 4096, 2048, "SD3", "exact"),  # CLIP-L + CLIP-G (padded to 4096) + T5-XXL, 77 + 77
    "WAN21_T2V": (512, 4096, 0, "WAN 2.1/2.2", "exact"),  # umT5-XXL, padded to 512
    "WAN22_T2V": (512, 4096, 0, "WAN 2.1/2.2", "exact"),
    "LTXV": (128, 4096, 0, "LTXV 0.9", "exact"),  # T5-XXL, padded to 128
    "HunyuanVideo": (40, 4096, 768, "HunyuanVideo 1.0", "likely"),  # Llama-3 (free length) + CLIP-L pooled
    # HunyuanDiT's BERT [77, 1024] + pooled 1024 is SD2.x's shape; only its mT5 extra tells them apart.
    "HunyuanDiT": (77, 1024, 1024, "SD2.x", "exact"),
}
# comfy.model_base class ComfyUI builds for each detected comfy.supported_models class.
MODEL_BASE_CLASS = {
    "SD15": "BaseModel",
    "SD20": "BaseModel",
    "SD3": "SD3",
    "WAN21_T2V": "WAN21",
    "WAN22_T2V": "WAN22",
    "LTXV": "LTXV",
    "HunyuanVideo": "HunyuanVideo",
    "HunyuanDiT": "HunyuanDiT",
}
# Hidden/pooled sizes several families share, with a token count none of them pads to.
AMBIGUOUS = (700, 4096, 0, {"WAN 2.1/2.2", "Mochi", "LTXV 0.9", "Chroma / PixArt"})


def conditioning(tokens, hidden, pooled, seed=1):
    inputs = {"tokens": tokens, "hidden": hidden, "pooled_size": pooled, "seed": seed}
    return {"class_type": "PMTestConditioning", "inputs": inputs}


def family_graph(base, family) -> dict:
    paths = make_models.family_paths(str(base), family)
    tokens, hidden, pooled, _, _ = REAL_CONDITIONING[family.model_class]
    unet = paths["model"].rsplit("/", 1)[-1]
    lora = paths["lora"].rsplit("/", 1)[-1]
    return {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": unet, "weight_dtype": "default"}},
        "2": {"class_type": "PipelineMonitorModels", "inputs": {"model": ["1", 0]}},
        "3": {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": lora, "strength_model": 1.0},
        },
        "4": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["3", 0]}},
        "5": conditioning(tokens, hidden, pooled),
        "6": {"class_type": "PipelineMonitorConditioning", "inputs": {"positive": ["5", 0]}},
    }


@pytest.fixture(scope="module")
def family_runs(server):
    make_models.make_family_models(str(server.base))
    runs = {}
    for family in make_models.FAMILIES:
        prompt_id, history = server.run(family_graph(server.base, family))
        assert history["status"]["status_str"] == "success", (family.model_class, history["status"])
        report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
        runs[family.model_class] = {s["kind"]: s for s in report["steps"]}
    return runs


def test_at_least_eight_families():
    assert len({f.model_class for f in make_models.FAMILIES}) >= 8


@pytest.mark.parametrize("family", make_models.FAMILIES, ids=lambda f: f.model_class)
def test_family_through_stock_loaders(family_runs, family):
    steps = family_runs[family.model_class]
    models, lora, cond = steps["models"], steps["lora"], steps["conditioning"]
    for step in (models, lora, cond):
        assert step["monitor_errors"] == [], step["monitor_errors"]
    # ComfyUI's detected class, the dtype and the sizes, from the models monitor: comfy.model_base's
    # class (SD1.5 and SD2.x are both BaseModel there) and the detected comfy.supported_models class.
    model = models["details"]["objects"]["model"]
    assert model["module_class"] == MODEL_BASE_CLASS[family.model_class], model
    assert models["summary"]["model_class"] == MODEL_BASE_CLASS[family.model_class]
    assert model["config_class"] == family.model_class and "config_class" not in model["unknown_reasons"]
    assert models["summary"]["model_config_class"] == family.model_class
    assert '"dtype": "torch.float' in json.dumps(model) or '"dtype": "float' in json.dumps(model), model
    assert models["summary"]["n_objects"] == 1 and models["summary"]["model_size_bytes"] > 0
    # The family's LoRA: every key matched through ComfyUI's own key map, four layers patched.
    assert lora["summary"]["n_unmatched_keys"] == 0 and lora["summary"]["n_matched_keys"] == 12
    assert lora["summary"]["model_n_patch_keys_added"] == 4
    # No CLIP: the family from the real conditioning shape alone.
    tokens, hidden, pooled, expected, confidence = REAL_CONDITIONING[family.model_class]
    side = cond["details"]["positive"]
    assert cond["summary"]["family"] == expected and side["family"]["confidence"] == confidence
    assert (
        cond["summary"]["positive_n_tokens"] == tokens and cond["summary"]["positive_hidden_size"] == hidden
    )
    assert cond["summary"]["positive_pooled_size"] == (pooled or None)


def test_shared_shape_is_ambiguous_with_its_candidates(server):
    tokens, hidden, pooled, families = AMBIGUOUS
    prompt = {
        "1": conditioning(tokens, hidden, pooled),
        "2": {"class_type": "PipelineMonitorConditioning", "inputs": {"positive": ["1", 0]}},
    }
    prompt_id, history = server.run(prompt)
    assert history["status"]["status_str"] == "success", history["status"]
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    (step,) = [s for s in report["steps"] if s["kind"] == "conditioning"]
    family = step["details"]["positive"]["family"]
    assert family["confidence"] == "ambiguous"
    assert {family["family"], *family["candidates"]} == families

"""Text encoders through ComfyUI's stock CLIP loaders, and the WAN 2.2 VAE through VAELoader.

The files come from scripts/make_text_encoders.py (via make_models.py): CLIP-L, OpenCLIP-H,
OpenCLIP-bigG and T5-base at real size, since ComfyUI builds every text encoder from a fixed
config (a tiny file does not load), with ComfyUI's own tokenizers. Per loader and type: the
prompt goes through CLIPTextEncode into PipelineMonitorConditioning twice, once with the CLIP
connected (the family from the encoder's class) and once without (from the shape alone).
TripleCLIPLoader (SD3) is not covered: it needs T5-XXL, whose fixed config is ~9.5 GB in fp16.

These files are 0.2-1.4 GB each (~4 GB in all, written once per test session in ~30 s), so the
prompts are marked slow; the layouts are checked against ComfyUI's detection without writing them.
"""

import pytest

from tests.comfyui.conftest import load_script

pytestmark = pytest.mark.comfyui

make_models = load_script("make_models")
te = make_models.text_encoders
PROMPT = "a lighthouse on a cliff at dawn, oil painting"

SDXL_REFINER = "SDXL refiner / Stable Cascade"
# id: (loader inputs as file keys, type, encoder class, family with the CLIP, tokens, hidden,
# pooled, family from the shape alone and its confidence)
CASES = {
    "clip_l-stable_diffusion": (("clip_l",), "stable_diffusion", "SD1ClipModel", "SD1.x", 77, 768, 768, "SD1.x", "exact"),
    # SD3 without T5 gives 77 tokens of 4096 (CLIP-L padded), pooled L+G 2048: SD3 pads to 154
    # only with T5, so the shape alone cannot single it out.
    "clip_l-sd3": (("clip_l",), "sd3", "SD3ClipModel", "SD3", 77, 4096, 2048, None, "ambiguous"),
    "clip_h-stable_diffusion": (("clip_h",), "stable_diffusion", "SD2ClipModel", "SD2.x", 77, 1024, 1024, "SD2.x", "exact"),
    "clip_g-stable_diffusion": (
        ("clip_g",), "stable_diffusion", "SDXLRefinerClipModel", SDXL_REFINER, 77, 1280, 1280, SDXL_REFINER, "exact"
    ),
    "clip_g-stable_cascade": (
        ("clip_g",), "stable_cascade", "StableCascadeClipModel", SDXL_REFINER, 77, 1280, 1280, SDXL_REFINER, "exact"
    ),
    "t5_base-stable_audio": (("t5_base",), "stable_audio", "SAT5Model", "Stable Audio", 128, 768, None, "Stable Audio", "exact"),
    "clip_l+clip_g-sdxl": (("clip_l", "clip_g"), "sdxl", "SDXLClipModel", "SDXL", 77, 2048, 1280, "SDXL", "exact"),
    "clip_l+clip_g-sd3": (("clip_l", "clip_g"), "sd3", "SD3ClipModel", "SD3", 77, 4096, 2048, None, "ambiguous"),
}  # fmt: skip


def loader_node(keys, clip_type) -> dict:
    files = [te.TEXT_ENCODERS_BY_KEY[k].file for k in keys]
    if len(files) == 1:
        return {"class_type": "CLIPLoader", "inputs": {"clip_name": files[0], "type": clip_type}}
    inputs = {"clip_name1": files[0], "clip_name2": files[1], "type": clip_type}
    return {"class_type": "DualCLIPLoader", "inputs": inputs}


def encode_graph(keys, clip_type) -> dict:
    return {
        "1": loader_node(keys, clip_type),
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": PROMPT, "clip": ["1", 0]}},
        "3": {
            "class_type": "PipelineMonitorConditioning",
            "inputs": {"positive": ["2", 0], "clip": ["1", 0]},
        },
        "4": {"class_type": "PipelineMonitorConditioning", "inputs": {"positive": ["2", 0]}},
    }


TE_MODEL = {"clip_l": "CLIP_L", "clip_h": "CLIP_H", "clip_g": "CLIP_G", "t5_base": "T5_BASE"}


@pytest.mark.parametrize("key", list(TE_MODEL))
def test_layout_is_detected_as_its_family(comfy, key):
    """The generated layout, as meta tensors, is what comfy.sd.detect_te_model expects."""
    import comfy.sd
    import torch

    shapes = te.text_encoder_shapes(comfy, key)
    meta = {name: torch.empty(shape, device="meta") for name, shape in shapes.items()}
    assert comfy.sd.detect_te_model(meta) == getattr(comfy.sd.TEModel, TE_MODEL[key])


def test_wan22_vae_layout_has_the_keys_comfyui_detects(comfy):
    shapes = te.wan22_vae_shapes(comfy)
    # comfy/sd.py VAE: the WAN family's key, then the one only the 2.2 VAE has.
    assert "decoder.middle.0.residual.0.gamma" in shapes
    assert "decoder.upsamples.0.upsamples.0.residual.2.weight" in shapes
    assert shapes["conv1.weight"][0] == 2 * 48


@pytest.fixture(scope="module")
def text_encoder_files(server):
    return make_models.make_text_encoder_models(str(server.base))


@pytest.fixture(scope="module")
def encode_runs(server, text_encoder_files):
    """One prompt per case, in order, so that one big encoder is loaded at a time."""
    runs = {}
    for case_id, (keys, clip_type, *_rest) in CASES.items():
        prompt_id, history = server.run(encode_graph(keys, clip_type))
        assert history["status"]["status_str"] == "success", (case_id, history["status"])
        report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
        runs[case_id] = {s["node_id"]: s for s in report["steps"] if s["kind"] == "conditioning"}
    return runs


@pytest.mark.slow
def test_files_are_the_real_architectures(text_encoder_files):
    from safetensors import safe_open

    expected_layers = {"clip_l": 12, "clip_h": 24, "clip_g": 32, "t5_base": 12}
    for key, path in text_encoder_files.items():
        with safe_open(path, "pt") as f:
            names = list(f.keys())
            if key == "t5_base":
                layers = {n.split(".")[2] for n in names if n.startswith("encoder.block.")}
                assert f.get_slice("shared.weight").get_shape() == [32128, 768]
            else:
                layers = {n.split(".")[3] for n in names if n.startswith("text_model.encoder.layers.")}
        assert len(layers) == expected_layers[key], (key, sorted(layers))


@pytest.mark.slow
@pytest.mark.parametrize("case_id", list(CASES))
def test_encoder_family_through_stock_loader(encode_runs, case_id):
    _keys, _type, encoder_class, family, tokens, hidden, pooled, shape_family, shape_confidence = CASES[
        case_id
    ]
    with_clip, shape_only = encode_runs[case_id]["3"], encode_runs[case_id]["4"]
    for step in (with_clip, shape_only):
        assert step["monitor_errors"] == [], step["monitor_errors"]
        summary = step["summary"]
        assert summary["positive_n_tokens"] == tokens and summary["positive_hidden_size"] == hidden, summary
        assert summary["positive_pooled_size"] == pooled, summary
        assert summary["positive_n_nan"] == 0, summary
    # With the CLIP: ComfyUI's encoder class names the family exactly (the class ComfyUI makes on
    # the fly for SD3 is SD3ClipModel_, a subclass of the named one).
    assert with_clip["details"]["clip"]["encoder_class"].rstrip("_") == encoder_class, with_clip["details"][
        "clip"
    ]
    side = with_clip["details"]["positive"]["family"]
    assert with_clip["summary"]["family"] == family and side["confidence"] == "exact", side
    assert side["basis"] == "clip class"
    # Without it: the shape alone, exact where the shape is the family's own.
    side = shape_only["details"]["positive"]["family"]
    assert side["basis"] == "shape" and side["confidence"] == shape_confidence, side
    if shape_family is not None:
        assert shape_only["summary"]["family"] == shape_family
    else:
        assert family in {side["family"], *side["candidates"]}, side


# -- the WAN 2.2 VAE ---------------------------------------------------------------------------------

WAN22 = make_models.FAMILIES_BY_CLASS["WAN22_T2V"]
TILES = {"tile_size": 512, "overlap": 64, "temporal_size": 64, "temporal_overlap": 8}


@pytest.mark.slow
def test_wan22_vae_with_the_wan22_family(server):
    make_models.make_family_models(str(server.base))
    make_models.make_wan22_vae(str(server.base))
    prompt = {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN22.file, "weight_dtype": "default"}},
        "2": {"class_type": "VAELoader", "inputs": {"vae_name": te.WAN22_VAE}},
        "3": {"class_type": "PipelineMonitorModels", "inputs": {"model": ["1", 0], "vae": ["2", 0]}},
        "4": {
            "class_type": "PMTestNoiseImage",
            "inputs": {"width": 64, "height": 64, "frames": 5, "channels": 3, "seed": 3},
        },
        "5": {
            "class_type": "PipelineMonitorVAEEncode",
            "inputs": {
                "pixels": ["4", 0],
                "vae": ["2", 0],
                "strategy": "direct",
                "allow_dummy": False,
                **TILES,
            },
        },
        "6": {"class_type": "PipelineMonitorLatent", "inputs": {"latent": ["5", 0]}},
    }
    prompt_id, history = server.run(prompt)
    assert history["status"]["status_str"] == "success", history["status"]
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    steps = {s["kind"]: s for s in report["steps"]}
    assert set(steps) == {"models", "vae_encode", "latent"}, report["nodes"]
    for step in steps.values():
        assert step["monitor_errors"] == [], step
    models = steps["models"]["details"]["objects"]
    assert models["model"]["config_class"] == "WAN22_T2V"
    assert models["vae"]["module_class"] == "WanVAE", models["vae"]
    # 5 frames of 64x64 -> (5 + 3) // 4 = 2 latent frames of 4x4 with 48 channels: 16x spatial
    # per side and 4x temporal, what the WAN 2.2 5B model's 48 input channels take.
    vae = steps["vae_encode"]["summary"]
    assert vae["strategy_used"] == "direct" and vae["latent_type"] == "video"
    assert vae["latent_shape"] == [1, 48, 2, 4, 4]
    assert vae["latent_shape"][1] == WAN22.unet_config["in_dim"]
    assert vae["spatial_compression_ratio"] == 256.0 and vae["temporal_compression_ratio"] == 2.5
    latent = steps["latent"]["summary"]
    assert latent["n_channels"] == 48 and latent["family"].startswith("WAN 2.2"), latent
    assert latent["n_nan"] == 0

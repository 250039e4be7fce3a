"""Generated model files for tests, the demo and the benchmark, loaded by ComfyUI's stock loaders.

    COMFYUI_PATH=<ComfyUI checkout (0.8.0 to 0.33.0)> python scripts/make_models.py BASE [--families] [--text-encoders] [--wan22-vae] [--full-size] [--check]

Nothing is downloaded: every file is built from ComfyUI's own model classes with seeded random
weights and written under BASE/models. Existing files are kept (idempotent).

default      the tiny WAN 2.1 model + VAE of make_tiny_models.py (what the demo needs)
--families   one tiny diffusion model per family ComfyUI detects from shapes (UNETLoader), each
             with a small kohya LoRA (4 linear layers, rank 4) made from ComfyUI's own key map:
             SD1.5, SD2.x, SD3, WAN 2.1, WAN 2.2 (5B, 48 channels), LTXV, HunyuanVideo, HunyuanDiT.
             A few MB each (SD1.5/SD2.x/HunyuanDiT ~50-85 MB: ComfyUI matches them on 320 model
             channels or on their text embedders' real widths).
--full-size  an SD1.5-architecture checkpoint at real size (UNet + CLIP-L + VAE, fp16, ~2 GB) and a
             kohya LoRA of real size (rank 32 on every attention, projection and feed-forward layer
             of the UNet and on every attention and MLP layer of the text encoder).
--text-encoders  CLIP-L, OpenCLIP-H, OpenCLIP-bigG and T5-base at real size (~2.6 GB in all; ComfyUI
             builds text encoders from fixed configs, so they cannot be tiny): make_text_encoders.py.
--wan22-vae  the WAN 2.2 VAE (48-channel latent) at real size (~1.4 GB; its config is fixed too).
--check      load what was written with ComfyUI's loaders and verify the detected classes.
"""

import argparse
import importlib.util
import os
import sys
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 1234
FAMILY_LORA_RANK = 4
FULL_LORA_RANK = 32
FULL_CHECKPOINT = "pm_sd15_full.safetensors"
FULL_LORA = "pm_sd15_full_lora.safetensors"


def _tiny_module():
    spec = importlib.util.spec_from_file_location(
        "pm_make_tiny_models", os.path.join(HERE, "make_tiny_models.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tiny = _tiny_module()
_te_spec = importlib.util.spec_from_file_location(
    "pm_make_text_encoders", os.path.join(HERE, "make_text_encoders.py")
)
text_encoders = importlib.util.module_from_spec(_te_spec)
_te_spec.loader.exec_module(text_encoders)


def _unet(model_channels: int, context_dim: int, linear: bool, **extra) -> dict:
    """The smallest UNet ComfyUI still matches to an SD class: one level, one res block."""
    return {
        "in_channels": 4,
        "out_channels": 4,
        "model_channels": model_channels,
        "channel_mult": [1],
        "num_res_blocks": [1],
        "transformer_depth": [1],
        "transformer_depth_output": [1, 1],
        "transformer_depth_middle": 1,
        "context_dim": context_dim,
        "num_heads": 8,
        "num_head_channels": -1,
        "use_linear_in_transformer": linear,
        "adm_in_channels": None,
        "use_temporal_attention": False,
        "image_size": 32,
        "use_spatial_transformer": True,
        "legacy": False,
        **extra,
    }


@dataclass(frozen=True)
class Family:
    """One tiny diffusion model: the supported_models class it is built from and detected as."""

    name: str  # the family as the conditioning monitor names it
    model_class: str  # comfy.supported_models class, built from and expected back from detection
    unet_config: dict = field(default_factory=dict)

    @property
    def file(self) -> str:
        return f"pm_tiny_{self.key}.safetensors"

    @property
    def lora_file(self) -> str:
        return f"pm_tiny_{self.key}_lora.safetensors"

    @property
    def key(self) -> str:
        return self.model_class.lower()


FAMILIES: tuple[Family, ...] = (
    # ComfyUI matches SD1.5 and SD2.x on 320 model channels and their CLIP widths (768, 1024).
    Family("SD1.x", "SD15", _unet(320, 768, False)),
    Family("SD2.x", "SD20", _unet(320, 1024, True, num_heads=-1, num_head_channels=64)),
    Family(
        "SD3",
        "SD3",
        {
            "in_channels": 16,
            "out_channels": 16,
            "patch_size": 2,
            "depth": 1,  # hidden size 64 * depth
            "adm_in_channels": 2048,
            "pos_embed_max_size": 32,
            "pos_embed_scaling_factor": None,
            "context_embedder_config": {
                "target": "torch.nn.Linear",
                "params": {"in_features": 4096, "out_features": 64},
            },
        },
    ),
    Family("WAN 2.1/2.2", "WAN21_T2V"),  # the demo's file, from make_tiny_models.py
    Family(
        "WAN 2.1/2.2",
        "WAN22_T2V",
        {
            "image_model": "wan2.1",
            "model_type": "t2v",
            "dim": 128,
            "ffn_dim": 256,
            "num_layers": 1,
            "num_heads": 1,
            "in_dim": 48,
            "out_dim": 48,
            "text_dim": 4096,
        },
    ),
    Family(
        "LTXV 0.9",
        "LTXV",
        {"image_model": "ltxv", "num_layers": 1, "attention_head_dim": 4, "cross_attention_dim": 128},
    ),
    Family(
        "HunyuanVideo 1.0",
        "HunyuanVideo",
        {
            "image_model": "hunyuan_video",
            "in_channels": 16,
            "out_channels": 16,
            "patch_size": [1, 2, 2],
            "vec_in_dim": 768,
            "axes_dim": [16, 56, 56],
            "context_in_dim": 4096,
            "hidden_size": 128,  # one head of 128
            "mlp_ratio": 4.0,
            "num_heads": 1,
            "depth": 1,
            "depth_single_blocks": 1,
            "theta": 256,
            "qkv_bias": True,
            "guidance_embed": True,
            "meanflow": False,
            "byt5": False,
            "use_cond_type_embedding": False,
            "vision_in_dim": None,
            "meanflow_sum": False,
        },
    ),
    Family("HunyuanDiT", "HunyuanDiT", {"image_model": "hydit", "depth": 1, "hidden_size": 128}),
)

FAMILIES_BY_CLASS = {f.model_class: f for f in FAMILIES}


# -- weights ------------------------------------------------------------------------------------


def fill_value(name: str, shape, generator, dtype, std: float = 0.02):
    """Seeded weight for one state-dict entry: norms 1, biases 0, the rest normal(0, std)."""
    import torch

    leaf = name.rsplit(".", 1)[-1]
    lowered = name.lower()
    if leaf in ("bias", "beta") or "position_ids" in name:
        value = torch.zeros(shape, dtype=torch.float32)
        if "position_ids" in name:
            value = torch.arange(shape[-1], dtype=torch.float32).expand(shape).clone()
        return value.to(dtype)
    if leaf in ("gamma", "scale") or "norm" in lowered or leaf == "logit_scale":
        return torch.ones(shape, dtype=dtype)
    if dtype == torch.float16:  # drawn in half precision: the 2 GB checkpoint in well under a minute
        return torch.randn(shape, generator=generator, dtype=dtype).mul_(std)
    return (torch.randn(shape, generator=generator, dtype=torch.float32) * std).to(dtype)


def random_state_dict(shapes: dict, dtype, seed: int = SEED, skip=()) -> dict:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return {
        name: fill_value(name, shape, generator, dtype)
        for name, shape in sorted(shapes.items())
        if not any(name.endswith(s) for s in skip)
    }


def meta_shapes(build) -> dict:
    """State-dict shapes of a module built on the meta device (no memory, no init)."""
    import torch

    with torch.device("meta"):
        module = build()
    shapes = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    dtypes = {k: v.dtype for k, v in module.state_dict().items()}
    return shapes, dtypes


def family_model_config(comfy, family: Family):
    import torch

    cls = getattr(comfy.supported_models, family.model_class)
    config = cls(dict(family.unet_config))
    config.set_inference_dtype(torch.float32, None)
    return config


def build_family(comfy, family: Family) -> dict:
    import torch

    config = family_model_config(comfy, family)
    shapes, _ = meta_shapes(lambda: config.get_model({}).diffusion_model)
    return random_state_dict(shapes, torch.float16, seed=SEED + len(family.key))


def lora_targets(model_config, model_state_dict_keys, kohya_prefix: str = "lora_unet_") -> dict[str, str]:
    """kohya LoRA key -> model weight key, from ComfyUI's own key map (comfy.lora)."""
    import types

    import comfy.lora

    holder = types.SimpleNamespace(
        state_dict=lambda: dict.fromkeys(model_state_dict_keys), model_config=model_config
    )
    key_map = comfy.lora.model_lora_keys_unet(holder, {})
    return {k: v for k, v in key_map.items() if isinstance(v, str) and k.startswith(kohya_prefix)}


def build_family_lora(comfy, family: Family, model_sd: dict) -> dict:
    """Rank-4 kohya LoRA on the first four linear weights ComfyUI maps a kohya key to."""
    import torch

    full_keys = [f"diffusion_model.{k}" for k in model_sd]
    targets = lora_targets(family_model_config(comfy, family), full_keys)
    linear = sorted(
        (lora_key, weight_key)
        for lora_key, weight_key in targets.items()
        if weight_key[len("diffusion_model.") :] in model_sd
        and model_sd[weight_key[len("diffusion_model.") :]].ndim == 2
    )[:4]
    generator = torch.Generator().manual_seed(SEED)
    lora = {}
    for lora_key, weight_key in linear:
        out_dim, in_dim = model_sd[weight_key[len("diffusion_model.") :]].shape
        lora[f"{lora_key}.lora_down.weight"] = (
            torch.randn((FAMILY_LORA_RANK, in_dim), generator=generator) * 0.1
        )
        lora[f"{lora_key}.lora_up.weight"] = (
            torch.randn((out_dim, FAMILY_LORA_RANK), generator=generator) * 0.1
        )
        lora[f"{lora_key}.alpha"] = torch.tensor(float(FAMILY_LORA_RANK))
    return lora


# -- the full-size SD1.5 checkpoint ----------------------------------------------------------------

SD15_UNET = {
    "use_checkpoint": False,
    "image_size": 32,
    "out_channels": 4,
    "use_spatial_transformer": True,
    "legacy": False,
    "in_channels": 4,
    "model_channels": 320,
    "num_res_blocks": [2, 2, 2, 2],
    "transformer_depth": [1, 1, 1, 1, 1, 1, 0, 0],
    "channel_mult": [1, 2, 4, 4],
    "transformer_depth_middle": 1,
    "transformer_depth_output": [0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1],
    "context_dim": 768,
    "num_heads": 8,
    "num_head_channels": -1,
    "use_linear_in_transformer": False,
    "adm_in_channels": None,
    "use_temporal_attention": False,
}
SD15_VAE = {
    "double_z": True,
    "z_channels": 4,
    "resolution": 256,
    "in_channels": 3,
    "out_ch": 3,
    "ch": 128,
    "ch_mult": [1, 2, 4, 4],
    "num_res_blocks": 2,
    "attn_resolutions": [],
    "dropout": 0.0,
}


def full_size_shapes(comfy) -> dict:
    """Checkpoint key -> shape for UNet, CLIP-L and VAE, built on the meta device."""
    import comfy.ldm.models.autoencoder
    import comfy.sd1_clip
    import torch

    config = comfy.supported_models.SD15(dict(SD15_UNET))
    config.set_inference_dtype(torch.float16, None)
    unet, _ = meta_shapes(lambda: config.get_model({}).diffusion_model)
    clip, _ = meta_shapes(lambda: comfy.sd1_clip.SDClipModel(device="meta", dtype=torch.float16).transformer)
    vae, _ = meta_shapes(lambda: comfy.ldm.models.autoencoder.AutoencoderKL(ddconfig=SD15_VAE, embed_dim=4))
    shapes = {f"model.diffusion_model.{k}": v for k, v in unet.items()}
    shapes.update(
        {f"cond_stage_model.transformer.{k}": v for k, v in clip.items() if "text_projection" not in k}
    )
    shapes.update({f"first_stage_model.{k}": v for k, v in vae.items()})
    return shapes


def build_full_checkpoint(comfy) -> dict:
    import torch

    sd = random_state_dict(full_size_shapes(comfy), torch.float16)
    ids = "cond_stage_model.transformer.text_model.embeddings.position_ids"
    if ids in sd:  # integer positions, as real checkpoints store them
        sd[ids] = sd[ids].to(torch.int64)
    return sd


def full_lora_targets(comfy, checkpoint_shapes: dict) -> list[tuple[str, tuple]]:
    """(kohya module name, base weight shape) for every UNet attention/projection/feed-forward
    layer and every text-encoder attention/MLP layer, named through ComfyUI's own key maps."""
    import types

    import comfy.lora

    unet_keys = {k[len("model.") :]: v for k, v in checkpoint_shapes.items() if k.startswith("model.")}
    unet_map = lora_targets(comfy.supported_models.SD15(dict(SD15_UNET)), list(unet_keys))
    unet_layers = ("attn1_to_", "attn2_to_", "ff_net_0_proj", "ff_net_2", "proj_in", "proj_out")
    diffusers_names = ("lora_unet_down_blocks_", "lora_unet_mid_block_", "lora_unet_up_blocks_")
    targets = [
        (lora_key, unet_keys[weight_key])
        for lora_key, weight_key in unet_map.items()
        if lora_key.startswith(diffusers_names)
        and weight_key in unet_keys
        and any(layer in lora_key for layer in unet_layers)
    ]
    clip_keys = {
        "clip_l.transformer." + k[len("cond_stage_model.transformer.") :]: v
        for k, v in checkpoint_shapes.items()
        if k.startswith("cond_stage_model.")
    }
    holder = types.SimpleNamespace(state_dict=lambda: dict.fromkeys(clip_keys))
    clip_map = comfy.lora.model_lora_keys_clip(holder, {})
    targets += [
        (lora_key, clip_keys[weight_key])
        for lora_key, weight_key in clip_map.items()
        if isinstance(weight_key, str) and lora_key.startswith("lora_te_text_model_encoder_layers_")
    ]
    return sorted(set(targets))


def build_full_lora(comfy, rank: int = FULL_LORA_RANK) -> dict:
    import torch

    generator = torch.Generator().manual_seed(SEED + 7)
    lora = {}
    for name, shape in full_lora_targets(comfy, full_size_shapes(comfy)):
        out_dim, in_dim, kernel = shape[0], shape[1], tuple(shape[2:])
        lora[f"{name}.lora_down.weight"] = (
            torch.randn((rank, in_dim, *kernel), generator=generator) * (1 / in_dim**0.5)
        ).to(torch.float16)
        lora[f"{name}.lora_up.weight"] = (
            torch.randn((out_dim, rank, *((1,) * len(kernel))), generator=generator) * 0.01
        ).to(torch.float16)
        lora[f"{name}.alpha"] = torch.tensor(float(rank), dtype=torch.float16)
    return lora


# -- writing and checking ---------------------------------------------------------------------------


def save(sd: dict, path: str, metadata: dict | None = None) -> None:
    from safetensors.torch import save_file

    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    save_file(
        sd, tmp, metadata={"format": "pt", "pipeline_monitor": "generated test model", **(metadata or {})}
    )
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _write(path: str, build) -> None:
    started = time.monotonic()
    save(*build())
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {time.monotonic() - started:.2f} s)")


def family_paths(base: str, family: Family) -> dict[str, str]:
    if family.model_class == "WAN21_T2V":
        model = os.path.join(base, "models", "diffusion_models", tiny.WAN_NAME)
    else:
        model = os.path.join(base, "models", "diffusion_models", family.file)
    return {"model": model, "lora": os.path.join(base, "models", "loras", family.lora_file)}


def full_size_paths(base: str) -> dict[str, str]:
    return {
        "checkpoint": os.path.join(base, "models", "checkpoints", FULL_CHECKPOINT),
        "lora": os.path.join(base, "models", "loras", FULL_LORA),
    }


def make_family_models(base: str, comfy=None) -> dict[str, dict[str, str]]:
    """Every family's model and LoRA under BASE/models; returns {model_class: {kind: path}}."""
    tiny.make_tiny_models(base)
    out = {}
    for family in FAMILIES:
        paths = family_paths(base, family)
        out[family.model_class] = paths
        if all(os.path.isfile(p) for p in paths.values()):
            continue
        comfy = comfy or tiny.import_comfy()
        if not os.path.isfile(paths["model"]):
            _write(paths["model"], lambda f=family, p=paths, c=comfy: (build_family(c, f), p["model"]))
        from safetensors.torch import load_file

        model_sd = load_file(paths["model"])
        _write(
            paths["lora"],
            lambda f=family, p=paths, m=model_sd, c=comfy: (
                build_family_lora(c, f, m),
                p["lora"],
                {"ss_network_dim": str(FAMILY_LORA_RANK), "ss_base_model_version": f.model_class},
            ),
        )
    return out


def make_full_size(base: str, comfy=None) -> dict[str, str]:
    """The real-size SD1.5 checkpoint and its LoRA under BASE/models (kept when present)."""
    paths = full_size_paths(base)
    if not os.path.isfile(paths["checkpoint"]):
        comfy = comfy or tiny.import_comfy()
        _write(paths["checkpoint"], lambda: (build_full_checkpoint(comfy), paths["checkpoint"]))
    if not os.path.isfile(paths["lora"]):
        comfy = comfy or tiny.import_comfy()
        _write(
            paths["lora"],
            lambda: (
                build_full_lora(comfy),
                paths["lora"],
                {
                    "ss_network_dim": str(FULL_LORA_RANK),
                    "ss_network_alpha": str(FULL_LORA_RANK),
                    "ss_base_model_version": "sd_v1",
                },
            ),
        )
    return paths


def check_families(comfy, paths: dict) -> None:
    for family in FAMILIES:
        model = comfy.sd.load_diffusion_model(paths[family.model_class]["model"])
        detected = type(model.model.model_config).__name__
        assert detected == family.model_class, f"{family.file}: detected as {detected}"
        print(f"check ok: {family.model_class} ({family.name}), {model.model_size()} bytes")


def check_full_size(comfy, paths: dict) -> None:
    model, clip, vae, _ = comfy.sd.load_checkpoint_guess_config(paths["checkpoint"])
    detected = type(model.model.model_config).__name__
    assert detected == "SD15", detected
    assert type(clip.cond_stage_model).__name__ == "SD1ClipModel"
    print(
        f"check ok: {FULL_CHECKPOINT} {detected}, model {model.model_size()} bytes, VAE {type(vae.first_stage_model).__name__}"
    )


def make_text_encoder_models(base: str, comfy=None, keys=None) -> dict[str, str]:
    """Real-size text encoders under BASE/models/text_encoders: {key: path} (make_text_encoders.py)."""
    wanted = keys or [te.key for te in text_encoders.TEXT_ENCODERS]
    paths = {k: text_encoders.text_encoder_path(base, text_encoders.TEXT_ENCODERS_BY_KEY[k]) for k in wanted}
    if all(os.path.isfile(p) for p in paths.values()):
        return paths
    return text_encoders.make_text_encoders(base, comfy or tiny.import_comfy(), wanted)


def make_wan22_vae(base: str, comfy=None) -> str:
    """The real-size WAN 2.2 VAE under BASE/models/vae."""
    path = text_encoders.wan22_vae_path(base)
    if os.path.isfile(path):
        return path
    return text_encoders.make_wan22_vae(base, comfy or tiny.import_comfy())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="ComfyUI base directory (the files go under BASE/models)")
    parser.add_argument("--families", action="store_true", help="one tiny model + LoRA per family")
    parser.add_argument("--full-size", action="store_true", help="the ~2 GB SD1.5 checkpoint and its LoRA")
    parser.add_argument("--text-encoders", action="store_true", help="CLIP-L/H/G and T5-base, real size")
    parser.add_argument("--wan22-vae", action="store_true", help="the WAN 2.2 VAE, real size (~1.4 GB)")
    parser.add_argument("--check", action="store_true", help="load the files with ComfyUI and verify them")
    args = parser.parse_args(argv)
    base = os.path.abspath(args.base)
    tiny.make_tiny_models(base, run_check=args.check)
    comfy = tiny.import_comfy() if args.check else None
    if args.families:
        paths = make_family_models(base, comfy)
        if args.check:
            check_families(comfy, paths)
    if args.text_encoders:
        paths = make_text_encoder_models(base, comfy)
        if args.check:
            text_encoders.check_text_encoders(comfy, paths)
    if args.wan22_vae:
        path = make_wan22_vae(base, comfy)
        if args.check:
            text_encoders.check_wan22_vae(comfy, path)
    if args.full_size:
        paths = make_full_size(base, comfy)
        if args.check:
            check_full_size(comfy, paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())

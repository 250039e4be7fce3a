"""Write tiny real model files for tests and the demo, built with ComfyUI's own classes.

    COMFYUI_PATH=<ComfyUI checkout (0.8.0 to 0.33.0)> python scripts/make_tiny_models.py BASE [--check]

BASE/models/diffusion_models/pm_tiny_wan21.safetensors  WAN 2.1 T2V (dim 128, ffn 256, 2 layers), ~4 MB
BASE/models/vae/pm_tiny_wan21_vae.safetensors            WAN 2.1 VAE (dim 8, z_dim 16), ~4 MB

Weights are deterministic and small (seeded normal(0, 0.02), norms 1, biases 0), so outputs are
finite. Existing files are kept (idempotent). --check loads both files the way UNETLoader and
VAELoader do and verifies what ComfyUI detects. Runs in seconds on a CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

WAN_NAME = "pm_tiny_wan21.safetensors"
VAE_NAME = "pm_tiny_wan21_vae.safetensors"
WAN_CONFIG = {
    "model_type": "t2v",
    "dim": 128,
    "ffn_dim": 256,
    "num_layers": 2,
    "num_heads": 1,
    "text_dim": 4096,
}
VAE_CONFIG = {
    "dim": 8,
    "z_dim": 16,
    "dim_mult": [1, 2, 4, 4],
    "num_res_blocks": 2,
    "attn_scales": [],
    "temperal_downsample": [False, True, True],
    "dropout": 0.0,
}
SEED = 1234


def import_comfy():
    """Put COMFYUI_PATH on sys.path and import ComfyUI's model code in CPU mode."""
    comfy_path = os.environ.get("COMFYUI_PATH")
    if not comfy_path or not os.path.isdir(comfy_path):
        sys.exit("COMFYUI_PATH must point to a ComfyUI checkout (0.8.0 to 0.33.0)")
    if comfy_path not in sys.path:
        sys.path.insert(0, comfy_path)
    import comfy.cli_args

    comfy.cli_args.args.cpu = True  # before model_management is imported (it probes CUDA at import)
    import comfy.ldm.wan.model
    import comfy.ldm.wan.vae
    import comfy.model_management  # noqa: F401
    import comfy.ops
    import comfy.sd

    return comfy


def init_weights(module, seed: int = SEED) -> None:
    """Deterministic small weights: normal(0, 0.02); norm scales 1; biases 0."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(module.named_parameters()):
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "bias" or leaf == "beta":
                param.zero_()
            elif leaf == "gamma" or "norm" in name:
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator, dtype=torch.float32) * 0.02)


def state_dict_of(module) -> dict:
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in module.state_dict().items()}


def build_wan(comfy):
    import torch

    model = comfy.ldm.wan.model.WanModel(
        **WAN_CONFIG, operations=comfy.ops.disable_weight_init, device="cpu", dtype=torch.float32
    )
    init_weights(model)
    return state_dict_of(model)


def build_vae(comfy):
    model = comfy.ldm.wan.vae.WanVAE(**VAE_CONFIG)
    init_weights(model)
    return state_dict_of(model)


def save(sd: dict, path: str) -> None:
    from safetensors.torch import save_file

    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    save_file(sd, tmp, metadata={"format": "pt", "pipeline_monitor": "tiny test model"})
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def check(comfy, wan_path: str, vae_path: str) -> None:
    """Load both files as UNETLoader / VAELoader do and verify the detection."""
    import comfy.utils
    import torch

    model = comfy.sd.load_diffusion_model(wan_path)
    model_class = type(model.model.model_config).__name__
    assert model_class == "WAN21_T2V", f"{wan_path} detected as {model_class}"
    assert type(model.model.diffusion_model).__name__ == "WanModel"
    sd, metadata = comfy.utils.load_torch_file(vae_path, return_metadata=True)
    vae = comfy.sd.VAE(sd=sd, metadata=metadata)
    vae.throw_exception_if_invalid()
    assert type(vae.first_stage_model).__name__ == "WanVAE" and vae.latent_channels == 16
    with torch.inference_mode():
        latent = vae.encode(torch.full((1, 32, 32, 3), 0.5))
        image = vae.decode(latent)
    assert tuple(latent.shape) == (1, 16, 1, 4, 4), tuple(latent.shape)
    assert bool(torch.isfinite(latent).all()) and bool(torch.isfinite(image).all())
    print(
        f"check ok: model {model_class} ({model.model_size()} bytes), VAE {type(vae.first_stage_model).__name__} "
        f"latent {tuple(latent.shape)} image {tuple(image.shape)}"
    )


def make_tiny_models(base: str, run_check: bool = False) -> dict[str, str]:
    """Write the files under BASE/models (skipping existing ones); returns {kind: path}."""
    paths = {
        "diffusion_model": os.path.join(base, "models", "diffusion_models", WAN_NAME),
        "vae": os.path.join(base, "models", "vae", VAE_NAME),
    }
    missing = [k for k, p in paths.items() if not os.path.isfile(p)]
    if not missing and not run_check:
        print("tiny models present, nothing to do")
        return paths
    comfy = import_comfy()
    builders = {"diffusion_model": build_wan, "vae": build_vae}
    for kind in missing:
        started = time.monotonic()
        save(builders[kind](comfy), paths[kind])
        print(
            f"wrote {paths[kind]} ({os.path.getsize(paths[kind])} bytes, {time.monotonic() - started:.2f} s)"
        )
    if run_check:
        check(comfy, paths["diffusion_model"], paths["vae"])
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="ComfyUI base directory (the files go under BASE/models)")
    parser.add_argument("--check", action="store_true", help="load the files with ComfyUI and verify them")
    args = parser.parse_args(argv)
    make_tiny_models(os.path.abspath(args.base), run_check=args.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())

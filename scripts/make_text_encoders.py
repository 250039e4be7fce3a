"""Generated text encoders and the WAN 2.2 VAE for the stock loaders (used by make_models.py --text-encoders).

ComfyUI 0.8 builds every text encoder from a fixed config (comfy/sd1_clip_config.json,
comfy/text_encoders/*_config_*.json, the Llama/Qwen/Gemma dataclasses): only the CLIP position
table's length is read from the file (long CLIP-L). Width and layer count are fixed, so a tiny
or shallow file either fails on a shape or leaves layers uninitialised ("clip missing"). The WAN
2.2 VAE is built from a fixed ddconfig too (dim 160, decoder 256, z 48). So each file here is the
family's real architecture at real size, made only where that is cheap (<= ~1.5 GB fp16):

    text_encoders/pm_clip_l.safetensors     CLIP-L (SD1.x, SD3, Flux, HunyuanVideo), 123 M params, ~246 MB
    text_encoders/pm_clip_h.safetensors     OpenCLIP-H text (SD2.x), 354 M params, ~708 MB
    text_encoders/pm_clip_g.safetensors     OpenCLIP-bigG text (SDXL, SD3, Cascade), 695 M params, ~1.39 GB
    text_encoders/pm_t5_base.safetensors    T5-base encoder (Stable Audio), 110 M params, ~220 MB
    vae/pm_wan22_vae.safetensors             WAN 2.2 VAE (48-channel latent), 705 M params, ~1.41 GB

Not made (fixed config far over the limit, or no tokenizer in ComfyUI's tree): T5-XXL (Flux,
SD3's third encoder, LTXV, Mochi, PixArt, HiDream: 4.8 G params, ~9.5 GB fp16), umT5-XXL (WAN,
~11 GB; its tokenizer lives in the file, not in ComfyUI's tree), T5 v1.0 XXL (Cosmos), Pile-T5-XL
(AuraFlow, ~2.4 GB), mT5-XL (HunyuanDiT's second encoder, ~3.4 GB), umT5-base (ACE-Step: its
sentencepiece tokenizer comes from the file), and every LLM encoder (Llama-3-8B, Qwen2.5-VL-7B,
Qwen3, Gemma, Mistral: 2-24 G params).

Weights: a seeded pool of 2**20 normal(0, 0.02) values, laid out per tensor from an offset
derived from its name and repeated (norms 1, biases 0). Drawing 3 G fresh normals would take
minutes on a shared CPU; repeating a pool is a memory copy, so the files are written at disk
speed and are byte-for-byte the same on every run. Tokenizers are ComfyUI's own (in its tree).
"""

import os
import time
import zlib
from dataclasses import dataclass

SEED = 4321
POOL_SIZE = 1 << 20
STD = 0.02


@dataclass(frozen=True)
class TextEncoderFile:
    key: str  # short name used in tests
    file: str  # under BASE/models/text_encoders
    encoder: str  # as the conditioning monitor names it
    params_approx: str


CLIP_L = TextEncoderFile("clip_l", "pm_clip_l.safetensors", "CLIP-L", "123 M")
CLIP_H = TextEncoderFile("clip_h", "pm_clip_h.safetensors", "OpenCLIP-H", "354 M")
CLIP_G = TextEncoderFile("clip_g", "pm_clip_g.safetensors", "OpenCLIP-G", "695 M")
T5_BASE = TextEncoderFile("t5_base", "pm_t5_base.safetensors", "T5-base", "110 M")
TEXT_ENCODERS = (CLIP_L, CLIP_H, CLIP_G, T5_BASE)
TEXT_ENCODERS_BY_KEY = {te.key: te for te in TEXT_ENCODERS}
WAN22_VAE = "pm_wan22_vae.safetensors"
# comfy/sd.py's ddconfig for a state dict it detects as the WAN 2.2 VAE (fixed there, not read
# from the file), with WanVAE's default decoder width.
WAN22_VAE_CONFIG = {
    "dim": 160,
    "z_dim": 48,
    "dim_mult": [1, 2, 4, 4],
    "num_res_blocks": 2,
    "attn_scales": [],
    "temperal_downsample": [False, True, True],
    "dropout": 0.0,
}


# -- shapes, from ComfyUI's own classes on the meta device ---------------------------------------


def _meta_state_shapes(build) -> dict:
    import torch

    with torch.device("meta"):
        module = build()
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


def text_encoder_shapes(comfy, key: str) -> dict:
    """File key -> shape of one encoder, as a standalone file of its family is laid out."""
    import comfy.sd1_clip
    import comfy.sdxl_clip
    import comfy.text_encoders.sa_t5
    import comfy.text_encoders.sd2_clip
    import torch

    builders = {
        "clip_l": lambda: comfy.sd1_clip.SDClipModel(device="meta", dtype=torch.float16),
        "clip_h": lambda: comfy.text_encoders.sd2_clip.SD2ClipHModel(device="meta", dtype=torch.float16),
        "clip_g": lambda: comfy.sdxl_clip.SDXLClipG(device="meta", dtype=torch.float16),
        "t5_base": lambda: comfy.text_encoders.sa_t5.T5BaseModel(device="meta", dtype=torch.float16),
    }
    shapes = _meta_state_shapes(lambda: builders[key]().transformer)
    # ComfyUI derives position ids; real files carry none.
    return {k: v for k, v in shapes.items() if not k.endswith("position_ids")}


def wan22_vae_shapes(comfy) -> dict:
    import comfy.ldm.wan.vae2_2

    return _meta_state_shapes(lambda: comfy.ldm.wan.vae2_2.WanVAE(**WAN22_VAE_CONFIG))


# -- weights -------------------------------------------------------------------------------------


def normal_pool(seed: int = SEED):
    import torch

    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(POOL_SIZE, generator=generator, dtype=torch.float32) * STD).to(torch.float16)


def pooled_tensor(name: str, shape: tuple, pool):
    """One weight: norms 1, biases 0, the rest the pool from a name-derived offset, repeated."""
    import math

    import torch

    leaf = name.rsplit(".", 1)[-1]
    if leaf in ("bias", "beta"):
        return torch.zeros(shape, dtype=pool.dtype)
    if leaf in ("gamma", "scale") or "norm" in name.lower():
        return torch.ones(shape, dtype=pool.dtype)
    n = math.prod(shape)
    out = torch.empty(n, dtype=pool.dtype)
    start = zlib.crc32(name.encode()) % POOL_SIZE
    first = min(n, POOL_SIZE - start)
    out[:first] = pool[start : start + first]
    filled = first
    while filled < n:  # doubling copies: log2(n / pool) memcpys
        count = min(filled, n - filled)
        out[filled : filled + count] = out[:count]
        filled += count
    return out.view(shape)


def build(shapes: dict, pool) -> dict:
    return {name: pooled_tensor(name, shape, pool) for name, shape in sorted(shapes.items())}


# -- files ---------------------------------------------------------------------------------------


def text_encoder_path(base: str, te: TextEncoderFile) -> str:
    return os.path.join(base, "models", "text_encoders", te.file)


def wan22_vae_path(base: str) -> str:
    return os.path.join(base, "models", "vae", WAN22_VAE)


def _save(sd: dict, path: str, metadata: dict) -> None:
    from safetensors.torch import save_file

    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    save_file(sd, tmp, metadata={"format": "pt", "pipeline_monitor": "generated test model", **metadata})
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _write(path: str, make, metadata: dict) -> None:
    started = time.monotonic()
    _save(make(), path, metadata)
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {time.monotonic() - started:.2f} s)")


def make_text_encoders(base: str, comfy, keys=None) -> dict[str, str]:
    """The text encoder files under BASE/models/text_encoders (kept when present): {key: path}."""
    chosen = [TEXT_ENCODERS_BY_KEY[k] for k in keys] if keys else list(TEXT_ENCODERS)
    paths = {te.key: text_encoder_path(base, te) for te in chosen}
    pool = None
    for te in chosen:
        if os.path.isfile(paths[te.key]):
            continue
        pool = normal_pool() if pool is None else pool
        _write(
            paths[te.key],
            lambda te=te, pool=pool: build(text_encoder_shapes(comfy, te.key), pool),
            {"pipeline_monitor_encoder": te.encoder},
        )
    return paths


def make_wan22_vae(base: str, comfy) -> str:
    """The real-size WAN 2.2 VAE under BASE/models/vae (kept when present)."""
    path = wan22_vae_path(base)
    if not os.path.isfile(path):
        _write(path, lambda: build(wan22_vae_shapes(comfy), normal_pool(SEED + 1)), {})
    return path


# -- checking ------------------------------------------------------------------------------------

# (loader inputs as file keys, clip_type) -> the class of clip.cond_stage_model ComfyUI builds.
LOADER_CASES = (
    (("clip_l",), "stable_diffusion", "SD1ClipModel"),
    (("clip_l",), "sd3", "SD3ClipModel"),
    (("clip_h",), "stable_diffusion", "SD2ClipModel"),
    (("clip_g",), "stable_diffusion", "SDXLRefinerClipModel"),
    (("clip_g",), "stable_cascade", "StableCascadeClipModel"),
    (("t5_base",), "stable_audio", "SAT5Model"),
    (("clip_l", "clip_g"), "sdxl", "SDXLClipModel"),
    (("clip_l", "clip_g"), "sd3", "SD3ClipModel"),
)


def check_text_encoders(comfy, paths: dict[str, str]) -> None:
    """Load each loader case as CLIPLoader / DualCLIPLoader do, encode a prompt, check the class
    and that the output is finite with no missing weights."""
    import logging

    import comfy.sd
    import torch

    missing = []

    class MissingKeys(logging.Handler):
        def emit(self, record):
            if "clip missing" in record.getMessage():
                missing.append(record.getMessage()[:200])

    handler = MissingKeys()
    logging.getLogger().addHandler(handler)
    try:
        for keys, clip_type, expected in LOADER_CASES:
            if not all(k in paths for k in keys):
                continue
            clip = comfy.sd.load_clip(
                [paths[k] for k in keys],
                clip_type=getattr(comfy.sd.CLIPType, clip_type.upper(), comfy.sd.CLIPType.STABLE_DIFFUSION),
            )
            # ComfyUI subclasses on the fly (SD3ClipModel_): the named base class is the family's.
            name = next(
                c.__name__ for c in type(clip.cond_stage_model).__mro__ if not c.__name__.endswith("_")
            )
            assert name == expected, f"{keys} {clip_type}: {name}, expected {expected}"
            cond, pooled = clip.encode_from_tokens(clip.tokenize("a lighthouse at dawn"), return_pooled=True)
            assert bool(torch.isfinite(cond).all()), (keys, clip_type)
            assert not missing, missing
            print(f"check ok: {'+'.join(keys)} as {clip_type}: {name}, cond {tuple(cond.shape)}")
            del clip
    finally:
        logging.getLogger().removeHandler(handler)


def check_wan22_vae(comfy, path: str) -> None:
    import comfy.sd
    import comfy.utils
    import torch

    sd, metadata = comfy.utils.load_torch_file(path, return_metadata=True)
    vae = comfy.sd.VAE(sd=sd, metadata=metadata)
    vae.throw_exception_if_invalid()
    assert type(vae.first_stage_model).__module__ == "comfy.ldm.wan.vae2_2", type(vae.first_stage_model)
    assert vae.latent_channels == 48
    with torch.inference_mode():
        latent = vae.encode(torch.full((1, 32, 32, 3), 0.5))
    assert tuple(latent.shape) == (1, 48, 1, 2, 2), tuple(latent.shape)
    assert bool(torch.isfinite(latent).all())
    print(f"check ok: {WAN22_VAE} WAN 2.2 VAE, latent {tuple(latent.shape)}")

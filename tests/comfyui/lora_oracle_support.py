"""Tiny LoRA files in the formats ComfyUI 0.8 accepts, for the LoRA oracle suite.

Two architectures: the tiny SD1.5-like UNet + SD1 CLIP of conftest `tiny`, and the tiny WAN 2.1
T2V model of scripts/make_tiny_models.py (dim 128, 2 blocks). Each case is one or more files with
the loader strengths to load them at; test_lora_oracle.py loads them with ComfyUI's own loaders,
runs the pack's LoRA step on the result and compares it with what ComfyUI's patching did.
Everything is seeded: a case builds the same tensors every time.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import torch
from lora_support import CLIP_LINEAR, DOTTED, UNET_CONV, UNET_LINEAR

# WAN 2.1 tiny: module path (dots) -> weight shape
WAN_LINEAR = {
    f"blocks.{b}.{part}": shape
    for b in (0, 1)
    for part, shape in (
        ("self_attn.q", (128, 128)),
        ("self_attn.k", (128, 128)),
        ("self_attn.v", (128, 128)),
        ("self_attn.o", (128, 128)),
        ("cross_attn.q", (128, 128)),
        ("cross_attn.k", (128, 128)),
        ("cross_attn.v", (128, 128)),
        ("cross_attn.o", (128, 128)),
        ("ffn.0", (256, 128)),
        ("ffn.2", (128, 256)),
    )
}
WAN_CONV3D = {"patch_embedding": (128, 16, 1, 2, 2)}
# Shapes of the same names in the 14B WAN 2.1 (dim 5120, ffn 13824): the "14B LoRA on 1.3B" mistake,
# scaled down so that the files stay tiny while every shape is wrong.
WAN_BIG_DIM, WAN_BIG_FFN = 160, 320


def rand(*shape, seed: int, scale: float = 0.05, dtype=torch.float32):
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def kohya_name(path: str) -> str:
    return "lora_unet_" + path.replace(".", "_")


@dataclass
class LoraFile:
    name: str
    sd: dict
    strength_model: float = 1.0
    strength_clip: float = 1.0
    model_only: bool = False
    truncate_bytes: int = 0  # cut this many bytes off the end of the written file


@dataclass
class Case:
    name: str
    arch: str  # "sd1" or "wan"
    files: list[LoraFile]
    notes: str = ""
    expect: dict = field(default_factory=dict)


# -- format builders ------------------------------------------------------------------------------


def lora_pair(out_dim, in_dim, rank, seed, kernel=(), dtype=torch.float32, up_kernel=None):
    down = rand(rank, in_dim, *kernel, seed=seed, dtype=dtype)
    up_k = up_kernel if up_kernel is not None else [1] * len(kernel)
    up = rand(out_dim, rank, *up_k, seed=seed + 1, dtype=dtype)
    return up, down


def sd_kohya(rank=4, alpha=True, dtype=torch.float32, clip=True, seed=0, conv=False) -> dict:
    sd = {}
    targets = {**UNET_LINEAR, **(UNET_CONV if conv else {})}
    for i, (name, (out_dim, in_dim, *kernel)) in enumerate(targets.items()):
        up, down = lora_pair(out_dim, in_dim, rank, seed + 2 * i, kernel, dtype)
        sd[f"lora_unet_{name}.lora_up.weight"], sd[f"lora_unet_{name}.lora_down.weight"] = up, down
        if alpha:
            sd[f"lora_unet_{name}.alpha"] = torch.tensor(float(rank) / 2)
    if clip:
        for i, (name, (out_dim, in_dim)) in enumerate(CLIP_LINEAR.items()):
            up, down = lora_pair(out_dim, in_dim, rank, seed + 100 + 2 * i, (), dtype)
            sd[f"lora_te_{name}.lora_up.weight"], sd[f"lora_te_{name}.lora_down.weight"] = up, down
            if alpha:
                sd[f"lora_te_{name}.alpha"] = torch.tensor(float(rank))
    return sd


def sd_peft(rank=3, seed=40) -> dict:
    sd = {}
    for i, (name, (out_dim, in_dim)) in enumerate(UNET_LINEAR.items()):
        up, down = lora_pair(out_dim, in_dim, rank, seed + 2 * i)
        sd[f"diffusion_model.{DOTTED[name]}.lora_B.weight"] = up
        sd[f"diffusion_model.{DOTTED[name]}.lora_A.weight"] = down
    return sd


def sd_comfy_updown(rank=2, seed=60) -> dict:
    """ComfyUI's own generic names: diffusion_model.<module>.lora_up/lora_down.weight + alpha."""
    sd = {}
    for i, (name, (out_dim, in_dim)) in enumerate(UNET_LINEAR.items()):
        up, down = lora_pair(out_dim, in_dim, rank, seed + 2 * i)
        sd[f"diffusion_model.{DOTTED[name]}.lora_up.weight"] = up
        sd[f"diffusion_model.{DOTTED[name]}.lora_down.weight"] = down
        sd[f"diffusion_model.{DOTTED[name]}.alpha"] = torch.tensor(3.0)
    return sd


def sd_loha(rank=2, seed=80) -> dict:
    sd = {}
    for i, (name, (out_dim, in_dim)) in enumerate(UNET_LINEAR.items()):
        for j, (part, shape) in enumerate(
            (
                ("w1_a", (out_dim, rank)),
                ("w1_b", (rank, in_dim)),
                ("w2_a", (out_dim, rank)),
                ("w2_b", (rank, in_dim)),
            )
        ):
            sd[f"lora_unet_{name}.hada_{part}"] = rand(*shape, seed=seed + 10 * i + j, scale=0.3)
        sd[f"lora_unet_{name}.alpha"] = torch.tensor(1.0)
    return sd


def sd_lokr(seed=200) -> dict:
    sd = {}
    for i, (name, (out_dim, in_dim)) in enumerate(UNET_LINEAR.items()):
        sd[f"lora_unet_{name}.lokr_w1"] = rand(4, 4, seed=seed + i, scale=0.5)
        if i % 2:
            sd[f"lora_unet_{name}.lokr_w2"] = rand(out_dim // 4, in_dim // 4, seed=seed + 50 + i)
        else:
            sd[f"lora_unet_{name}.lokr_w2_a"] = rand(out_dim // 4, 2, seed=seed + 60 + i)
            sd[f"lora_unet_{name}.lokr_w2_b"] = rand(2, in_dim // 4, seed=seed + 70 + i)
        sd[f"lora_unet_{name}.alpha"] = torch.tensor(3.0)
    return sd


def sd_locon_conv(rank=4, seed=300) -> dict:
    """LoCon on convolutions only: 3x3 down, 1x1 up, and a 1x1 conv."""
    sd = {}
    for i, (name, (out_dim, in_dim, *kernel)) in enumerate(UNET_CONV.items()):
        up, down = lora_pair(out_dim, in_dim, rank, seed + 2 * i, kernel)
        sd[f"lora_unet_{name}.lora_up.weight"], sd[f"lora_unet_{name}.lora_down.weight"] = up, down
        sd[f"lora_unet_{name}.alpha"] = torch.tensor(2.0)
    return sd


def sd_diff(seed=400) -> dict:
    sd = {}
    for i, name in enumerate(
        ("input_blocks_1_1_transformer_blocks_0_attn2_to_out_0", "input_blocks_1_1_proj_in")
    ):
        shape = {**UNET_LINEAR, **UNET_CONV}[name]
        sd[f"diffusion_model.{DOTTED[name]}.diff"] = rand(*shape, seed=seed + i)
        sd[f"diffusion_model.{DOTTED[name]}.diff_b"] = rand(shape[0], seed=seed + 10 + i)
    return sd


def sd_set(seed=500) -> dict:
    name = "input_blocks_1_1_transformer_blocks_0_attn1_to_k"
    return {f"diffusion_model.{DOTTED[name]}.set_weight": rand(*UNET_LINEAR[name], seed=seed, scale=0.03)}


def sd_dora(rank=4, seed=600) -> dict:
    sd = {}
    for i, (name, (out_dim, in_dim)) in enumerate(list(UNET_LINEAR.items())[:3]):
        up, down = lora_pair(out_dim, in_dim, rank, seed + 2 * i)
        sd[f"lora_unet_{name}.lora_up.weight"], sd[f"lora_unet_{name}.lora_down.weight"] = up, down
        sd[f"lora_unet_{name}.alpha"] = torch.tensor(float(rank))
        sd[f"lora_unet_{name}.dora_scale"] = 0.5 + rand(out_dim, 1, seed=seed + 50 + i, scale=0.1).abs()
    return sd


def sd_oft(seed=700, block_size=4) -> dict:
    sd = {}
    for i, (name, (out_dim, _in)) in enumerate(list(UNET_LINEAR.items())[:3]):
        sd[f"lora_unet_{name}.oft_blocks"] = rand(
            out_dim // block_size, block_size, block_size, seed=seed + i, scale=0.1
        )
        sd[f"lora_unet_{name}.alpha"] = torch.tensor(0.5 if i else 0.0)  # 0: no constraint
    return sd


def sd_boft(seed=800, boft_m=2, boft_b=4) -> dict:
    sd = {}
    for i, (name, (out_dim, _in)) in enumerate(list(UNET_LINEAR.items())[:2]):
        sd[f"lora_unet_{name}.oft_blocks"] = rand(
            boft_m, out_dim // boft_b, boft_b, boft_b, seed=seed + i, scale=0.1
        )
        sd[f"lora_unet_{name}.alpha"] = torch.tensor(2.0)
    return sd


def sd_glora(rank=2, seed=900) -> dict:
    sd = {}
    for i, (name, (out_dim, in_dim)) in enumerate(list(UNET_LINEAR.items())[:3]):
        sd[f"lora_unet_{name}.a1.weight"] = rand(in_dim, rank, seed=seed + 10 * i)
        sd[f"lora_unet_{name}.a2.weight"] = rand(rank, in_dim, seed=seed + 10 * i + 1)
        sd[f"lora_unet_{name}.b1.weight"] = rand(out_dim, rank, seed=seed + 10 * i + 2)
        sd[f"lora_unet_{name}.b2.weight"] = rand(rank, in_dim, seed=seed + 10 * i + 3)
        sd[f"lora_unet_{name}.alpha"] = torch.tensor(1.0)
    return sd


def wan_kohya(rank=4, seed=1000, alpha=True, dtype=torch.float32, paths=None, prefix="lora_unet_") -> dict:
    """musubi-tuner / kohya names for WAN: lora_unet_blocks_0_self_attn_q.lora_down/up + alpha."""
    sd = {}
    for i, (path, (out_dim, in_dim)) in enumerate((paths or WAN_LINEAR).items()):
        up, down = lora_pair(out_dim, in_dim, rank, seed + 2 * i, (), dtype)
        name = prefix + path.replace(".", "_")
        sd[f"{name}.lora_up.weight"], sd[f"{name}.lora_down.weight"] = up, down
        if alpha:
            sd[f"{name}.alpha"] = torch.tensor(float(rank))
    return sd


def wan_fun(rank=4, seed=1100) -> dict:
    """Wan-Fun names (lora_unet__blocks_...): ComfyUI's convert_lora renames them before mapping."""
    return wan_kohya(rank, seed, prefix="lora_unet__")


def wan_diffusers(rank=8, seed=1200) -> dict:
    sd = {}
    for i, (path, (out_dim, in_dim)) in enumerate(list(WAN_LINEAR.items())[::2]):
        up, down = lora_pair(out_dim, in_dim, rank, seed + 2 * i)
        sd[f"diffusion_model.{path}.lora_B.weight"], sd[f"diffusion_model.{path}.lora_A.weight"] = up, down
    return sd


def wan_conv3d(rank=4, seed=1300) -> dict:
    out_dim, in_dim, *kernel = WAN_CONV3D["patch_embedding"]
    up, down = lora_pair(out_dim, in_dim, rank, seed, kernel)
    return {
        "lora_unet_patch_embedding.lora_up.weight": up,
        "lora_unet_patch_embedding.lora_down.weight": down,
        "lora_unet_patch_embedding.alpha": torch.tensor(2.0),
    }


def wan_diff_with_modulation(seed=1400) -> dict:
    """A .diff on blocks.0.modulation (a parameter of a module with child modules: ComfyUI queues
    the patch but its loader never applies it) next to a .diff and .diff_b it does apply."""
    return {
        "diffusion_model.blocks.0.modulation.diff": rand(1, 6, 128, seed=seed),
        "diffusion_model.blocks.0.self_attn.q.diff": rand(128, 128, seed=seed + 1),
        "diffusion_model.blocks.0.self_attn.q.diff_b": rand(128, seed=seed + 2),
        "diffusion_model.head.modulation.diff": rand(1, 2, 128, seed=seed + 3),
    }


def wan_wrong_shapes(rank=4, seed=1500) -> dict:
    """Right names, wrong shapes: a LoRA trained on a larger WAN (dim 160 here, 5120 for real)."""
    big = {
        path: (
            WAN_BIG_FFN if shape[0] == 256 else WAN_BIG_DIM,
            WAN_BIG_FFN if shape[1] == 256 else WAN_BIG_DIM,
        )
        for path, shape in WAN_LINEAR.items()
    }
    return wan_kohya(rank, seed, paths=big)


def stray(sd: dict, n_modules: int, seed=1600, prefix="lora_unet_double_blocks_") -> dict:
    """Add n_modules foreign LoRA modules (3 keys each) that no tiny model has."""
    out = dict(sd)
    for i in range(n_modules):
        name = f"{prefix}{i}_img_attn_qkv"
        out[f"{name}.lora_down.weight"] = rand(4, 16, seed=seed + 2 * i)
        out[f"{name}.lora_up.weight"] = rand(48, 4, seed=seed + 2 * i + 1)
        out[f"{name}.alpha"] = torch.tensor(4.0)
    return out


def truncate_file(path: str, n_bytes: int) -> None:
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) - n_bytes])


def header_length(path: str) -> int:
    with open(path, "rb") as f:
        return struct.unpack("<Q", f.read(8))[0]


# -- the cases ------------------------------------------------------------------------------------

WAN_SHARED = {p: s for p, s in WAN_LINEAR.items() if p.startswith("blocks.0.self_attn")}


def cases() -> list[Case]:
    wan_kohya_sd = wan_kohya()
    n_wan_modules = len(WAN_LINEAR)
    return [
        Case("sd1_kohya_alpha", "sd1", [LoraFile("o_sd1_kohya.safetensors", sd_kohya(), 0.8, 1.3)]),
        Case(
            "sd1_kohya_fp16_no_alpha",
            "sd1",
            [
                LoraFile(
                    "o_sd1_kohya_fp16.safetensors",
                    sd_kohya(rank=8, alpha=False, dtype=torch.float16),
                    1.0,
                    0.7,
                )
            ],
        ),
        Case("sd1_peft_lora_A_B", "sd1", [LoraFile("o_sd1_peft.safetensors", sd_peft(), 1.1, 1.0)]),
        Case("sd1_comfy_up_down", "sd1", [LoraFile("o_sd1_updown.safetensors", sd_comfy_updown(), 0.9, 1.0)]),
        Case("sd1_loha", "sd1", [LoraFile("o_sd1_loha.safetensors", sd_loha(), 0.6, 1.0)]),
        Case("sd1_lokr", "sd1", [LoraFile("o_sd1_lokr.safetensors", sd_lokr(), 1.2, 1.0)]),
        Case("sd1_locon_conv", "sd1", [LoraFile("o_sd1_locon.safetensors", sd_locon_conv(), 1.0, 1.0)]),
        Case("sd1_diff_and_diff_b", "sd1", [LoraFile("o_sd1_diff.safetensors", sd_diff(), 0.5, 1.0)]),
        Case("sd1_set", "sd1", [LoraFile("o_sd1_set.safetensors", sd_set(), 1.0, 1.0)]),
        Case("sd1_dora", "sd1", [LoraFile("o_sd1_dora.safetensors", sd_dora(), 0.7, 1.0)]),
        Case("sd1_oft", "sd1", [LoraFile("o_sd1_oft.safetensors", sd_oft(), 1.0, 1.0)]),
        Case("sd1_boft", "sd1", [LoraFile("o_sd1_boft.safetensors", sd_boft(), 0.8, 1.0)]),
        Case("sd1_glora", "sd1", [LoraFile("o_sd1_glora.safetensors", sd_glora(), 1.0, 1.0)]),
        Case(
            "sd1_stack_kohya_loha_negative",
            "sd1",
            [
                LoraFile("o_sd1_stack_a.safetensors", sd_kohya(seed=1), 1.0, 1.0),
                LoraFile("o_sd1_stack_b.safetensors", sd_loha(seed=81), -0.5, 0.0),
                LoraFile("o_sd1_stack_c.safetensors", sd_comfy_updown(seed=61), 0.75, 0.0),
            ],
        ),
        Case(
            "sd1_model_strength_zero", "sd1", [LoraFile("o_sd1_zero.safetensors", sd_kohya(seed=2), 0.0, 1.0)]
        ),
        Case(
            "wan_musubi_kohya",
            "wan",
            [LoraFile("o_wan_kohya.safetensors", wan_kohya_sd, 1.0, model_only=True)],
        ),
        Case(
            "wan_kohya_fp16_no_alpha",
            "wan",
            [
                LoraFile(
                    "o_wan_fp16.safetensors",
                    wan_kohya(alpha=False, dtype=torch.float16, seed=1050),
                    0.9,
                    model_only=True,
                )
            ],
        ),
        Case(
            "wan_fun_converted", "wan", [LoraFile("o_wan_fun.safetensors", wan_fun(), 1.0, model_only=True)]
        ),
        Case(
            "wan_diffusers_lora_A_B",
            "wan",
            [LoraFile("o_wan_peft.safetensors", wan_diffusers(), 1.0, model_only=True)],
        ),
        Case(
            "wan_locon_conv3d",
            "wan",
            [LoraFile("o_wan_conv3d.safetensors", wan_conv3d(), 1.0, model_only=True)],
        ),
        Case(
            "wan_negative_strength",
            "wan",
            [LoraFile("o_wan_neg.safetensors", wan_kohya(seed=1020), -0.7, model_only=True)],
        ),
        Case(
            "wan_diff_on_non_leaf_module",
            "wan",
            [LoraFile("o_wan_modulation.safetensors", wan_diff_with_modulation(), 1.0, model_only=True)],
        ),
        Case(
            "wan_wrong_shapes_bigger_model",
            "wan",
            [LoraFile("o_wan_14b.safetensors", wan_wrong_shapes(), 1.0, model_only=True)],
            expect={"wrong_shapes": True},
        ),
        Case(
            "wan_third_of_keys_stray",
            "wan",
            [
                LoraFile(
                    "o_wan_stray_third.safetensors",
                    stray(wan_kohya(seed=1030), n_wan_modules // 2),
                    1.0,
                    model_only=True,
                )
            ],
            expect={"stray": "warning"},
        ),
        Case(
            "wan_most_keys_stray",
            "wan",
            [
                LoraFile(
                    "o_wan_stray_most.safetensors",
                    stray(wan_kohya(seed=1040, paths=dict(list(WAN_LINEAR.items())[:3])), 10),
                    1.0,
                    model_only=True,
                )
            ],
            expect={"stray": "error"},
        ),
        Case(
            "wan_stack_three_on_shared_weights",
            "wan",
            [
                LoraFile(
                    "o_wan_stack_a.safetensors", wan_kohya(seed=1060, paths=WAN_SHARED), 1.0, model_only=True
                ),
                LoraFile(
                    "o_wan_stack_b.safetensors",
                    wan_kohya(seed=1070, paths=WAN_SHARED, rank=2),
                    0.8,
                    model_only=True,
                ),
                LoraFile(
                    "o_wan_stack_c.safetensors", wan_diff_with_modulation(seed=1410), -0.3, model_only=True
                ),
            ],
        ),
        Case(
            "wan_truncated_file",
            "wan",
            [
                LoraFile(
                    "o_wan_truncated.safetensors",
                    wan_kohya(seed=1080),
                    1.0,
                    model_only=True,
                    truncate_bytes=512,
                )
            ],
            expect={"truncated": True},
        ),
    ]

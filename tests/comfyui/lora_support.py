"""LoRA files for the tiny test models (kohya, PEFT, LoHa, LoKr, diff styles) with planted unmatched
keys, and a helper that runs PipelineMonitorLora in-process the way the executor does."""

from __future__ import annotations

import torch
from safetensors.torch import save_file

# Tiny SD1.5-like UNet (conftest `tiny`) and SD1 CLIP: target weight -> shape.
UNET_LINEAR = {
    "input_blocks_1_1_transformer_blocks_0_attn1_to_q": (32, 32),
    "input_blocks_1_1_transformer_blocks_0_attn1_to_k": (32, 32),
    "input_blocks_1_1_transformer_blocks_0_attn2_to_v": (32, 32),
    "input_blocks_1_1_transformer_blocks_0_attn2_to_out_0": (32, 32),
    "middle_block_1_transformer_blocks_0_ff_net_2": (64, 256),
}
UNET_CONV = {"input_blocks_1_0_in_layers_2": (32, 32, 3, 3), "input_blocks_1_1_proj_in": (32, 32, 1, 1)}
CLIP_LINEAR = {
    "text_model_encoder_layers_0_self_attn_q_proj": (32, 32),
    "text_model_encoder_layers_1_mlp_fc1": (64, 32),
}
# Keys no tiny model has: what a LoRA for another base model carries.
PLANTED_UNMATCHED = (
    "lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight",
    "lora_unet_double_blocks_0_img_attn_qkv.lora_up.weight",
    "lora_unet_double_blocks_0_img_attn_qkv.alpha",
    "lora_unet_output_blocks_99_1_proj_out.lora_down.weight",
)
# Kohya names of unet weights -> generic ComfyUI names (diffusion_model.<dotted path>).
DOTTED = {
    "input_blocks_1_1_transformer_blocks_0_attn1_to_q": "input_blocks.1.1.transformer_blocks.0.attn1.to_q",
    "input_blocks_1_1_transformer_blocks_0_attn1_to_k": "input_blocks.1.1.transformer_blocks.0.attn1.to_k",
    "input_blocks_1_1_transformer_blocks_0_attn2_to_v": "input_blocks.1.1.transformer_blocks.0.attn2.to_v",
    "input_blocks_1_1_transformer_blocks_0_attn2_to_out_0": "input_blocks.1.1.transformer_blocks.0.attn2.to_out.0",
    "middle_block_1_transformer_blocks_0_ff_net_2": "middle_block.1.transformer_blocks.0.ff.net.2",
    "input_blocks_1_1_proj_in": "input_blocks.1.1.proj_in",
}


def rand(*shape, seed: int, scale: float = 0.05, dtype=torch.float32):
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def planted(seed: int = 900) -> dict:
    shapes = {"lora_down.weight": (4, 16), "lora_up.weight": (16, 4)}
    return {
        key: torch.tensor(4.0)
        if key.endswith("alpha")
        else rand(*shapes[key.split(".", 1)[1]], seed=seed + i)
        for i, key in enumerate(PLANTED_UNMATCHED)
    }


def kohya_lora(rank: int = 4, with_clip: bool = True, plant: bool = True, dtype=torch.float16) -> dict:
    """lora_unet_* / lora_te_* with lora_down/lora_up/alpha; conv layers as LoCon (conv down, 1x1 up)."""
    sd, seed = {}, 0
    for name, (out_dim, in_dim, *kernel) in {**UNET_LINEAR, **UNET_CONV}.items():
        sd[f"lora_unet_{name}.lora_down.weight"] = rand(rank, in_dim, *kernel, seed=seed, dtype=dtype)
        sd[f"lora_unet_{name}.lora_up.weight"] = rand(
            out_dim, rank, *([1, 1] if kernel else []), seed=seed + 1, dtype=dtype
        )
        sd[f"lora_unet_{name}.alpha"] = torch.tensor(float(rank) / 2)
        seed += 2
    if with_clip:
        for name, (out_dim, in_dim) in CLIP_LINEAR.items():
            sd[f"lora_te_{name}.lora_down.weight"] = rand(rank, in_dim, seed=seed, dtype=dtype)
            sd[f"lora_te_{name}.lora_up.weight"] = rand(out_dim, rank, seed=seed + 1, dtype=dtype)
            sd[f"lora_te_{name}.alpha"] = torch.tensor(float(rank))
            seed += 2
    if plant:
        sd.update(planted())
    return sd


def peft_lora(rank: int = 3) -> dict:
    """diffusers/PEFT style: <module>.lora_A.weight / lora_B.weight, no alpha (scale 1)."""
    sd = {}
    for i, (name, (out_dim, in_dim)) in enumerate(UNET_LINEAR.items()):
        sd[f"diffusion_model.{DOTTED[name]}.lora_A.weight"] = rand(rank, in_dim, seed=100 + i)
        sd[f"diffusion_model.{DOTTED[name]}.lora_B.weight"] = rand(out_dim, rank, seed=200 + i)
    sd.update(planted())
    return sd


def loha_lora(rank: int = 2) -> dict:
    sd = {}
    for i, (name, (out_dim, in_dim)) in enumerate(UNET_LINEAR.items()):
        parts = {
            "w1_a": (out_dim, rank),
            "w1_b": (rank, in_dim),
            "w2_a": (out_dim, rank),
            "w2_b": (rank, in_dim),
        }
        for j, (part, shape) in enumerate(parts.items()):
            sd[f"lora_unet_{name}.hada_{part}"] = rand(*shape, seed=300 + 10 * i + j, scale=0.3)
        sd[f"lora_unet_{name}.alpha"] = torch.tensor(1.0)
    sd.update(planted())
    return sd


def lokr_lora() -> dict:
    """kron(w1, w2): w1 full [4, 4]; w2 factorised (w2_a @ w2_b) or full, alternating."""
    sd = {}
    for i, (name, (out_dim, in_dim)) in enumerate(UNET_LINEAR.items()):
        sd[f"lora_unet_{name}.lokr_w1"] = rand(4, 4, seed=400 + i, scale=0.5)
        if i % 2:
            sd[f"lora_unet_{name}.lokr_w2"] = rand(out_dim // 4, in_dim // 4, seed=450 + i)
        else:
            sd[f"lora_unet_{name}.lokr_w2_a"] = rand(out_dim // 4, 2, seed=460 + i)
            sd[f"lora_unet_{name}.lokr_w2_b"] = rand(2, in_dim // 4, seed=470 + i)
        sd[f"lora_unet_{name}.alpha"] = torch.tensor(3.0)
    sd.update(planted())
    return sd


def diff_lora() -> dict:
    """Full differences: <module>.diff (weight) and .diff_b (bias)."""
    sd = {}
    for i, name in enumerate(
        ("input_blocks_1_1_transformer_blocks_0_attn1_to_q", "input_blocks_1_1_proj_in")
    ):
        shape = {**UNET_LINEAR, **UNET_CONV}[name]
        sd[f"diffusion_model.{DOTTED[name]}.diff"] = rand(*shape, seed=500 + i)
        sd[f"diffusion_model.{DOTTED[name]}.diff_b"] = rand(shape[0], seed=550 + i)
    sd.update(planted())
    return sd


FORMATS = {"kohya": kohya_lora, "peft": peft_lora, "loha": loha_lora, "lokr": lokr_lora, "diff": diff_lora}


def write_lora(folder, name: str, sd: dict, metadata: dict | None = None) -> str:
    path = folder / name
    save_file({k: v.contiguous() for k, v in sd.items()}, str(path), metadata=metadata)
    return str(path)


def lora_graph(
    lora_name: str, strength_model=1.0, strength_clip=1.0, with_clip=True, model_only=False
) -> dict:
    """API-format prompt: 1 (models) -> 2 (LoRA loader) -> 9 (the monitor)."""
    loader = (
        {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": lora_name, "strength_model": strength_model},
        }
        if model_only
        else {
            "class_type": "LoraLoader",
            "inputs": {
                "model": ["1", 0],
                "clip": ["1", 1],
                "lora_name": lora_name,
                "strength_model": strength_model,
                "strength_clip": strength_clip,
            },
        }
    )
    monitor_inputs = {"model": ["2", 0]}
    if with_clip:
        monitor_inputs["clip"] = ["2", 1] if not model_only else ["1", 1]
    return {
        "1": {"class_type": "PMTinyModels", "inputs": {}},
        "2": loader,
        "9": {"class_type": "PipelineMonitorLora", "inputs": monitor_inputs},
    }


def run_monitor(comfy, runtime, prompt: dict, node_id: str = "9", **inputs):
    """Run the node like the executor (hidden UNIQUE_ID and PROMPT) inside a recorded run."""
    node = comfy.nodes.NODE_CLASS_MAPPINGS["PipelineMonitorLora"]
    runtime.recorder.begin_run("pm-lora-inprocess", prompt)
    try:
        clone = node.PREPARE_CLASS_CLONE({"hidden_inputs": {"UNIQUE_ID": node_id, "PROMPT": prompt}})
        with torch.inference_mode():
            output = clone.execute(**inputs)
    finally:
        report = runtime.recorder.end_run("success")
    steps = [s for s in report.to_dict()["steps"] if s["kind"] == "lora"]
    assert len(steps) == 1, report.to_dict()["steps"]
    return output, steps[0], report

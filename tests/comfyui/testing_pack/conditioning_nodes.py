"""Test-only node: a fixed CONDITIONING of a given shape, for graphs without a loadable text encoder.

PMTestConditioning  CONDITIONING [[cond [1, tokens, hidden], {"pooled_output": [1, pooled_size] or
                    None}]] with seeded normal values; optional n_nan puts NaN in the first values.
                    E.g. tokens 512, hidden 4096, pooled_size 0 is what WAN 2.1's umT5 gives.
"""

import torch


class PMTestConditioning:
    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        size = {"min": 1, "max": 65536}
        return {
            "required": {
                "tokens": ("INT", {"default": 77, **size}),
                "hidden": ("INT", {"default": 768, **size}),
                "pooled_size": (
                    "INT",
                    {"default": 0, "min": 0, "max": 65536, "tooltip": "0: no pooled output"},
                ),
                "seed": ("INT", {"default": 0, "min": 0, "max": 2**31 - 1}),
            },
            "optional": {"n_nan": ("INT", {"default": 0, "min": 0, "max": 2**31 - 1})},
        }

    def make(self, tokens, hidden, pooled_size, seed, n_nan=0):
        generator = torch.Generator().manual_seed(seed)
        cond = torch.randn((1, tokens, hidden), generator=generator)
        if n_nan:
            cond.view(-1)[:n_nan] = float("nan")
        pooled = torch.randn((1, pooled_size), generator=generator) if pooled_size else None
        return ([[cond, {"pooled_output": pooled}]],)


# Tiny text encoders (a few MB, random seeded weights): CLIPLoader cannot load encoders this small.
TINY_CLIP_L = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_hidden_layers": 3,
    "projection_dim": 32,
}
TINY_CLIP_G = {  # at least 3 layers: SDXL's CLIP-G reads layer -2
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_hidden_layers": 3,
    "projection_dim": 64,
}


def make_tiny_clip(kind: str = "sd1", seed: int = 0):
    """A real ComfyUI CLIP: "sd1" (SD1ClipModel, [1,77k,32], pooled 32) or "sdxl" (SDXLClipModel,
    [1,77k,96], pooled 64). Needs ComfyUI imported in CPU mode."""
    import types

    import comfy.sd
    import comfy.sd1_clip
    import comfy.sdxl_clip

    if kind == "sdxl":
        target = types.SimpleNamespace(
            clip=comfy.sdxl_clip.SDXLClipModel, tokenizer=comfy.sdxl_clip.SDXLTokenizer, params={}
        )
        options = {"clip_l_model_config": TINY_CLIP_L, "clip_g_model_config": TINY_CLIP_G}
    else:
        target = types.SimpleNamespace(
            clip=comfy.sd1_clip.SD1ClipModel, tokenizer=comfy.sd1_clip.SD1Tokenizer, params={}
        )
        options = {"clip_l_model_config": TINY_CLIP_L}
    clip = comfy.sd.CLIP(target=target, model_options=options)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # comfy.ops skip initialisation: small seeded weights, norms 1, biases 0
        for name, param in sorted(clip.cond_stage_model.named_parameters()):
            if name.endswith("bias"):
                param.zero_()
            elif "norm" in name:
                param.fill_(1.0)
            elif not name.endswith("logit_scale"):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    return clip


class PMTestTinyClip:
    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ("CLIP",)
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "kind": (["sd1", "sdxl"],),
                "seed": ("INT", {"default": 0, "min": 0, "max": 2**31 - 1}),
            }
        }

    def load(self, kind, seed):
        return (make_tiny_clip(kind, seed),)


class PMTestConditioningId:
    """Output node: id() and value sum of the CONDITIONING it receives (same object? same values?)."""

    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"conditioning": ("CONDITIONING",)}}

    def run(self, conditioning):
        total = sum(float(torch.nan_to_num(entry[0]).double().sum()) for entry in conditioning)
        return {"ui": {"id": [str(id(conditioning))], "sum": [total]}}

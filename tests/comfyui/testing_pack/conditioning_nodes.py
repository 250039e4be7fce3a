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

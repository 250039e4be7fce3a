"""Test-only node for the VAE encode tests: a deterministic noise IMAGE (frames for video VAEs).

PMTestNoiseImage  IMAGE [frames, height, width, channels] of seeded uniform noise in 0..1, so two
                  encoders fed the same node see the same non-trivial pixels.
"""

import torch


class PMTestNoiseImage:
    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {
            "required": {
                "width": ("INT", {"default": 64, "min": 1, "max": 4096}),
                "height": ("INT", {"default": 64, "min": 1, "max": 4096}),
                "frames": ("INT", {"default": 1, "min": 0, "max": 1024}),
                "channels": ("INT", {"default": 3, "min": 1, "max": 4}),
                "seed": ("INT", {"default": 0, "min": 0, "max": 2**31 - 1}),
            }
        }

    def run(self, width, height, frames, channels, seed):
        generator = torch.Generator().manual_seed(seed)
        return (torch.rand(frames, height, width, channels, generator=generator),)

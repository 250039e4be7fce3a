"""Test-only node for the LoRA monitor's server test.

PMTestLatentDigest  output node: sha256 of a LATENT's samples (bytes, shape and dtype) and their sum
                    in its ui, so a test can check that two samplers produced identical latents.
"""

import hashlib

import torch


class PMTestLatentDigest:
    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",)}}

    def run(self, samples):
        tensor = samples["samples"].detach().to("cpu").contiguous()
        digest = hashlib.sha256()
        digest.update(f"{tuple(tensor.shape)} {tensor.dtype}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
        return {
            "ui": {
                "sha256": [digest.hexdigest()],
                "shape": [list(tensor.shape)],
                "sum": [float(tensor.double().sum())],
            }
        }

"""What a VAE encode raises when no latent came out, by the chain's error kind.

The out-of-memory one is a CUDA OutOfMemoryError, so an executor that handles out of memory
(ComfyUI's unloads models and shows its advice) handles this one the same way.
"""

from __future__ import annotations

import torch

from .chain import ChainResult


class VAEEncodeInputError(ValueError):
    """The input cannot be encoded (no VAE, empty batch, image too small, wrong channels)."""


class VAEEncodeError(RuntimeError):
    """A strategy failed with an error other than running out of memory."""


class VAEEncodeOutOfMemoryError(torch.cuda.OutOfMemoryError):
    """Every strategy ran out of memory."""


def error_for(result: ChainResult, who: str) -> Exception:
    """The exception that stops the pipeline when no latent came out (`who`: the node's name)."""
    message = f"{who}: {result.error}"
    if result.error_kind == "bad_input":
        return VAEEncodeInputError(message)
    if result.error_kind == "out_of_memory":
        return VAEEncodeOutOfMemoryError(message)
    return VAEEncodeError(message)

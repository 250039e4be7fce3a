"""Latents: shape, family guessed from channels and rank, the decoded size it implies, statistics
and the latent step.
"""

from ..stage import Stage
from .summary import LATENT

STAGE = Stage(kind="latent", summary=LATENT, node="PipelineMonitorLatent")

"""Latents: shape, family guessed from channels and rank, the decoded size it implies, statistics
and the latent step.
"""

from ..stage import Stage
from .details import LATENT_DETAILS
from .summary import LATENT

STAGE = Stage(kind="latent", summary=LATENT, details=LATENT_DETAILS, node="PipelineMonitorLatent")

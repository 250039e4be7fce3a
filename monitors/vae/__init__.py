"""VAE encoding: the strategy chain that survives running out of memory, geometry and tiling,
and the vae_encode step built from the chain's attempts.
"""

from ..stage import Stage
from .details import VAE_ENCODE_DETAILS
from .summary import VAE_ENCODE

STAGE = Stage(
    kind="vae_encode", summary=VAE_ENCODE, details=VAE_ENCODE_DETAILS, node="PipelineMonitorVAEEncode", spec="VAE"
)

"""Models: what MODEL / CLIP / VAE objects are (class, device, dtype, sizes, patches) and the
models step.
"""

from ..stage import Stage
from .details import MODELS_DETAILS
from .summary import MODELS
from .upstream import upstream_node_ids

STAGE = Stage(
    kind="models",
    summary=MODELS,
    details=MODELS_DETAILS,
    node="PipelineMonitorModels", upstream_walk=upstream_node_ids, spec="TXT"
)

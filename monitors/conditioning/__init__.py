"""Text encoding: conditioning tensors, the encoder family, the prompt text found through the
graph and the conditioning step.
"""

from ..stage import Stage
from .details import CONDITIONING_DETAILS
from .summary import CONDITIONING
from .upstream import upstream_node_ids

STAGE = Stage(
    kind="conditioning",
    summary=CONDITIONING,
    details=CONDITIONING_DETAILS,
    node="PipelineMonitorConditioning",
    upstream_walk=upstream_node_ids,
    spec="TXT",
)

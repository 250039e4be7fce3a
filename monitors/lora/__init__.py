"""LoRA application: the file's header and keys, key coverage with ComfyUI's own key map,
exact weight-change norms without materialising, and the before/after of MODEL and CLIP.
"""

from ..stage import Stage
from .details import LORA_DETAILS
from .summary import LORA
from .upstream import upstream_node_ids

STAGE = Stage(
    kind="lora",
    summary=LORA,
    details=LORA_DETAILS,
    node="PipelineMonitorLora",
    upstream_walk=upstream_node_ids,
    spec="LORA",
)

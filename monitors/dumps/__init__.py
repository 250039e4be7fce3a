"""Tensor dumps: collecting tensors from CONDITIONING / LATENT / IMAGE values, safetensors files
with strict names, and comparisons between dumps.
"""

from ..stage import Stage
from .details import TENSOR_COMPARE_DETAILS, TENSOR_DUMP_DETAILS
from .summary import TENSOR_COMPARE, TENSOR_DUMP

# two stages in one room: the dump and the comparison of dumps
TENSOR_DUMP_STAGE = Stage(
    kind="tensor_dump", summary=TENSOR_DUMP, details=TENSOR_DUMP_DETAILS, node="PipelineMonitorTensorDump"
)
TENSOR_COMPARE_STAGE = Stage(
    kind="tensor_compare",
    summary=TENSOR_COMPARE,
    details=TENSOR_COMPARE_DETAILS,
    node="PipelineMonitorTensorCompare",
)

"""The pack's V3 extension: the list of monitor nodes."""

from __future__ import annotations

from comfy_api.latest import ComfyExtension, io

from .conditioning_node import PipelineMonitorConditioning
from .dump_nodes import PipelineMonitorTensorCompare, PipelineMonitorTensorDump
from .latent_node import PipelineMonitorLatent
from .lora_node import PipelineMonitorLora
from .models_node import PipelineMonitorModels
from .vae_encode_node import PipelineMonitorVAEEncode


class PipelineMonitorExtension(ComfyExtension):
    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        return [
            PipelineMonitorModels,
            PipelineMonitorLora,
            PipelineMonitorConditioning,
            PipelineMonitorVAEEncode,
            PipelineMonitorLatent,
            PipelineMonitorTensorDump,
            PipelineMonitorTensorCompare,
        ]

"""The pack's V3 extension: the node of every registered stage, in the order of the stages
(monitors/vocabulary/stages.py: STAGES).

A stage's node is the class named after its node id (`STAGE.node`, ComfyUI's class_type) in one of
this folder's node files (`*_node.py`, `*_nodes.py`); a registered stage whose node is missing
fails here, at ComfyUI's start, naming it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil

from comfy_api.latest import ComfyExtension, io

from ..monitors.vocabulary.stages import monitor_nodes

NODE_FILE_SUFFIXES = ("_node", "_nodes")


def node_classes() -> dict[str, type[io.ComfyNode]]:
    """Class name -> class, for every V3 node class of this folder's node files."""
    found: dict[str, type[io.ComfyNode]] = {}
    for module_info in pkgutil.iter_modules([os.path.dirname(os.path.abspath(__file__))]):
        if not module_info.name.endswith(NODE_FILE_SUFFIXES):
            continue
        module = importlib.import_module(f"{__package__}.{module_info.name}")
        for name, value in vars(module).items():
            if isinstance(value, type) and issubclass(value, io.ComfyNode) and value.__module__ == module.__name__:
                found[name] = value
    return found


def stage_nodes() -> list[type[io.ComfyNode]]:
    classes = node_classes()
    missing = [node for node in monitor_nodes() if node not in classes]
    if missing:
        raise LookupError(f"registered stages without a node class in nodes/: {missing}")
    return [classes[node] for node in monitor_nodes()]


class PipelineMonitorExtension(ComfyExtension):
    async def get_node_list(self) -> list[type[io.ComfyNode]]:
        return stage_nodes()

"""ComfyUI lists the templates of every one of these folders a pack has, but serves their files
from the first (app/custom_node_manager.py), so only example_workflows/ (the registry's name for a
pack's examples) may exist, or templates 404."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMFYUI_TEMPLATE_FOLDERS = ("example_workflows", "example", "examples", "workflow", "workflows")


def test_workflows_is_the_only_template_folder():
    present = [name for name in COMFYUI_TEMPLATE_FOLDERS if os.path.isdir(os.path.join(REPO, name))]
    assert present == ["example_workflows"]

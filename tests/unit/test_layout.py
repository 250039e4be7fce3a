"""ComfyUI serves the first of these folders that a pack has as its workflow templates
(app/custom_node_manager.py), so only workflows/ may exist, or the templates 404."""

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMFYUI_TEMPLATE_FOLDERS = ("example_workflows", "example", "examples", "workflow", "workflows")


def test_workflows_is_the_only_template_folder():
    present = [name for name in COMFYUI_TEMPLATE_FOLDERS if os.path.isdir(os.path.join(REPO, name))]
    assert present == ["example_workflows"]

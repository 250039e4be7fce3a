"""scripts/queue_workflow.py names a scripted run after its workflow file, the way the recorder reads it."""

import importlib.util
from pathlib import Path

from monitors.engine.prompt_info import workflow_from_extra_data

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "queue_workflow.py"


def test_a_scripted_run_is_named_after_its_workflow_file():
    spec = importlib.util.spec_from_file_location("queue_workflow", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    workflow = workflow_from_extra_data(module.named_extra_data("example_workflows/api/models_profile_demo.json"))
    assert workflow["name"] == "models_profile_demo.json"
    assert workflow["id"] == "file:models_profile_demo.json" and workflow["name_unknown_reason"] is None

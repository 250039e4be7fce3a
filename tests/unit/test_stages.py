"""The stages, registered once (monitors/vocabulary/stages.py: STAGES): what is derived from them,
and that a new stage needs its room, its node and one registration, nothing else."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from monitors.latent.summary import LATENT
from monitors.stage import Stage
from monitors.vocabulary import generated_files, metrics_reference, registry, stages

REPO = Path(__file__).resolve().parents[2]

KINDS = (
    "models",
    "lora",
    "conditioning",
    "vae_encode",
    "latent",
    "tensor_dump",
    "tensor_compare",
    "profiling",
    "deep_profile",
)


def _import_graph_module():
    spec = importlib.util.spec_from_file_location("import_graph", REPO / "scripts" / "import_graph.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("import_graph", module)  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return sys.modules["import_graph"]


def _walk(prompt, node_id):
    return ["1"]


def _fake_stage() -> Stage:
    summary = dataclasses.replace(LATENT, kind="fake_stage", title="Fake stage")
    return Stage(kind="fake_stage", summary=summary, node="PipelineMonitorFake", upstream_walk=_walk, spec="FAKE")


def test_the_registered_kinds_in_report_order():
    assert stages.step_kinds() == KINDS
    assert tuple(registry.registry()) == KINDS
    assert tuple(registry.details_registry()) == KINDS  # every kind declares its details


def test_the_passthrough_monitors_walk_upstream_and_the_profilers_steps_have_no_node():
    assert set(stages.upstream_walks()) == {
        "PipelineMonitorModels",
        "PipelineMonitorLora",
        "PipelineMonitorConditioning",
    }
    assert stages.monitor_nodes() == (
        "PipelineMonitorModels",
        "PipelineMonitorLora",
        "PipelineMonitorConditioning",
        "PipelineMonitorVAEEncode",
        "PipelineMonitorLatent",
        "PipelineMonitorTensorDump",
        "PipelineMonitorTensorCompare",
    )


def test_every_registered_node_is_a_class_of_a_node_file():
    """nodes/extension.py finds each stage's node as the class of that name in nodes/*_node(s).py."""
    classes = {
        node.name
        for path in (REPO / "nodes").glob("*.py")
        if path.stem.endswith(("_node", "_nodes"))
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.ClassDef)
    }
    assert set(stages.monitor_nodes()) <= classes


def test_a_stage_says_its_summarys_kind_and_a_walk_needs_a_node():
    with pytest.raises(ValueError, match="declares kind 'latent'"):
        Stage(kind="not_latent", summary=LATENT)
    with pytest.raises(ValueError, match="needs the node"):
        Stage(kind="latent", summary=LATENT, upstream_walk=_walk)
    assert Stage(kind="latent", summary=LATENT).title == LATENT.title


def test_a_kind_registered_twice_fails():
    with pytest.raises(ValueError, match="registered twice"):
        stages.step_kinds((*stages.STAGES, stages.STAGES[0]))


def test_a_new_stage_is_one_entry_in_stages_and_everything_else_follows(monkeypatch):
    fake = _fake_stage()
    monkeypatch.setattr(stages, "STAGES", (*stages.STAGES, fake))

    assert stages.step_kinds()[-1] == "fake_stage"
    assert registry.registry()["fake_stage"] is fake.summary
    assert registry.label("fake_stage", "latent_type") == LATENT.field("latent_type").label
    assert stages.upstream_walks()["PipelineMonitorFake"] is _walk
    assert stages.monitor_nodes()[-1] == "PipelineMonitorFake"

    schema = generated_files.generated_schema(json.loads(Path(generated_files.SCHEMA_PATH).read_text()))
    assert "fake_stage" in schema["$defs"]["step"]["properties"]["kind"]["enum"]
    assert "summary_fake_stage" in schema["$defs"]
    assert generated_files.js_data()["kinds"]["fake_stage"]["title"] == "Fake stage"
    rows = [row for row in metrics_reference.summary_figures() if "kind=fake_stage" in row.path]
    assert rows and {row.spec for row in rows} == {"FAKE"}

    monkeypatch.undo()
    assert "fake_stage" not in registry.registry()  # the registry follows the registered stages


def test_the_stage_rooms_floor_is_read_from_the_registration(tmp_path):
    graph_module = _import_graph_module()
    assert {room for room, floor in graph_module.ROOM_LAYERS.items() if floor == graph_module.STAGE_FLOOR} == {
        "models",
        "lora",
        "conditioning",
        "vae",
        "latent",
        "dumps",
        "profiler_step",
        "deep_profile",
    }
    package = tmp_path / "monitors"
    (package / "vocabulary").mkdir(parents=True)
    (package / "vocabulary" / "stages.py").write_text(
        "from .. import lora, new_room\nfrom ..stage import Stage\n\nSTAGES = (lora.STAGE, new_room.STAGE)\n"
    )
    layers = graph_module.room_layers(package)
    assert layers["new_room"] == layers["lora"] == graph_module.STAGE_FLOOR
    assert "stage" in layers and layers["stage"] < graph_module.STAGE_FLOOR

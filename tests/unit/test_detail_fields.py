"""Details and node rows are declared like summaries (monitors/detail_fields.py): the schema's
`details_<kind>`, `node` and `gpu_peak` definitions are their declarations, a key a builder writes
without declaring it fails, and the declarations of rows made from dataclasses keep their fields."""

import dataclasses
import json
import re
from pathlib import Path

import jsonschema
import pytest

from monitors.detail_fields import DetailGroup, undeclared_keys
from monitors.lora.report import build_lora_step
from monitors.node_fields import GPU_PEAK, NODE_ROW, GpuPeak, NodeProfile, gpu_peak_key, node_key
from monitors.report import to_jsonable
from monitors.vae.details import VAE_ENCODE_DETAILS
from monitors.vae.geometry import Prediction, TileSettings
from monitors.vae.outcomes import Attempt
from monitors.vocabulary import registry as vocab
from monitors.vocabulary.formatting import unit_of_key
from tests.unit.test_lora_step_decisions import patched
from tests.unit.test_vae_chain import FakeVAE, pixels
from tests.unit.test_vae_chain_report import step_for

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "schemas" / "run_report.schema.json").read_text())
SUFFIX_OF_UNIT = {"bytes": "_bytes", "pct": "_pct", "ratio": "_ratio", "per_s": "_per_s", "s": "_s"}


def names(group: DetailGroup) -> list[str]:
    return [f.name for f in group.fields]


def step_validator():
    return jsonschema.Draft202012Validator(SCHEMA["$defs"]["step"] | {"$defs": SCHEMA["$defs"]})


def all_leaves():
    groups = [(kind, group) for kind, group in vocab.details_registry().items()] + [("nodes", NODE_ROW)]
    return [(f"{kind}.{path}", f) for kind, group in groups for path, _label, f in group.leaves()]


def test_node_rows_declare_exactly_their_dataclasses_fields():
    assert names(NODE_ROW) == [f.name for f in dataclasses.fields(NodeProfile)]
    assert names(GPU_PEAK) == [f.name for f in dataclasses.fields(GpuPeak)]
    assert node_key("duration_s") == "duration_s"
    assert gpu_peak_key("peak_allocated_bytes") == "peak_allocated_bytes"
    with pytest.raises(KeyError):
        gpu_peak_key("peak_alocated_bytes")


def test_vae_rows_made_from_dataclasses_declare_their_fields():
    assert set(names(VAE_ENCODE_DETAILS.key("attempts"))) == {f.name for f in dataclasses.fields(Attempt)}
    assert set(names(VAE_ENCODE_DETAILS.key("predictions"))) == {
        f.name for f in dataclasses.fields(Prediction)
    }
    assert set(names(VAE_ENCODE_DETAILS.key("tiles"))) == {f.name for f in dataclasses.fields(TileSettings)}


def test_schema_definitions_are_the_declarations():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    for kind, group in vocab.details_registry().items():
        details = SCHEMA["$defs"][f"details_{kind}"]
        assert details["additionalProperties"] is False
        assert list(details["properties"]) == names(group)
    assert list(SCHEMA["$defs"]["node"]["properties"]) == names(NODE_ROW)
    assert list(SCHEMA["$defs"]["gpu_peak"]["properties"]) == names(GPU_PEAK)
    assert SCHEMA["$defs"]["node"]["properties"]["status"]["enum"] == [
        "executed",
        "cached",
        "error",
        "interrupted",
    ]


@pytest.mark.parametrize("path,field", all_leaves(), ids=lambda x: x if isinstance(x, str) else "")
def test_detail_names_carry_their_unit(path, field):
    if field.unit in SUFFIX_OF_UNIT:
        assert field.name.endswith(SUFFIX_OF_UNIT[field.unit]), path
    elif field.unit == "count":
        assert re.search(r"(^|_)n_", field.name), path
    else:
        assert unit_of_key(field.name) is None, f"{path} reads as {unit_of_key(field.name)}"
    assert field.label and field.description, path


def test_a_lora_detail_key_missing_from_the_declaration_fails():
    step = to_jsonable(build_lora_step("9", {}, patched(1.0)).to_dict())
    validator = step_validator()
    assert not list(validator.iter_errors(step))
    assert list(undeclared_keys(vocab.details_registry()["lora"], step["details"])) == []
    step["details"]["n_new_figure"] = 1
    assert list(undeclared_keys(vocab.details_registry()["lora"], step["details"])) == ["n_new_figure"]
    errors = list(validator.iter_errors(step))
    assert errors and "n_new_figure" in errors[0].message


def test_a_vae_attempt_key_missing_from_the_declaration_fails():
    _result, built = step_for(FakeVAE(video=True), pixels(9, 64, 64))
    step = to_jsonable(built.to_dict())
    validator = step_validator()
    assert not list(validator.iter_errors(step))
    step["details"]["attempts"][0]["n_retries"] = 2
    assert list(undeclared_keys(VAE_ENCODE_DETAILS, step["details"])) == ["attempts.n_retries"]
    assert list(validator.iter_errors(step))


def test_a_node_row_key_missing_from_the_declaration_fails():
    node = to_jsonable(
        NodeProfile("1", "KSampler", "executed", False, gpu_peaks=(GpuPeak("cuda:0", 1, 2),)).to_dict()
    )
    validator = jsonschema.Draft202012Validator(SCHEMA["$defs"]["node"] | {"$defs": SCHEMA["$defs"]})
    assert not list(validator.iter_errors(node))
    assert list(validator.iter_errors({**node, "vram_bytes": 1}))
    node["gpu_peaks"][0]["peak_bytes"] = 3
    assert list(validator.iter_errors(node))


def test_detail_key_names_a_declared_path():
    assert vocab.detail_key("lora", "loaders.file.size_bytes") == "size_bytes"
    with pytest.raises(KeyError):
        vocab.detail_key("lora", "loaders.file.size")


def test_the_lora_side_figures_are_the_side_analysis_totals():
    step = build_lora_step("9", {}, patched(1.0))
    side = step.details["model"]
    totals = side["overall"]["totals"]
    assert step.summary["model_n_patch_keys_added"] == totals["n_keys"]
    assert step.summary["model_relative_change_ratio"] == totals["relative_change"]
    assert step.summary["model_patch_bytes"] == totals["patch_bytes"]
    assert step.summary["model_n_hops"] == len(side["hops"]) == 1
    assert step.summary["model_n_state_dict_keys_before"] == side["weight_modifications"]["n_state_dict_keys_before"]

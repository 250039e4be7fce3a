"""The language summaries and details are declared in (monitors/summary_fields.py and
monitors/detail_fields.py), on small hand-made declarations: what a field or group refuses, the
schema and panel entries it gives, lookups by path, undeclared keys and a node row's GPU peak."""

from __future__ import annotations

import dataclasses

import pytest

from monitors.detail_fields import (
    TRACEBACK,
    DetailGroup,
    details_of,
    key_js,
    key_schema,
    undeclared_keys,
)
from monitors.node_fields import gpu_peak_key, node_gpu_peak, node_key
from monitors.summary_fields import StepKindVocabulary, SummaryField, sided


def field(name="size_bytes", unit="bytes", json_type="integer", **extra):
    return SummaryField(name, f"label of {name}", unit, f"what {name} is", json_type, **extra)


# -- summary fields ----------------------------------------------------------------------------


def test_a_field_defaults():
    f = field()
    assert (f.headline, f.nullable, f.process_wide, f.choices) == (False, True, False, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.name = "other"


def test_a_field_refuses_an_unknown_unit_or_json_type():
    for unit in ("bytes", "s", "pct", "ratio", "fraction", "per_s", "count", None):
        assert field(unit=unit).unit == unit
    with pytest.raises(ValueError, match="size_bytes: unknown unit 'MiB'"):
        field(unit="MiB")
    with pytest.raises(ValueError, match="unknown JSON type 'int'"):
        field(json_type="int")
    with pytest.raises(ValueError, match="unknown JSON type"):
        field(json_type=("integer", "float"))
    assert field(json_type=("integer", "string")).json_type == ("integer", "string")


def test_a_field_schema():
    assert field().schema() == {"type": ["integer", "null"], "description": "what size_bytes is"}
    assert field(nullable=False).schema() == {"type": "integer", "description": "what size_bytes is"}
    assert field(json_type=("integer", "string"), nullable=False).schema()["type"] == ["integer", "string"]
    status = field("status", None, "string", choices=("ok", "failed"))
    assert status.schema() == {"type": ["string", "null"], "description": "what status is", "enum": ["ok", "failed", None]}
    strict = field("status", None, "string", choices=("ok",), nullable=False)
    assert strict.schema() == {"type": "string", "description": "what status is", "enum": ["ok"]}


def test_a_kind_names_headline_and_lookup():
    kind = StepKindVocabulary("k", "K", (field("a_bytes", headline=True), field("b_bytes"), field("c_s", "s", "number", headline=True)))
    assert kind.names == ("a_bytes", "b_bytes", "c_s")
    assert kind.headline == ("a_bytes", "c_s")
    assert kind.field("b_bytes") is kind.fields[1] and kind.field("b_bytes") is kind.fields[1]
    assert kind.field("nope") is None
    assert dict(kind.v1_renames) == {}
    with pytest.raises(ValueError, match=r"k: fields declared twice: \['a_bytes'\]"):
        StepKindVocabulary("k", "K", (field("a_bytes"), field("b_bytes"), field("a_bytes")))


def test_sided_fields_once_per_side():
    templates = (field("n_tokens", "count"), field("wall_s", "s", "number", nullable=False))
    out = sided(("positive", "negative"), templates, headline=("negative_wall_s",))
    assert [f.name for f in out] == ["positive_n_tokens", "positive_wall_s", "negative_n_tokens", "negative_wall_s"]
    assert [f.headline for f in out] == [False, False, False, True]
    first = out[0]
    assert (first.label, first.unit, first.description, first.json_type, first.nullable) == (
        "positive label of n_tokens", "count", "positive: what n_tokens is", "integer", True
    )
    assert out[1].nullable is False and isinstance(out, tuple)


# -- detail groups -----------------------------------------------------------------------------


def group(name="g", fields=(), **extra):
    return DetailGroup(name, f"label of {name}", f"what {name} is", fields, **extra)


FILE = group("file", (field("size_bytes"), field("path", None, "string")))
LOADERS = group("loaders", (field("name", None, "string"), FILE), repeated="list")
STRATEGIES = group("strategies", (field("wall_s", "s", "number"),), repeated="map")
SAME = group("negative", same_as="positive")
TOP = group("details", (LOADERS, STRATEGIES, field("n_keys", "count"), SAME))


def test_a_group_defaults_and_refusals():
    g = group()
    assert (g.repeated, g.nullable, g.open, g.same_as) == (None, True, False, None)
    with pytest.raises(ValueError, match="g: repeated must be one of"):
        group(repeated="set")
    with pytest.raises(ValueError, match=r"g: keys declared twice: \['a_bytes'\]"):
        group(fields=(field("a_bytes"), field("b_bytes"), field("a_bytes")))
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.name = "other"


def test_a_group_finds_a_key_by_its_dotted_path():
    assert TOP.key("loaders") is LOADERS
    assert TOP.key("loaders.file") is FILE
    assert TOP.key("loaders.file.size_bytes") is FILE.fields[0]
    assert TOP.key("n_keys") is TOP.fields[2]
    assert TOP.key("n_keys.more") is None  # a figure has nothing below it
    assert TOP.key("loaders.nope") is None and TOP.key("nope") is None and TOP.key("nope.file") is None


def test_a_group_schema_by_how_it_repeats():
    one = FILE.schema()
    assert one == {
        "description": "what file is",
        "type": ["object", "null"],
        "additionalProperties": False,
        "properties": {"size_bytes": field().schema(), "path": field("path", None, "string").schema()},
    }
    assert group(fields=(), nullable=False, open=True).schema() == {
        "description": "what g is", "type": "object", "additionalProperties": True, "properties": {}
    }
    listed = LOADERS.schema()
    assert listed["type"] == ["array", "null"] and listed["items"] == LOADERS.object_schema()
    assert listed["items"]["properties"]["file"] == one
    mapped = group("m", (field(),), repeated="map", nullable=False).schema()
    assert mapped["type"] == ["object"] and mapped["additionalProperties"]["properties"] == {"size_bytes": field().schema()}
    assert key_schema(FILE) == one and key_schema(field()) == field().schema()


def test_a_group_leaves_and_panel_entry():
    leaves = [(path, label) for path, label, _ in TOP.leaves()]
    assert leaves == [
        ("loaders[].name", "label of name"),
        ("loaders[].file.size_bytes", "label of size_bytes"),
        ("loaders[].file.path", "label of path"),
        ("strategies.<name>.wall_s", "label of wall_s"),
        ("n_keys", "label of n_keys"),
        ("negative", "label of negative"),
    ]
    same = list(TOP.leaves())[-1][2]
    assert (same.name, same.unit, same.description, same.json_type) == ("negative", None, "what negative is: as positive", "object")
    assert [p for p, _, _ in group(fields=(FILE,)).leaves("x.")] == ["x.file.size_bytes", "x.file.path"]
    assert LOADERS.js() == {
        "label": "label of loaders",
        "description": "what loaders is",
        "repeated": "list",
        "fields": {
            "name": {"label": "label of name", "unit": None, "description": "what name is"},
            "file": FILE.js(),
        },
    }
    assert "repeated" not in FILE.js() and key_js(FILE) == FILE.js()
    assert key_js(field()) == {"label": "label of size_bytes", "unit": "bytes", "description": "what size_bytes is"}


def test_a_kinds_details_carry_the_traceback():
    details = details_of("lora", (field(),), "the lora details")
    assert details.name == "details" and details.label == "lora details" and details.nullable is False
    assert details.fields == (field(), TRACEBACK)


def test_undeclared_keys_by_path():
    value = {
        "loaders": [{"name": "a", "file": {"size_bytes": 1, "sha": "x"}, "extra": 1}, "not a row"],
        "strategies": {"tiled": {"wall_s": 1.0, "tile": 64}},
        "n_keys": {"anything": "below a figure"},
        "negative": {"whatever": 1},
        "unknown": 2,
    }
    assert list(undeclared_keys(TOP, value)) == [
        "loaders.file.sha", "loaders.extra", "strategies.tile", "negative.whatever", "unknown"
    ]
    # a list or map given as one object is read as one object; an open group allows any key
    assert list(undeclared_keys(TOP, {"loaders": {"odd": 1}, "strategies": [{"odd": 1}]})) == ["loaders.odd"]
    open_top = group("details", (FILE,), open=True)
    assert list(undeclared_keys(open_top, {"file": {"odd": 1}, "anything": 1})) == ["file.odd"]
    assert list(undeclared_keys(TOP, "not a dict")) == []


# -- node rows ---------------------------------------------------------------------------------


def test_node_keys_and_the_highest_gpu_peak():
    assert node_key("gpu_busy_s") == "gpu_busy_s"
    with pytest.raises(KeyError, match="node rows declare no key 'gpu_bussy_s'"):
        node_key("gpu_bussy_s")
    assert gpu_peak_key("peak_reserved_bytes") == "peak_reserved_bytes"
    with pytest.raises(KeyError, match="GPU peaks declare no key"):
        gpu_peak_key("peak")
    node = {"gpu_peaks": [{"peak_allocated_bytes": 5, "peak_reserved_bytes": 9}, {"peak_allocated_bytes": 7}, "x",
                          {"peak_allocated_bytes": None}]}
    assert node_gpu_peak(node) == 7
    assert node_gpu_peak(node, "peak_reserved_bytes") == 9
    assert node_gpu_peak({"gpu_peaks": None}) is None and node_gpu_peak({}) is None



def test_a_kinds_vocabulary_and_the_node_rows_are_fixed_declarations():
    """A step kind's vocabulary is shared by every report: it cannot be changed in place. The
    node rows are a list in every run report, never null."""
    from monitors.node_fields import NODE_ROW

    kind = StepKindVocabulary("k", "K", (field("a_bytes"),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        kind.title = "other"
    assert NODE_ROW.repeated == "list" and NODE_ROW.schema()["type"] == ["array"]

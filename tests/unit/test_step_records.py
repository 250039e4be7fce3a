"""Typed step records (monitors/summary_fields.py StepRecord): each kind's summary is the dataclass its
builder constructs, and everything else reads that declaration.

What the source scans below cover, and what they do not:
- every `StepReport(...)` a builder in monitors/ makes takes its summary from a record's `to_dict()`
  (the latent step passes on what analyse_latent made the same way) and its details from its kind's
  declaration (`<KIND>_DETAILS.build(...)`, a record made from monitors/<kind>/details.py);
- every string key read from a step's summary in monitors/ and nodes/ (`x["key"]`, `x.get("key")`
  where `x`'s source names a summary) is a record field of some kind, or a key of the run-list row
  (monitors.report.run_summary), which is a summary of the run, not of a step.
- every string key read from a step's details the same way (`x` names details), and every string
  key of a dict literal that starts a step's details (`details = {...}`, `StepReport(details={...})`),
  is declared in some kind's details (monitors/<kind>/details.py, at any depth).
They do not see keys read through a variable (`summary[name]`: those are declared names the
vocabulary hands out), the keys of nested objects a helper assembles (the schema's closed groups
catch those: every report the tests write is validated, tests/report_validation.py), nor the
panel's JavaScript, whose keys come from its generated vocabulary (`KEYS`, `DETAILS`,
web/lib/vocabulary.generated.mjs; tests/js/details.test.mjs).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from monitors.detail_fields import DetailGroup
from monitors.report import RunReport, run_summary
from monitors.summary_fields import NOT_GIVEN, StepRecord
from monitors.vocabulary import registry as vocab

ROOT = Path(__file__).resolve().parents[2]


def _records() -> dict[str, type[StepRecord]]:
    return {kind: declared.record for kind, declared in vocab.registry().items()}


def test_every_kind_declares_its_summary_by_a_record():
    for kind, record in _records().items():
        assert record is not None and issubclass(record, StepRecord), kind
        assert vocab.names(kind) == record.names(), kind


def test_a_misspelt_figure_fails_at_construction():
    record = _records()["lora"]
    with pytest.raises(TypeError):
        record(n_lora=1)
    with pytest.raises(TypeError):
        record(1)  # keywords only: a figure is named where it is given


def test_to_dict_in_declaration_order_sides_flattened_and_figures_not_given_left_out():
    from monitors.lora.summary import LoraSide, LoraSummary

    summary = LoraSummary(analysis_s=0.5, success=True, model=LoraSide(n_hops=2), clip=None)
    out = summary.to_dict()
    assert list(out)[:2] == ["success", "model_n_hops"]
    assert out["model_n_hops"] == 2 and "model_patch_bytes" not in out  # a side's figure not given
    assert all(out[f"clip_{name}"] is None for name in LoraSide.names())  # a side unknown: all None
    assert list(out)[-1] == "analysis_s"
    assert "n_loras" not in out
    assert LoraSummary().to_dict() == {}
    assert repr(NOT_GIVEN) == "NOT_GIVEN"


def test_a_value_json_cannot_hold_is_refused():
    from monitors.latent.summary import LatentSummary

    assert LatentSummary(shape=[1, 4, 8, 8], mean=0.5).to_dict() == {"shape": [1, 4, 8, 8], "mean": 0.5}
    with pytest.raises(TypeError, match="dtype"):
        LatentSummary(dtype=object()).to_dict()


def test_a_figure_must_be_declared_with_a_known_annotation():
    from dataclasses import dataclass

    from monitors.summary_fields import figure

    @dataclass(frozen=True, kw_only=True)
    class Odd(StepRecord):
        size_bytes: bytes | None = figure("size", "bytes", "a size")

    with pytest.raises(TypeError, match="annotate"):
        Odd.summary_fields()


def _python_files(*folders: str):
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_every_step_summary_and_details_come_from_a_record():
    """Each builder's StepReport(...) takes its summary from a record's to_dict() and its details
    from its kind's declaration (DetailGroup.build: a key the kind does not declare raises)."""
    passed_on = {
        ("monitors/latent/report.py", "summary", "summary"),  # analyse_latent's LatentSummary.to_dict()
        ("monitors/report.py", "details", "{'traceback': trace[-MAX_TRACEBACK_CHARS:]}"),  # failed_step
    }
    seen = 0
    for path in _python_files("monitors"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "StepReport"):
                continue
            for keyword in node.keywords:
                if keyword.arg not in ("summary", "details"):
                    continue
                seen += 1
                value = keyword.value
                from_record = (
                    isinstance(value, ast.Call)
                    and isinstance(value.func, ast.Attribute)
                    and value.func.attr == ("to_dict" if keyword.arg == "summary" else "build")
                )
                where = (str(path.relative_to(ROOT)), keyword.arg, ast.unparse(value))
                assert from_record or where in passed_on, f"{where[0]}:{node.lineno}: {where[1]}={where[2]}"
    assert seen >= 2 * 9  # one builder per kind at least


def _string_keys_read(tree: ast.AST):
    """(receiver source, key, line) of every `x["key"]` and `x.get("key", ...)`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            if isinstance(node.slice.value, str):
                yield ast.unparse(node.value), node.slice.value, node.lineno
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield ast.unparse(node.func.value), node.args[0].value, node.lineno


def test_summary_keys_read_by_hand_are_record_fields():
    declared = {name for record in _records().values() for name in record.names()}
    run_row = set(run_summary(RunReport("p", "success", 0.0, 1.0, 1.0).to_dict()))
    unknown = []
    for path in _python_files("monitors", "nodes"):
        for receiver, key, line in _string_keys_read(ast.parse(path.read_text(encoding="utf-8"))):
            if "summary" in receiver.lower() and key not in declared | run_row:
                unknown.append(f"{path.relative_to(ROOT)}:{line}: {receiver}[{key!r}]")
    assert unknown == []


def test_the_scan_sees_a_misspelt_summary_key():
    source = 'summary = step.summary\nsummary["n_lora"]\nstep.summary.get("n_loras")\n'
    keys = [(receiver, key) for receiver, key, _ in _string_keys_read(ast.parse(source))]
    assert keys == [("summary", "n_lora"), ("step.summary", "n_loras")]


def _detail_names() -> set[str]:
    names: set[str] = set()

    def walk(group: DetailGroup) -> None:
        for key in group.fields:
            names.add(key.name)
            if isinstance(key, DetailGroup):
                walk(key)

    for group in vocab.details_registry().values():
        walk(group)
    return names


def _details_literal_keys(tree: ast.AST):
    """(key, line) of every string key of a dict literal that starts a step's details."""
    for node in ast.walk(tree):
        value = None
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "details" for t in targets):
                value = node.value
        elif isinstance(node, ast.keyword) and node.arg == "details":
            value = node.value
        if isinstance(value, ast.Dict):
            for key in value.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    yield key.value, key.lineno


def test_detail_keys_typed_by_hand_are_declared():
    declared = _detail_names()
    unknown, n_literal_keys = [], 0
    for path in _python_files("monitors", "nodes"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        where = path.relative_to(ROOT)
        for receiver, key, line in _string_keys_read(tree):
            if "details" in receiver.lower() and key not in declared:
                unknown.append(f"{where}:{line}: {receiver}[{key!r}]")
        for key, line in _details_literal_keys(tree):
            n_literal_keys += 1
            if key not in declared:
                unknown.append(f"{where}:{line}: details = {{{key!r}: ...}}")
    assert unknown == []
    assert n_literal_keys > 10  # the builders' details literals are seen


def test_every_kind_declares_its_details():
    assert tuple(vocab.details_registry()) == tuple(vocab.registry())


def test_the_scan_sees_a_misspelt_details_key():
    source = 'details = {"objectz": 1}\nStepReport(details={"objects": 2})\n'
    assert [key for key, _ in _details_literal_keys(ast.parse(source))] == ["objectz", "objects"]


def test_a_details_key_the_kind_does_not_declare_fails_at_construction():
    details = vocab.details_registry()["latent"]
    assert details.build(n_batch_index=2, keys=["samples"]) == {"keys": ["samples"], "n_batch_index": 2}
    with pytest.raises(TypeError):
        details.build(keyz=["samples"])

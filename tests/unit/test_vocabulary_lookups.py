"""The vocabulary's lookups by kind (registry.py), a node's UI text (headline.py) and the reading of
older reports in the current names (upgrade.py), each with exact values."""

from __future__ import annotations

import pytest

from monitors.report import SCHEMA_VERSION, Finding, StepReport
from monitors.vocabulary import headline, registry, upgrade
from monitors.vocabulary.stages import step_kinds

# -- registry ----------------------------------------------------------------------------------


def test_the_registry_is_built_once_in_step_kind_order():
    first = registry.registry()
    assert tuple(first) == step_kinds()
    assert registry.registry() is first
    assert registry.vocabulary("lora") is first["lora"]
    assert registry.vocabulary("not_a_kind") is None


def test_a_summary_field_by_kind_and_name():
    field = registry.summary_field("lora", "n_loras")
    assert field is not None and field.name == "n_loras" and field.label == "LoRAs"
    assert registry.summary_field("lora", "no_such_key") is None
    assert registry.summary_field("not_a_kind", "n_loras") is None
    assert registry.names("lora") == tuple(f.name for f in registry.vocabulary("lora").fields)
    assert registry.names("lora")[:2] == ("success", "n_loras")


def test_key_answers_a_declared_name_and_refuses_others():
    assert registry.key("lora", "n_loras") == "n_loras"
    assert registry.key("tensor_compare", "verdict") == "verdict"
    with pytest.raises(KeyError, match="no summary key 'n_lora'"):
        registry.key("lora", "n_lora")
    with pytest.raises(KeyError):
        registry.key("not_a_kind", "n_loras")


def test_detail_key_answers_the_last_name_of_a_declared_path():
    assert tuple(registry.details_registry()) == tuple(registry.registry())  # every kind, in order
    assert registry.detail_key("lora", "loaders.file.size_bytes") == "size_bytes"
    assert registry.detail_key("lora", "n_exceptions") == "n_exceptions"
    with pytest.raises(KeyError, match="declares no detail 'loaders.file.size'"):
        registry.detail_key("lora", "loaders.file.size")
    with pytest.raises(KeyError, match="'models' declares no detail"):
        registry.detail_key("models", "anything")


def test_labels_and_values_of_declared_and_undeclared_keys():
    assert registry.label("lora", "n_loras") == "LoRAs"  # declared
    assert registry.label("lora", "n_other_things") == "other things (count)"  # derived
    assert registry.label(None, "peak_bytes") == "peak"
    # a declared fraction is a percentage, though its name says ratio
    assert registry.format_summary_value("lora", "model_relative_change_ratio", 0.0123) == "1.23 %"
    assert registry.format_summary_value(None, "model_relative_change_ratio", 0.5) == "0.5×"
    assert registry.format_summary_value("lora", "undeclared_bytes", 2048) == "2.0 KiB"


def test_ordered_keys_declared_order_first_then_report_order():
    summary = {"zeta": 1, "n_matched_keys": 2, "alpha": 3, "success": True, "n_loras": 1}
    assert registry.ordered_keys("lora", summary) == ["success", "n_loras", "n_matched_keys", "zeta", "alpha"]
    assert registry.ordered_keys("not_a_kind", {"b": 1, "a": 2}) == ["b", "a"]
    assert registry.ordered_keys("lora", {}) == []


# -- headline ----------------------------------------------------------------------------------


def test_headline_lines_only_known_headline_figures():
    summary = {"n_loras": 2, "success": True, "model_patch_bytes": 100, "n_unmatched_keys": None}
    assert headline.headline_lines("lora", summary) == ["applied: yes", "LoRAs: 2"]
    assert headline.headline_lines("lora", {}) == []
    assert headline.headline_lines("not_a_kind", {"n_loras": 2}) == []


def _step(findings, summary=None):
    return StepReport("lora", "7", summary={"n_loras": 1} if summary is None else summary, findings=tuple(findings))


def test_step_text_is_the_headline_then_the_first_five_warnings_and_errors():
    findings = [Finding("info", "said in the report only")]
    findings += [Finding("warning" if i % 2 else "error", f"problem {i}") for i in range(7)]
    text = headline.step_text(_step(findings))
    assert text.splitlines() == ["LoRAs: 1", "problem 0", "problem 1", "problem 2", "problem 3", "problem 4"]
    assert headline.MAX_PROBLEM_LINES == 5


def test_step_text_without_problems_or_figures():
    assert headline.step_text(_step([Finding("info", "fine")])) == "LoRAs: 1"
    assert headline.step_text(_step([Finding("error", "failed")], summary={})) == "no figures\nfailed"


# -- upgrade -----------------------------------------------------------------------------------


def test_v1_names_are_renamed_only_in_a_version_1_summary():
    v1 = {"kind": "image", "channels": 4, "other": 1}
    assert upgrade.upgrade_summary("latent", v1, 1) == {"latent_type": "image", "n_channels": 4, "other": 1}
    # a version 2 (or later) summary is already in the current names, whatever they look like
    assert upgrade.upgrade_summary("latent", v1, 2) == v1
    assert upgrade.upgrade_summary("latent", v1, 3) == v1
    assert upgrade.upgrade_summary("not_a_kind", {"channels": 4}, 1) == {"channels": 4}
    copy = upgrade.upgrade_summary("latent", v1, 2)
    assert copy is not v1


def test_a_version_2_conditioning_step_without_the_old_figure_is_left_as_it_is():
    step = {"kind": "conditioning", "node_id": "4", "summary": {"encode_total_s": 1.5}, "details": {}}
    upgraded = upgrade.upgrade_report({"schema_version": 2, "steps": [step]})
    assert upgraded["steps"][0]["summary"] == {"encode_total_s": 1.5}
    other = {"kind": "lora", "node_id": "5", "summary": {"encode_peak_above_start_bytes": 3}}
    upgraded = upgrade.upgrade_report({"schema_version": 2, "steps": [other]})
    assert upgraded["steps"][0]["summary"] == {"encode_peak_above_start_bytes": 3}  # not a conditioning figure


def test_encoders_without_a_number_count_as_unknown():
    details = {"encode": {"encoders": ["not a row", {"peak_rss_above_start_bytes": "7"}, {}]}}
    step = {"kind": "conditioning", "summary": {"encode_peak_above_start_bytes": 1}, "details": details}
    summary = upgrade.upgrade_report({"schema_version": 2, "steps": [step]})["steps"][0]["summary"]
    assert summary == {"encode_peak_gpu_allocated_above_start_bytes": None, "encode_peak_rss_above_start_bytes": None}


def test_reports_of_other_versions_are_copied_as_they_are():
    steps = [{"kind": "latent", "summary": {"channels": 4}}]
    for version in (0, 4, None, 5):
        report = {"schema_version": version, "steps": steps}
        out = upgrade.upgrade_report(report)
        assert out == report and out is not report
    v1 = upgrade.upgrade_report({"schema_version": 1, "steps": [*steps, "not a step"]})
    assert v1["schema_version"] == SCHEMA_VERSION
    assert v1["steps"] == [{"kind": "latent", "summary": {"n_channels": 4}}, "not a step"]
    assert upgrade.upgrade_report({"schema_version": 1}) == {"schema_version": SCHEMA_VERSION, "steps": []}
    bare = upgrade.upgrade_report({"schema_version": 1, "steps": [{"kind": "latent"}]})
    assert bare["steps"] == [{"kind": "latent", "summary": {}}]

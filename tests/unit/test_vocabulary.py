"""The metric vocabulary: one declaration per step kind, and everything derived from it (schema,
panel module, HTML labels and units, node text, v1 -> v2 renames) agrees with it."""

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from monitors.cli.aggregate import load_report
from monitors.exporters.html import render_html
from monitors.report import SCHEMA_VERSION
from monitors.vocabulary import formatting, generated_files, headline, registry, upgrade
from monitors.vocabulary.stages import step_kinds

REPO = Path(__file__).resolve().parents[2]
V1_FIXTURE = REPO / "tests" / "fixtures" / "run_report_v1.json"
SCHEMA = json.loads((REPO / "schemas" / "run_report.schema.json").read_text())

SUFFIX_OF_UNIT = {"bytes": "_bytes", "pct": "_pct", "ratio": "_ratio", "fraction": "_ratio", "per_s": "_per_s"}


def all_fields():
    return [(kind, f) for kind, v in registry.registry().items() for f in v.fields]


def test_every_step_kind_is_declared_with_headline_figures():
    assert tuple(registry.registry()) == step_kinds()
    for kind, v in registry.registry().items():
        assert v.title and v.headline, kind
        assert all(f.label and f.description for f in v.fields), kind


@pytest.mark.parametrize("kind,field", all_fields(), ids=lambda x: getattr(x, "name", x))
def test_field_names_carry_their_unit(kind, field):
    name = field.name
    if field.unit in SUFFIX_OF_UNIT:
        assert name.endswith(SUFFIX_OF_UNIT[field.unit])
    elif field.unit == "s":
        assert name.endswith("_s") and not name.endswith("_per_s")
    elif field.unit == "count":
        assert re.search(r"(^|_)n_", name) or name.endswith("_count")
    else:  # a plain value must not look like it has a unit
        assert formatting.unit_of_key(name) is None, f"{name} reads as {formatting.unit_of_key(name)}"


def test_generated_files_are_not_stale():
    stale = [str(Path(p).relative_to(REPO)) for p in generated_files.stale_files()]
    assert not stale, f"regenerate with `python -m monitors.vocabulary.generated_files --write`: {stale}"


def test_schema_summary_of_each_kind_is_its_declaration():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["properties"]["schema_version"] == {"const": SCHEMA_VERSION}
    for kind, v in registry.registry().items():
        summary = SCHEMA["$defs"][f"summary_{kind}"]
        assert summary["additionalProperties"] is False
        assert list(summary["properties"]) == list(v.names)
    step = {"kind": "lora", "node_id": "1", "summary": {"n_loras": 1}, "details": {}, "findings": [],
            "monitor_errors": [], "created_unix_s": None, "cached": False}
    validator = jsonschema.Draft202012Validator(SCHEMA["$defs"]["step"] | {"$defs": SCHEMA["$defs"]})
    assert not list(validator.iter_errors(step))
    assert list(validator.iter_errors({**step, "summary": {"n_lora": 1}}))  # a typo fails
    assert list(validator.iter_errors({**step, "summary": {"n_loras": "one"}}))  # a wrong type fails
    assert not list(validator.iter_errors({**step, "summary": {}}))  # a failed step has no figures


def _generated_module_data() -> dict:
    text = (REPO / "web" / "lib" / "vocabulary.generated.mjs").read_text()
    body = text.split("export const VOCABULARY = ", 1)[1].split(";\n", 1)[0]
    return json.loads(body)


def test_panel_module_has_the_declared_labels_units_and_order():
    kinds = _generated_module_data()
    for kind, v in registry.registry().items():
        info = kinds[kind]
        assert info["title"] == v.title and info["headline"] == list(v.headline)
        assert list(info["fields"]) == list(v.names)
        for f in v.fields:
            expected = {"label": f.label, "unit": f.unit, "description": f.description}
            if f.process_wide:
                expected["processWide"] = True
            assert info["fields"][f.name] == expected
        assert info["v1Renames"] == dict(v.v1_renames)


def test_html_report_takes_labels_and_units_from_the_vocabulary():
    for kind, v in registry.registry().items():
        summary = {f.name: _sample(f) for f in v.fields}
        report = {"prompt_id": "p", "status": "success", "steps": [{"kind": kind, "node_id": "1", "summary": summary}]}
        page = render_html(report)
        for f in v.fields:
            cell = f"<div><b>{_esc(f.label)}</b>{_esc(formatting.format_value(f, summary[f.name]))}</div>"
            assert cell in page, (kind, f.name)


def _esc(text):
    import html

    return html.escape(text, quote=True)


def _sample(field):
    t = field.json_type if isinstance(field.json_type, str) else field.json_type[0]
    return {"integer": 3, "number": 0.25, "string": "x", "boolean": True, "array": [1, 2], "object": {}}[t]


def test_units_format_the_same_way_everywhere():
    f = registry.summary_field("lora", "model_relative_change_ratio")
    assert formatting.format_value(f, 0.0123) == "1.23 %"
    assert formatting.format_value(registry.summary_field("vae_encode", "spatial_compression_ratio"), 64.0) == "64×"
    assert formatting.format_value(registry.summary_field("models", "total_size_bytes"), 3 * 1024**2) == "3.0 MiB"
    assert formatting.format_value(registry.summary_field("lora", "analysis_s"), 0.05) == "50 ms"
    assert formatting.format_value(registry.summary_field("lora", "n_loras"), None) == formatting.MISSING
    assert registry.format_summary_value("unknown_kind", "peak_bytes", 2048) == "2.0 KiB"
    assert registry.label("unknown_kind", "n_things") == "things (count)"


def test_headline_text_lists_known_headline_figures_in_order():
    summary = {"success": True, "n_loras": 2, "n_unmatched_keys": None, "model_relative_change_ratio": 0.5,
               "model_patch_bytes": 100}
    assert headline.headline_text("lora", summary).splitlines() == [
        "applied: yes", "LoRAs: 2", "model weight change: 50.00 %"
    ]
    assert headline.headline_text("lora", {}) == "no figures"
    assert headline.headline_text("not_a_kind", {"x": 1}) == "no figures"


def test_v1_report_is_read_in_v2_names():
    v1 = json.loads(V1_FIXTURE.read_text())
    assert v1["schema_version"] == 1
    upgraded = upgrade.upgrade_report(v1)
    assert upgraded["schema_version"] == SCHEMA_VERSION and v1["schema_version"] == 1  # a copy
    jsonschema.validate(upgraded, SCHEMA)
    steps = {s["kind"]: s["summary"] for s in upgraded["steps"]}
    assert steps["lora"]["model_relative_change_ratio"] == 0.0123 and "model_relative_change" not in steps["lora"]
    assert steps["vae_encode"]["spatial_compression_ratio"] == 64.0
    assert steps["latent"]["latent_type"] == "image" and steps["latent"]["n_channels"] == 4
    assert steps["tensor_compare"]["max_relative_error_ratio"] == 2e-06
    assert load_report(str(V1_FIXTURE)) == upgraded
    assert upgrade.upgrade_report(upgraded) == upgraded  # version 2 stays as it is


def test_a_v2_conditioning_figure_of_two_meanings_is_split_by_what_it_measured():
    encoders = [
        {"node_id": "6", "peak_gpu_allocated_above_start_bytes": 300, "peak_rss_above_start_bytes": 10},
        {"node_id": "7", "peak_gpu_allocated_above_start_bytes": None, "peak_rss_above_start_bytes": 50},
    ]
    step = {
        "kind": "conditioning",
        "node_id": "9",
        "summary": {"encode_total_s": 1.0, "encode_peak_above_start_bytes": 300},
        "details": {"encode": {"encoders": encoders}},
    }
    v2 = {"schema_version": 2, "steps": [step, {**step, "details": {}}]}
    upgraded = upgrade.upgrade_report(v2)
    first, bare = (s["summary"] for s in upgraded["steps"])
    assert upgraded["schema_version"] == SCHEMA_VERSION and "encode_peak_above_start_bytes" not in first
    assert first["encode_peak_gpu_allocated_above_start_bytes"] == 300
    assert first["encode_peak_rss_above_start_bytes"] == 50 and first["encode_total_s"] == 1.0
    assert bare["encode_peak_gpu_allocated_above_start_bytes"] is None  # no details: unknown
    assert v2["steps"][0]["summary"]["encode_peak_above_start_bytes"] == 300  # the input is untouched


def test_a_v3_vae_input_rate_is_read_in_mib_per_second():
    """Version 3 wrote the VAE step's input rate in 10^6 bytes per second; version 4 in MiB."""
    step = {"kind": "vae_encode", "node_id": "8", "summary": {"input_mb_per_s": 2.097152, "frames_per_s": 3.0}}
    v3 = {"schema_version": 3, "steps": [step, {**step, "summary": {"input_mb_per_s": None}}]}
    upgraded = upgrade.upgrade_report(v3)
    first, unknown = (s["summary"] for s in upgraded["steps"])
    assert upgraded["schema_version"] == SCHEMA_VERSION == 4
    assert first == {"input_mib_per_s": pytest.approx(2.0), "frames_per_s": 3.0}
    assert unknown == {"input_mib_per_s": None} and "input_mb_per_s" in v3["steps"][0]["summary"]
    assert upgrade.upgrade_report(upgraded) == upgraded  # version 4 stays as it is


def test_compare_reads_a_v1_and_a_v2_report(tmp_path):
    from monitors.cli.commands import EXIT_OK, main

    v1 = json.loads(V1_FIXTURE.read_text())
    v2 = upgrade.upgrade_report(v1) | {"prompt_id": "v2-run"}
    (tmp_path / "v2.json").write_text(json.dumps(v2))
    out = tmp_path / "cmp.json"
    assert main(["compare", str(V1_FIXTURE), str(tmp_path / "v2.json"), "-o", str(out)]) == EXIT_OK
    assert json.loads(out.read_text())["regressions"] == []


def test_html_report_of_a_v1_report_uses_v2_labels():
    page = render_html(json.loads(V1_FIXTURE.read_text()))
    assert "<b>model weight change</b>1.23 %" in page and "relative change<" not in page


def test_command_line_check_passes():
    result = subprocess.run(
        [sys.executable, "-m", "monitors.vocabulary.generated_files", "--check"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr


# Same spelling, other meaning: a file that uses one of these names for something that is not a
# step summary's figure.
NOT_SUMMARY_KEYS = {
    ("nodes/memory_snapshot.py", "model_class"): "a loaded-model row of the OOM memory snapshot (details)",
    **{("nodes/dump_nodes.py", name): "an input of the compare node (node inputs are a contract)"
       for name in ("dump_a", "dump_b", "rtol", "atol")},
}


def _names_used_elsewhere_in_the_schema() -> set[str]:
    """Property names and enum values of the report outside the step summaries (status, duration_s...)."""
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            found.update(node.get("properties") or {})
            found.update(v for v in node.get("enum") or [] if isinstance(v, str))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({k: v for k, v in SCHEMA.items() if k != "$defs"})
    walk({k: v for k, v in SCHEMA["$defs"].items() if not k.startswith("summary_")})
    return found


def _code_without_comments(path: Path) -> str:
    lines = path.read_text(encoding="utf-8").splitlines()
    marks = ("#",) if path.suffix == ".py" else ("//", "*", "/*")
    return "\n".join("" if line.lstrip().startswith(marks) else line for line in lines)


def test_no_summary_key_is_spelled_by_hand_in_nodes_or_web():
    shared = _names_used_elsewhere_in_the_schema()
    declared = {f.name for _, f in all_fields()} - shared
    offenders = []
    for folder in ("nodes", "web"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in (".py", ".mjs", ".js") or path.name == "vocabulary.generated.mjs":
                continue
            rel = path.relative_to(REPO).as_posix()
            code = _code_without_comments(path)
            for literal in re.findall(r"""(["'`])([a-z][a-z0-9_]*)\1""", code):
                name = literal[1]
                if name in declared and (rel, name) not in NOT_SUMMARY_KEYS:
                    offenders.append(f"{rel}: {name!r}")
    assert not offenders, "read summary keys through monitors.vocabulary.registry / KEYS: " + ", ".join(sorted(set(offenders)))

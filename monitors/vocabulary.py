"""One metric vocabulary: every step kind declares its summary fields once, here and in
`monitors/<kind>/summary.py`, and everything else is derived from that declaration: the per-kind
`summary` definitions of `schemas/run_report.schema.json`, the labels and units of the HTML report
and of the panel (`web/lib/vocabulary.generated.mjs`), the node's UI text, and the v1 -> v2 key
renames applied when an older report is read.

`python -m monitors.vocabulary --write` regenerates the schema, the panel module and
docs/metrics-reference.md (monitors/metrics_reference.py); `--check` exits 1 when one is stale
(a unit test does the same).
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from . import report as run_report

# unit -> what the field's name must say about it (a test checks every declared name)
UNITS = ("bytes", "s", "pct", "ratio", "fraction", "per_s", "count")
JSON_TYPES = ("integer", "number", "string", "boolean", "array", "object")
MISSING = "–"

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA_PATH = os.path.join(REPO_ROOT, "schemas", "run_report.schema.json")
JS_PATH = os.path.join(REPO_ROOT, "web", "lib", "vocabulary.generated.mjs")


@dataclass(frozen=True)
class SummaryField:
    """One key of a step's summary. `unit` decides formatting; None is a plain value."""

    name: str
    label: str
    unit: str | None
    description: str
    json_type: str | tuple[str, ...]
    headline: bool = False  # shown first in the panel and in the node's UI text
    nullable: bool = True
    # A reading of the whole process or system at the step (not what the step itself did): a
    # comparison shows it but never flags it as the step's regression.
    process_wide: bool = False

    def __post_init__(self):
        if self.unit is not None and self.unit not in UNITS:
            raise ValueError(f"{self.name}: unknown unit {self.unit!r}")
        types = (self.json_type,) if isinstance(self.json_type, str) else self.json_type
        if any(t not in JSON_TYPES for t in types):
            raise ValueError(f"{self.name}: unknown JSON type {self.json_type!r}")

    def schema(self) -> dict:
        types = [self.json_type] if isinstance(self.json_type, str) else list(self.json_type)
        if self.nullable:
            types.append("null")
        out: dict[str, Any] = {
            "type": types[0] if len(types) == 1 else types,
            "description": self.description,
        }
        return out


@dataclass(frozen=True)
class StepKindVocabulary:
    kind: str
    title: str
    fields: tuple[SummaryField, ...]
    # keys of schema_version 1 reports -> their version 2 names
    v1_renames: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        names = [f.name for f in self.fields]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"{self.kind}: fields declared twice: {duplicates}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def headline(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.headline)

    def field(self, name: str) -> SummaryField | None:
        return self._by_name().get(name)

    def _by_name(self) -> dict[str, SummaryField]:
        cache = self.__dict__.get("_cache")
        if cache is None:
            cache = {f.name: f for f in self.fields}
            object.__setattr__(self, "_cache", cache)
        return cache


def sided(prefixes: tuple[str, ...], templates: tuple[SummaryField, ...], headline: tuple[str, ...] = ()):
    """The same fields once per side (`positive_n_tokens`, `negative_n_tokens`...)."""
    out = []
    for prefix in prefixes:
        for t in templates:
            name = f"{prefix}_{t.name}"
            out.append(
                SummaryField(
                    name,
                    f"{prefix} {t.label}",
                    t.unit,
                    f"{prefix}: {t.description}",
                    t.json_type,
                    headline=name in headline,
                    nullable=t.nullable,
                )
            )
    return tuple(out)


# -- registry -------------------------------------------------------------------------------------


_REGISTRY: dict[str, StepKindVocabulary] | None = None


def registry() -> dict[str, StepKindVocabulary]:
    """kind -> its declaration, in the order of monitors.report.STEP_KINDS."""
    global _REGISTRY
    if _REGISTRY is None:
        # Imported here: each declaration module imports this one for the dataclasses.
        from .conditioning.summary import CONDITIONING
        from .dumps.summary import TENSOR_COMPARE, TENSOR_DUMP
        from .latent.summary import LATENT
        from .lora.summary import LORA
        from .models.summary import MODELS
        from .profiling.summary import PROFILING
        from .vae.summary import VAE_ENCODE

        kinds = [MODELS, LORA, CONDITIONING, VAE_ENCODE, LATENT, TENSOR_DUMP, TENSOR_COMPARE, PROFILING]
        by_kind = {k.kind: k for k in kinds}
        if tuple(by_kind) != tuple(run_report.STEP_KINDS):
            raise RuntimeError(f"vocabulary kinds {tuple(by_kind)} differ from STEP_KINDS {run_report.STEP_KINDS}")
        _REGISTRY = by_kind
    return _REGISTRY


def vocabulary(kind: str) -> StepKindVocabulary | None:
    return registry().get(kind)


def summary_field(kind: str, name: str) -> SummaryField | None:
    vocab = vocabulary(kind)
    return None if vocab is None else vocab.field(name)


def names(kind: str) -> tuple[str, ...]:
    return registry()[kind].names


def key(kind: str, name: str) -> str:
    """A declared summary key, for code that reads one figure (exporters): a name the kind does not
    declare fails at import instead of reading None forever."""
    if summary_field(kind, name) is None:
        raise KeyError(f"{kind!r} declares no summary key {name!r}")
    return name


# -- formatting (HTML report and node text; web/lib/format.mjs mirrors it) -------------------------


def format_bytes(n: int | float | None) -> str:
    return MISSING if n is None else run_report.format_bytes(n)


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return MISSING
    a = abs(seconds)
    if a < 1:
        return f"{seconds * 1000:.1f} ms" if a < 0.01 else f"{seconds * 1000:.0f} ms"
    return f"{seconds:.2f} s" if a < 120 else f"{seconds / 60:.1f} min"


def _plain_number(value: float) -> str:
    if isinstance(value, int):
        return f"{value:,}"
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    a = abs(value)
    if a != 0 and (a < 1e-3 or a >= 1e6):
        return f"{value:.3e}"
    return f"{value:.4g}"


def unit_of_key(name: str) -> str | None:
    """The unit a name implies, for keys that are not declared (run-level figures, unknown kinds)."""
    if name.endswith("_per_s"):
        return "per_s"
    if name.endswith("_bytes"):
        return "bytes"
    if name.endswith("_s"):
        return "s"
    if name.endswith("_pct"):
        return "pct"
    if name.endswith("_ratio"):
        return "ratio"
    return None


def format_with_unit(unit: str | None, value: Any) -> str:
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return MISSING
        if unit == "bytes":
            return format_bytes(value)
        if unit == "s":
            return format_seconds(value)
        if unit == "pct":
            return f"{value:.1f} %"
        if unit == "fraction":
            return f"{100 * value:.2f} %"
        if unit == "ratio":
            return f"{_plain_number(value)}×"
        if unit == "per_s":
            return f"{_plain_number(value)}/s"
        return _plain_number(value)
    if isinstance(value, str):
        return value
    if (
        isinstance(value, (list, tuple))
        and len(value) <= 8
        and all(v is None or isinstance(v, (int, float, str, bool)) for v in value)
    ):
        return "[" + ", ".join("null" if v is None else str(v) for v in value) + "]"
    text = json.dumps(value, default=str)
    return text if len(text) <= 160 else text[:159] + "…"


def format_value(field_or_key: SummaryField | str, value: Any) -> str:
    """A value for people with its unit: a declared field's unit, else the unit its name implies."""
    if isinstance(field_or_key, SummaryField):
        return format_with_unit(field_or_key.unit, value)
    return format_with_unit(unit_of_key(field_or_key), value)


def label_from_key(name: str) -> str:
    """A label for keys no kind declares: the name without its unit suffix, `n_x` -> `x (count)`."""
    key = name
    for suffix in ("_bytes", "_pct", "_ratio", "_s"):
        if suffix == "_s" and key.endswith("_per_s"):
            break
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
            break
    if key.startswith("n_") and len(key) > 2:
        return key[2:].replace("_", " ") + " (count)"
    return key.replace("_", " ")


def label(kind: str | None, name: str) -> str:
    declared = summary_field(kind, name) if kind else None
    return declared.label if declared else label_from_key(name)


def format_summary_value(kind: str | None, name: str, value: Any) -> str:
    declared = summary_field(kind, name) if kind else None
    return format_value(declared or name, value)


def ordered_keys(kind: str, summary: Mapping[str, Any]) -> list[str]:
    """Declared keys in declaration order, then any others in report order."""
    vocab = vocabulary(kind)
    declared = [n for n in vocab.names if n in summary] if vocab else []
    return declared + [k for k in summary if k not in declared]


def headline_lines(kind: str, summary: Mapping[str, Any]) -> list[str]:
    """`label: value` for each headline figure that is known, in declared order."""
    vocab = vocabulary(kind)
    if vocab is None or not summary:
        return []
    return [
        f"{f.label}: {format_value(f, summary[f.name])}"
        for f in vocab.fields
        if f.headline and summary.get(f.name) is not None
    ]


def headline_text(kind: str, summary: Mapping[str, Any]) -> str:
    """A node's UI text: its kind's headline figures, one per line."""
    lines = headline_lines(kind, summary)
    return "\n".join(lines) if lines else "no figures"


MAX_PROBLEM_LINES = 5


def step_text(step) -> str:
    """A monitor node's UI text: its kind's headline figures, then the first warnings and errors
    (a fallback or a dummy latent must show on the node, not only in the report)."""
    problems = [f.message for f in step.findings if f.level in ("warning", "error")]
    return "\n".join([headline_text(step.kind, step.summary), *problems[:MAX_PROBLEM_LINES]])


# -- schema versions ------------------------------------------------------------------------------


def upgrade_summary(kind: str, summary: Mapping[str, Any], from_version: int) -> dict:
    vocab = vocabulary(kind)
    if vocab is None or from_version >= 2:
        return dict(summary)
    renames = vocab.v1_renames
    return {renames.get(k, k): v for k, v in summary.items()}


def upgrade_report(report: Mapping[str, Any]) -> dict:
    """A report of schema_version 1 in version 2 names (a copy); other versions as they are."""
    version = report.get("schema_version")
    if version != 1:
        return dict(report)
    out = dict(report)
    out["steps"] = [
        {**step, "summary": upgrade_summary(step.get("kind"), step.get("summary") or {}, 1)}
        if isinstance(step, Mapping)
        else step
        for step in report.get("steps") or []
    ]
    out["schema_version"] = run_report.SCHEMA_VERSION
    return out


# -- generated files ------------------------------------------------------------------------------


def summary_schema(vocab: StepKindVocabulary) -> dict:
    return {
        "type": "object",
        "description": f"Key figures of a `{vocab.kind}` step (monitors vocabulary).",
        "additionalProperties": False,
        "properties": {f.name: f.schema() for f in vocab.fields},
    }


def generated_schema(base: Mapping[str, Any]) -> dict:
    """The run report schema with each kind's summary definition from the vocabulary."""
    schema = copy.deepcopy(dict(base))
    schema["properties"]["schema_version"] = {"const": run_report.SCHEMA_VERSION}
    defs = schema["$defs"]
    for name in [n for n in defs if n.startswith("summary_")]:
        del defs[name]
    step = defs["step"]
    step["properties"]["summary"] = {"type": "object"}  # unknown kinds: any object
    step["allOf"] = []
    for kind, vocab in registry().items():
        defs[f"summary_{kind}"] = summary_schema(vocab)
        step["allOf"].append(
            {
                "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                "then": {"properties": {"summary": {"$ref": f"#/$defs/summary_{kind}"}}},
            }
        )
    return schema


def schema_text(base: Mapping[str, Any]) -> str:
    return json.dumps(generated_schema(base), indent=1, ensure_ascii=False) + "\n"


def js_data() -> dict:
    kinds = {}
    for kind, vocab in registry().items():
        kinds[kind] = {
            "title": vocab.title,
            "headline": list(vocab.headline),
            "fields": {
                f.name: {
                    "label": f.label,
                    "unit": f.unit,
                    "description": f.description,
                    **({"processWide": True} if f.process_wide else {}),
                }
                for f in vocab.fields
            },
            "v1Renames": dict(vocab.v1_renames),
        }
    return {"schemaVersion": run_report.SCHEMA_VERSION, "kinds": kinds}


def js_text() -> str:
    data = js_data()
    keys = {kind: {name: name for name in info["fields"]} for kind, info in data["kinds"].items()}
    dump = lambda value: json.dumps(value, indent=1, ensure_ascii=False)  # noqa: E731
    return (
        "// GENERATED by `python -m monitors.vocabulary --write` from the step kinds' declarations in\n"
        "// monitors/*/summary.py. Do not edit: change the declaration and regenerate (a test checks).\n\n"
        "/** @typedef {{label: string, unit: string | null, description: string, processWide?: boolean}} FieldInfo */\n"
        "/** @typedef {{title: string, headline: string[], fields: Record<string, FieldInfo>, "
        "v1Renames: Record<string, string>}} KindVocabulary */\n\n"
        f"export const SCHEMA_VERSION = {data['schemaVersion']};\n\n"
        "/** @type {Record<string, KindVocabulary>} */\n"
        f"export const VOCABULARY = {dump(data['kinds'])};\n\n"
        "/** Summary keys per kind, for code that reads a figure (so no key is spelled by hand). */\n"
        f"export const KEYS = /** @type {{const}} */ ({dump(keys)});\n"
    )


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def expected_files() -> dict[str, str]:
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        base = json.load(f)
    from .metrics_reference import DOC_PATH, document_text  # built on this module's registry

    return {SCHEMA_PATH: schema_text(base), JS_PATH: js_text(), DOC_PATH: document_text()}


def stale_files() -> list[str]:
    return [path for path, text in expected_files().items() if _read(path) != text]


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m monitors.vocabulary", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--write", action="store_true", help="regenerate the schema and the panel module")
    parser.add_argument("--check", action="store_true", help="exit 1 when a generated file is stale")
    args = parser.parse_args(argv)
    if args.write:
        for path, text in expected_files().items():
            if _read(path) != text:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                sys.stderr.write(f"wrote {os.path.relpath(path, REPO_ROOT)}\n")
        return 0
    stale = stale_files()
    for path in stale:
        sys.stderr.write(
            f"stale: {os.path.relpath(path, REPO_ROOT)} (run python -m monitors.vocabulary --write)\n"
        )
    return 1 if stale else 0


if __name__ == "__main__":
    # Run through the package's own module, so the declarations and this code share one registry.
    from monitors.vocabulary import main as package_main

    sys.exit(package_main())

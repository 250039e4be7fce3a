"""The language a step kind declares its summary in: a field (name with its unit, label, unit,
description, JSON type, headline or not) and a kind (its fields, title, v1 renames).

Each `monitors/<kind>/summary.py` declares its kind with these; `monitors/vocabulary/registry.py` collects
the declarations and derives everything else from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# unit -> what the field's name must say about it (a test checks every declared name)
UNITS = ("bytes", "s", "pct", "ratio", "fraction", "per_s", "count")
JSON_TYPES = ("integer", "number", "string", "boolean", "array", "object")


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
    # the values a string may take (a node row's status); None: any
    choices: tuple[str, ...] | None = None
    # Where the builder takes the figure from, for a summary assembled from its declaration: a
    # dotted path in the analysis it summarises (a LoRA side's "overall.totals.n_keys").
    source: str | None = None

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
        if self.choices is not None:
            out["enum"] = [*self.choices, *([None] if self.nullable else [])]
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
                    source=t.source,
                )
            )
    return tuple(out)

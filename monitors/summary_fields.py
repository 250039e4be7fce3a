"""The language a step kind declares its summary in: a record (a frozen dataclass of `figure()`
fields, below) that its builder constructs, and what the record yields for everything derived: a
field (name with its unit, label, unit, description, JSON type, headline or not) and a kind (its
fields, title, v1 renames).

Each `monitors/<kind>/summary.py` declares its kind's record and derives its StepKindVocabulary from
it; `monitors/vocabulary/registry.py` collects the declarations and derives everything else from them.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
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
    # the StepRecord the kind's builder constructs (StepRecord.vocabulary)
    record: type | None = field(default=None, compare=False)

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


# -- Typed step records: a summary declared by the dataclass its builder constructs ---------------
#
# A kind's summary is a frozen dataclass of `figure(...)` fields (monitors/<kind>/summary.py); its
# builder constructs it with keyword arguments, so a misspelt figure raises TypeError there, and
# stores `record.to_dict()` on the step. The kind's StepKindVocabulary (the schema, the panel's
# vocabulary, the HTML labels and the metrics reference) is derived from the same fields.


class _NotGiven:
    """A figure its builder did not give: left out of the report (the models step names only the
    objects connected, the latent step its maker only when known). None is a figure that is unknown."""

    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()

# A figure's Python annotation -> its JSON type (every summary figure may be None: unknown)
ANNOTATION_JSON_TYPES = {
    "int | None": "integer",
    "float | None": "number",
    "str | None": "string",
    "bool | None": "boolean",
    "list | None": "array",
    "dict | None": "object",
}
_FIGURE = "figure"
_SIDE = "side"
_JSON_SCALARS = (str, int, float, bool, type(None))


def figure(
    label: str,
    unit: str | None,
    description: str,
    *,
    headline: bool = False,
    process_wide: bool = False,
    name: str | None = None,
) -> Any:
    """One figure of a record: its label, unit and description (its JSON type comes from its
    annotation). `name`: the key in the report where it cannot be the attribute's (`class`)."""
    meta = {"label": label, "unit": unit, "description": description, "headline": headline,
            "process_wide": process_wide, "name": name}
    return field(default=NOT_GIVEN, metadata={_FIGURE: meta})


def side(record: type[StepRecord], *, headline: tuple[str, ...] = ()) -> Any:
    """The same figures once per side: a nested record whose keys take the attribute's name as
    their prefix (`positive` -> `positive_n_tokens`). None: the side's figures all unknown."""
    return field(default=NOT_GIVEN, metadata={_SIDE: (record, tuple(headline))})


def _json_safe(name: str, value: Any) -> Any:
    if isinstance(value, _JSON_SCALARS):
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            _json_safe(name, item)
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{name}: key {key!r} is not a string")
            _json_safe(name, item)
        return value
    if isinstance(value, numbers.Real):  # numpy and torch scalars: numbers in the JSON (to_jsonable)
        return value
    raise TypeError(f"{name}: {type(value).__name__} is not a JSON value")


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """The base of a kind's summary record (and of a side of it): `to_dict()` in declaration order,
    `summary_fields()` / `vocabulary()` for everything derived from the declaration."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is NOT_GIVEN:
                continue
            if _SIDE in f.metadata:
                record = f.metadata[_SIDE][0]
                inner = value.to_dict() if value is not None else {n: None for n in record.names()}
                out.update({f"{f.name}_{k}": v for k, v in inner.items()})
            else:
                key = f.metadata[_FIGURE]["name"] or f.name
                out[key] = _json_safe(f"{type(self).__name__}.{key}", value)
        return out

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in cls.summary_fields())

    @classmethod
    def summary_fields(cls) -> tuple[SummaryField, ...]:
        """The record's figures as the vocabulary declares them; a side's once per its prefix."""
        out: list[SummaryField] = []
        for f in fields(cls):
            if _SIDE in f.metadata:
                record, headline = f.metadata[_SIDE]
                out += sided((f.name,), record.summary_fields(), tuple(f"{f.name}_{h}" for h in headline))
            elif _FIGURE in f.metadata:
                meta = dict(f.metadata[_FIGURE])
                json_type = ANNOTATION_JSON_TYPES.get(str(f.type))
                if json_type is None:
                    allowed = sorted(ANNOTATION_JSON_TYPES)
                    raise TypeError(f"{cls.__name__}.{f.name}: annotate it as one of {allowed}")
                out.append(SummaryField(meta.pop("name") or f.name, json_type=json_type, **meta))
            else:
                raise TypeError(f"{cls.__name__}.{f.name}: declare it with figure() or side()")
        return tuple(out)

    @classmethod
    def vocabulary(
        cls, kind: str, title: str, v1_renames: Mapping[str, str] | None = None
    ) -> StepKindVocabulary:
        return StepKindVocabulary(kind, title, cls.summary_fields(), dict(v1_renames or {}), record=cls)

"""The language a step kind declares its `details` in, as summaries are declared
(monitors/summary_fields.py): a group is an object of the details with its keys, each key a
`SummaryField` (name with its unit, label, description, JSON type) or a nested group.

Each `monitors/<kind>/details.py` declares its kind's details with these, and monitors/node_fields.py
the figures of a node row the same way. From one declaration come the `details_<kind>` definitions
of the schema, the panel's card labels (web/lib/vocabulary.generated.mjs `DETAILS`) and the details'
rows of docs/metrics-reference.md.
This module sits at the root beside summary_fields.py: the stages declare with it and the vocabulary
collects their declarations.

A group lists the keys its objects may have (`additionalProperties: false` in the schema), so a key
a builder writes without declaring it fails the report validation of the tests. A group marked
`open` is a structure described elsewhere (a span, a memory picture, an object description): its
declared keys are the ones the panel and the reference read, and others may follow.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any

from .summary_fields import NOT_GIVEN, SummaryField

REPEATS = (None, "list", "map")


@dataclass(frozen=True)
class DetailGroup:
    """An object of a step's details. `repeated`: None (one object), "list" (a list of such
    objects) or "map" (a name -> such an object, e.g. one per strategy)."""

    name: str
    label: str
    description: str
    fields: tuple[DetailKey, ...] = ()
    repeated: str | None = None
    nullable: bool = True
    open: bool = False
    # Where the same keys are described already: a node row ("nodes[]"), or a sibling declared the
    # same way ("positive"). The metrics reference gives the group one row that points there.
    same_as: str | None = None

    def __post_init__(self):
        if self.repeated not in REPEATS:
            raise ValueError(f"{self.name}: repeated must be one of {REPEATS}, not {self.repeated!r}")
        names = [f.name for f in self.fields]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"{self.name}: keys declared twice: {duplicates}")

    def key(self, path: str) -> DetailKey | None:
        """The declaration at a dotted path below this group ("loaders.file.size_bytes")."""
        head, _, rest = path.partition(".")
        found = next((f for f in self.fields if f.name == head), None)
        if not rest or found is None:
            return found
        return found.key(rest) if isinstance(found, DetailGroup) else None

    def object_schema(self) -> dict:
        """One object of this group (what a list holds, or what a map maps to)."""
        return {
            "type": "object",
            "additionalProperties": self.open,
            "properties": {f.name: key_schema(f) for f in self.fields},
        }

    def schema(self) -> dict:
        nullable = ["null"] if self.nullable else []
        if self.repeated == "list":
            out = {"type": ["array", *nullable], "items": self.object_schema()}
        elif self.repeated == "map":
            out = {"type": ["object", *nullable], "additionalProperties": self.object_schema()}
        else:
            out = self.object_schema()
            out["type"] = ["object", *nullable] if nullable else "object"
        return {"description": self.description, **out}

    def leaves(self, prefix: str = "") -> Iterator[tuple[str, str, SummaryField]]:
        """(JSON path, label path, field) of every declared figure below this group; a list's
        objects are `name[]`, a map's `name.<name>`."""
        for f in self.fields:
            path = f"{prefix}{f.name}"
            if isinstance(f, DetailGroup) and f.same_as:
                yield path, f.label, SummaryField(f.name, f.label, None, f"{f.description}: as {f.same_as}", "object")
            elif isinstance(f, DetailGroup):
                below = {"list": f"{path}[].", "map": f"{path}.<name>."}.get(f.repeated, f"{path}.")
                yield from f.leaves(below)
            else:
                yield path, f.label, f

    def record(self) -> type[DetailsRecord]:
        """The frozen dataclass of this group's keys, made from the declaration: a builder constructs
        its step's details with it (keywords: a key the group does not declare raises TypeError)."""
        made = self.__dict__.get("_record")
        if made is None:
            keys = [(f.name, Any, field(default=NOT_GIVEN)) for f in self.fields]
            name = "".join(part.title() for part in self.label.replace("_", " ").split()) + "Record"
            made = make_dataclass(name, keys, bases=(DetailsRecord,), frozen=True, kw_only=True)
            object.__setattr__(self, "_record", made)
        return made

    def build(self, **values: Any) -> dict[str, Any]:
        """The group's object from its keys, through its record: in declaration order, the keys not
        given left out."""
        return self.record()(**values).to_dict()

    def js(self) -> dict:
        """The panel's view of the group: label, description and its keys, nested."""
        return {
            "label": self.label,
            "description": self.description,
            **({"repeated": self.repeated} if self.repeated else {}),
            "fields": {f.name: key_js(f) for f in self.fields},
        }


DetailKey = SummaryField | DetailGroup


@dataclass(frozen=True, kw_only=True)
class DetailsRecord:
    """The base of a group's record (DetailGroup.record): `to_dict()` in declaration order, the keys
    not given left out (a step's details carry what its builder found)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not NOT_GIVEN}


def key_schema(key: DetailKey) -> dict:
    return key.schema()


def key_js(key: DetailKey) -> dict:
    if isinstance(key, DetailGroup):
        return key.js()
    return {"label": key.label, "unit": key.unit, "description": key.description}


def details_of(kind: str, fields: tuple[DetailKey, ...], description: str) -> DetailGroup:
    """A kind's whole `details` object: its keys, and `traceback`, which every step that failed
    outright carries (monitors.report.error_step)."""
    return DetailGroup("details", f"{kind} details", description, (*fields, TRACEBACK), nullable=False)


TRACEBACK = SummaryField(
    "traceback",
    "traceback",
    None,
    "the error of a monitor that failed outright (its last characters)",
    "string",
)

# The memory of a step whose span covers upstream nodes (monitors/upstream_memory.py step_memory):
# declared once for every kind that carries it.
MEMORY_DETAILS: tuple[DetailKey, ...] = (
    SummaryField(
        "memory",
        "memory",
        None,
        "the memory picture (monitors.span.memory_picture): per figure its start, end, change and peak "
        "with its time; null with memory_unknown_reason",
        "object",
    ),
    SummaryField(
        "memory_unknown_reason",
        "memory unknown",
        None,
        "why memory is null, e.g. the upstream nodes were cached and did not run this prompt",
        "string",
    ),
    DetailGroup(
        "memory_scope",
        "memory scope",
        "which upstream nodes the memory picture covers",
        (
            SummaryField(
                "upstream_node_ids", "upstream nodes", None, "the nodes the monitor looked at", "array"
            ),
            SummaryField(
                "measured_node_ids",
                "measured nodes",
                None,
                "the nodes whose spans the picture merges",
                "array",
            ),
            SummaryField(
                "not_run_node_ids", "nodes not run", None, "upstream nodes that did not run (cached)", "array"
            ),
        ),
    ),
)


def undeclared_keys(group: DetailGroup, value: Any, prefix: str = "") -> Iterator[str]:
    """The dotted path of every key of `value` (a step's details) a closed group does not declare."""
    if not isinstance(value, dict):
        return
    declared = {f.name: f for f in group.fields}
    for name, item in value.items():
        found = declared.get(name)
        if found is None:
            if not group.open:
                yield f"{prefix}{name}"
            continue
        if not isinstance(found, DetailGroup):
            continue
        below = f"{prefix}{name}."
        if found.repeated == "list" and isinstance(item, list):
            for element in item:
                yield from undeclared_keys(found, element, below)
        elif found.repeated == "map" and isinstance(item, dict):
            for element in item.values():
                yield from undeclared_keys(found, element, below)
        else:
            yield from undeclared_keys(found, item, below)

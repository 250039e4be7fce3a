"""The language a step kind declares its `details` in, as summaries are declared
(monitors/summary_fields.py): a group is an object of the details with its keys, each key a
`SummaryField` (name with its unit, label, description, JSON type) or a nested group.

Each `monitors/<kind>/details.py` declares its kind's details with these. The figures of a node row
(`nodes[]`, monitors.report.NodeProfile) and of its GPU peaks (GpuPeak) are declared the same way
here, below, since stages embed node rows in their details. From one declaration come the
`details_<kind>`, `node` and `gpu_peak` definitions of the schema, the panel's card labels
(web/lib/vocabulary.generated.mjs `DETAILS`, `NODE_FIELDS`) and the details' and node rows' rows of
docs/metrics-reference.md; a unit test keeps the node rows' declaration and dataclasses the same.
This module sits at the root beside summary_fields.py: the stages declare with it and the vocabulary
collects their declarations.

A group lists the keys its objects may have (`additionalProperties: false` in the schema), so a key
a builder writes without declaring it fails the report validation of the tests. A group marked
`open` is a structure described elsewhere (a span, a memory picture, an object description): its
declared keys are the ones the panel and the reference read, and others may follow.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .report import GPU_BUSY_CAVEAT, GPU_TIME_CAVEAT
from .summary_fields import SummaryField
from .summary_fields import SummaryField as F

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

    def js(self) -> dict:
        """The panel's view of the group: label, description and its keys, nested."""
        return {
            "label": self.label,
            "description": self.description,
            **({"repeated": self.repeated} if self.repeated else {}),
            "fields": {f.name: key_js(f) for f in self.fields},
        }


DetailKey = SummaryField | DetailGroup


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


# -- node rows ----------------------------------------------------------------------------------

_TORCH = "torch allocator counter of the device"


def _gpu(counter: str, what: str) -> tuple[F, ...]:
    return (
        F(
            f"{counter}_start_bytes",
            f"GPU {what} at start",
            "bytes",
            f"{_TORCH} {what} at the node's start",
            "integer",
        ),
        F(
            f"{counter}_end_bytes",
            f"GPU {what} at end",
            "bytes",
            f"{_TORCH} {what} at the node's end",
            "integer",
        ),
        F(f"{counter}_change_bytes", f"GPU {what} change", "bytes", "end minus start", "integer"),
    )


GPU_PEAK = DetailGroup(
    "gpu_peaks",
    "GPU peaks",
    "per device the node used: torch allocator peaks (reset at the node's start) and counters",
    (
        F("device", "device", None, "the torch device (cuda:0)", "string", nullable=False),
        F(
            "peak_allocated_bytes",
            "GPU allocated peak",
            "bytes",
            "highest memory held by tensors while the node ran; absolute: includes what other work left allocated",
            "integer",
        ),
        F(
            "peak_reserved_bytes",
            "GPU reserved peak",
            "bytes",
            "highest memory reserved by the caching allocator while the node ran",
            "integer",
        ),
        F(
            "peak_allocated_above_start_bytes",
            "GPU allocated added",
            "bytes",
            "allocated peak minus allocated at the node's start: what the node itself added",
            "integer",
        ),
        F(
            "peak_reserved_above_start_bytes",
            "GPU reserved added",
            "bytes",
            "reserved peak minus reserved at the node's start",
            "integer",
        ),
        *_gpu("allocated", "allocated"),
        *_gpu("reserved", "reserved"),
        F("peak_allocated_at_s", "GPU allocated peak time", "s", "seconds after the node's start", "number"),
        F("peak_reserved_at_s", "GPU reserved peak time", "s", "seconds after the node's start", "number"),
    ),
    repeated="list",
    nullable=False,
)

NODE_ROW = DetailGroup(
    "nodes",
    "node row",
    "one row per node the prompt ran or took from the cache: cheap figures only (process RSS and torch "
    "allocator counters)",
    (
        F("node_id", "node id", None, "the node's id in the prompt", "string", nullable=False),
        F("class_type", "node class", None, "the node's class", "string"),
        F(
            "status",
            "status",
            None,
            "executed, cached, error or interrupted",
            "string",
            nullable=False,
            choices=("executed", "cached", "error", "interrupted"),
        ),
        F(
            "cached",
            "cached",
            None,
            "ComfyUI took the node's outputs from its cache",
            "boolean",
            nullable=False,
        ),
        F("start_offset_s", "start", "s", "seconds after the prompt's start", "number"),
        F("duration_s", "node time", "s", "ComfyUI progress hook, node start to finish", "number"),
        F(
            "peak_rss_bytes",
            "peak RSS",
            "bytes",
            "the process's highest RSS while the node ran, its baseline included (VmHWM reset at the node's start)",
            "integer",
        ),
        F(
            "peak_rss_method",
            "peak RSS method",
            None,
            "kernel_hwm (VmHWM, exact) or sampled (the sampler's highest tick)",
            "string",
            choices=("kernel_hwm", "sampled"),
        ),
        F("rss_change_bytes", "RSS change", "bytes", "RSS at the node's end minus at its start", "number"),
        GPU_PEAK,
        F("title", "title", None, "the node's title in the workflow", "string"),
        F(
            "peak_rss_above_start_bytes",
            "peak RSS above start",
            "bytes",
            "peak RSS minus RSS at the node's start: what the node itself added (peak_rss_bytes is the "
            "process's, baseline included)",
            "integer",
        ),
        F("rss_start_bytes", "RSS at start", "bytes", "process RSS at the node's start", "integer"),
        F("rss_end_bytes", "RSS at end", "bytes", "process RSS at the node's end", "integer"),
        F(
            "peak_rss_at_s",
            "peak RSS time",
            "s",
            "seconds after the node's start when the RSS peak was seen (kernel_hwm: when it was read)",
            "number",
        ),
        F("gpu_time_s", "GPU span", "s", GPU_TIME_CAVEAT, "number"),
        F(
            "gpu_time_unknown_reason",
            "GPU span unknown",
            None,
            "why gpu_time_s is null (no CUDA device in use, CUDA initialised during the node, events "
            "unreadable, read only at the prompt's end); null for cached nodes",
            "string",
        ),
        F("gpu_busy_s", "GPU busy", "s", GPU_BUSY_CAVEAT, "number"),
        F(
            "gpu_busy_unknown_reason",
            "GPU busy unknown",
            None,
            "why gpu_busy_s is null (the node shorter than NVML's sampling period, no NVML, no sample after "
            "the node yet, no CUDA device in use); null for cached nodes",
            "string",
        ),
    ),
    repeated="list",
    nullable=False,
)


def node_key(name: str) -> str:
    """A declared node-row key, for code that reads one figure: an undeclared name fails at import."""
    if NODE_ROW.key(name) is None:
        raise KeyError(f"node rows declare no key {name!r}")
    return name


def gpu_peak_key(name: str) -> str:
    """A declared key of a node row's GPU peak (`peak_allocated_bytes`), as node_key."""
    if GPU_PEAK.key(name) is None:
        raise KeyError(f"GPU peaks declare no key {name!r}")
    return name


def node_gpu_peak(node: Mapping, name: str = "peak_allocated_bytes") -> int | float | None:
    """The highest value of a declared GPU-peak figure over a node row's devices (a row read back
    from a report); None when no device reported it."""
    key = gpu_peak_key(name)
    values = [p.get(key) for p in node.get(GPU_PEAK.name) or () if isinstance(p, Mapping)]
    values = [v for v in values if isinstance(v, (int, float))]
    return max(values) if values else None

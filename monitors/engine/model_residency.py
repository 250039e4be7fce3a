"""The model-residency log of a prompt: each load, unload and LoRA patch/unpatch of a model's
weights, as the framework's model manager did it, and what that adds up to per node and per prompt.

Framework-neutral: the ComfyUI glue (nodes/model_residency.py) reads ComfyUI's own figures
(`loaded_size()` / `model_size()` before and after) and hands a plain `ModelEvent` to the recorder,
which stamps the prompt offset and the running node and appends it here. Appending is the whole
cost on the prompt's path: a bounded list, no walk over parameters. The run's `model_residency`
object (declared in monitors/engine/residency_fields.py) is built from it at the prompt's end.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

MAX_EVENTS = 500  # per prompt; later events are counted, not kept
MAX_REMEMBERED_MODELS = 64  # models whose last unload is remembered across prompts
LOAD_KINDS = ("load_full", "load_partial", "load_dynamic")
UNLOAD_KINDS = ("unload_full", "unload_partial")
PATCH_KINDS = ("patch", "unpatch")
EVENT_KINDS = (*LOAD_KINDS, *UNLOAD_KINDS, *PATCH_KINDS)


@dataclass(frozen=True)
class ModelEvent:
    """One thing the model manager did to one model's weights."""

    kind: str  # one of EVENT_KINDS
    model_class: str | None
    patcher_id: int | None  # serial of the patcher (a LoRA clone is a patcher of its own)
    model_id: int | None  # serial of the weights' module (shared by a patcher and its clones)
    device: str | None
    duration_s: float | None
    bytes_moved: int | None = None  # |loaded after - loaded before|, ComfyUI's loaded_size()
    loaded_before_bytes: int | None = None
    loaded_after_bytes: int | None = None
    model_size_bytes: int | None = None  # ComfyUI's model_size()
    n_weights: int | None = None  # weights patched / unpatched (LoRA), lowvram patches included
    reason: str | None = None  # why, when the model manager says (a free for another model)
    loader_node_id: str | None = None
    # stamped by the recorder
    offset_s: float | None = None
    node_id: str | None = None
    node_class: str | None = None
    # a load: whether these weights were never loaded before in this process (they came from
    # the loader), and for weights unloaded earlier: {prompt_id, node_id, node_class, reason}
    first_load: bool | None = None
    reloaded_after: Mapping | None = None

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@dataclass
class ResidencyLog:
    """One prompt's events, bounded; the models requested that were resident already."""

    events: list[ModelEvent] = field(default_factory=list)
    n_dropped: int = 0
    already_resident: dict = field(default_factory=dict)  # model_id -> model_class

    def append(self, event: ModelEvent) -> bool:
        if len(self.events) >= MAX_EVENTS:
            self.n_dropped += 1
            return False
        self.events.append(event)
        return True

    def note_resident(self, model_id, model_class) -> None:
        if len(self.already_resident) < MAX_EVENTS:
            self.already_resident[model_id] = model_class


class ResidencyHistory:
    """Across prompts: which models were loaded before (their weights came from the loader the
    first time) and the last unload of each, so a reload names what evicted it."""

    def __init__(self, limit: int = MAX_REMEMBERED_MODELS):
        self.limit = limit
        self._loaded: OrderedDict = OrderedDict()  # model_id -> True
        self._unloads: OrderedDict = OrderedDict()  # model_id -> {prompt_id, node_id, ...}

    def _remember(self, table: OrderedDict, key, value) -> None:
        table.pop(key, None)
        table[key] = value
        while len(table) > self.limit:
            table.popitem(last=False)

    def annotate(self, event: ModelEvent, prompt_id: str | None) -> ModelEvent:
        """The event with `reloaded_after` set on a load of weights unloaded earlier; remembers it."""
        if event.model_id is None:
            return event
        if event.kind in LOAD_KINDS:
            first = event.model_id not in self._loaded
            self._remember(self._loaded, event.model_id, True)
            earlier = self._unloads.pop(event.model_id, None)
            return dataclasses.replace(event, first_load=first, reloaded_after=None if first else earlier)
        elif event.kind == "unload_full":
            where = {"prompt_id": prompt_id, "node_id": event.node_id, "node_class": event.node_class}
            self._remember(self._unloads, event.model_id, {**where, "reason": event.reason})
        return event


def busy_seconds(events: Iterable[ModelEvent]) -> float:
    """Seconds covered by the events' intervals (a load's unpatch inside it counted once)."""
    spans = sorted(
        (e.offset_s, e.offset_s + e.duration_s)
        for e in events
        if e.offset_s is not None and e.duration_s is not None
    )
    total, end = 0.0, None
    for start, stop in spans:
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def node_figures(events: Iterable[ModelEvent]) -> dict[str, dict]:
    """node id -> {weights_loaded_bytes, weights_unloaded_bytes, weights_moved_s}."""
    by_node: dict[str, list[ModelEvent]] = {}
    for event in events:
        if event.node_id is not None:
            by_node.setdefault(event.node_id, []).append(event)
    figures = {}
    for node_id, own in by_node.items():
        figures[node_id] = {
            "weights_loaded_bytes": sum(e.bytes_moved or 0 for e in own if e.kind in LOAD_KINDS),
            "weights_unloaded_bytes": sum(e.bytes_moved or 0 for e in own if e.kind in UNLOAD_KINDS),
            "weights_moved_s": busy_seconds(own),
        }
    return figures


def with_node_figures(nodes: Sequence, events: Iterable[ModelEvent]) -> list:
    """Node rows (NodeProfile) with their weights figures; rows without events keep None."""
    figures = node_figures(events)
    return [
        dataclasses.replace(n, **figures[n.node_id]) if n.node_id in figures and not n.cached else n
        for n in nodes
    ]


def residency_report(
    log: ResidencyLog,
    duration_s: float | None,
    resident_at_end: Sequence[Mapping] | None,
    findings: Sequence[Mapping] = (),
) -> dict:
    """The run's `model_residency` object (monitors/engine/residency_fields.py)."""
    events = log.events
    loads = [e for e in events if e.kind in LOAD_KINDS]
    moved_s = busy_seconds(events)
    share = None if not duration_s else 100.0 * moved_s / duration_s
    first = {e.model_id for e in loads if e.first_load}
    return {
        "n_loads": len(loads),
        "n_unloads": sum(1 for e in events if e.kind in UNLOAD_KINDS),
        "n_models_first_loaded": len(first),
        "n_models_reloaded": len({e.model_id for e in loads} - first),
        "n_models_already_resident": len(set(log.already_resident) - {e.model_id for e in loads}),
        "weights_loaded_bytes": sum(e.bytes_moved or 0 for e in loads),
        "weights_unloaded_bytes": sum(e.bytes_moved or 0 for e in events if e.kind in UNLOAD_KINDS),
        "weights_moved_s": moved_s,
        "weights_moved_pct": share,
        "n_events_dropped": log.n_dropped,
        "events": [e.to_dict() for e in events],
        "resident_at_end": None if resident_at_end is None else [dict(m) for m in resident_at_end],
        "findings": [dict(f) for f in findings],
    }

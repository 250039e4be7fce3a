"""A stage: one step kind, declared once in its room and registered once.

Each stage's room exports its `STAGE` (`monitors/<room>/__init__.py`); the tuple
`monitors/vocabulary/stages.py: STAGES` registers them. Everything else is derived from that
tuple: the vocabulary's registry (summaries and details by kind), the kinds a report may hold,
the profile hook's upstream walks (by the node that records the step), the metrics reference's
spec column, the panel's kinds (through the generated vocabulary), the nodes the pack's extension
lists and the floor of the stage rooms in `scripts/import_graph.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# prompt graph, the monitor's node id -> the ids of the upstream nodes its step describes
UpstreamWalk = Callable[[Mapping, str], list[str]]


@dataclass(frozen=True)
class Stage:
    # the step kind: a report's `steps[].kind`, the key of everything derived
    kind: str
    # the declaration of its summary (the room's summary.py, e.g. lora.summary.LORA)
    summary: Any
    # the declaration of its details (the room's details.py), None where the kind declares none
    details: Any = None
    # the ComfyUI node (its class_type) that records the step; None for a step made by a profiler
    node: str | None = None
    # a passthrough monitor whose work ran upstream: the walk from its node to the nodes its step
    # describes (those get a full-detail span and the step a memory picture of them)
    upstream_walk: UpstreamWalk | None = None
    # the specification's section that names the kind's figures (docs/metrics-reference.md)
    spec: str | None = None

    def __post_init__(self):
        declared = getattr(self.summary, "kind", self.kind)
        if declared != self.kind:
            raise ValueError(f"stage {self.kind!r}: its summary declares kind {declared!r}")
        if self.upstream_walk is not None and self.node is None:
            raise ValueError(f"stage {self.kind!r}: an upstream walk needs the node it starts from")

    @property
    def title(self) -> str:
        return self.summary.title

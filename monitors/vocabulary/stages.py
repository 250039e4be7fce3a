"""Every stage of a run report, registered once: `STAGES` below, in the order reports, the schema,
the panel and the metrics reference list them.

A new stage is its room (`monitors/<room>/`, exporting its `STAGE`: monitors/stage.py), its node
(`nodes/<name>_node.py`, recording `STAGE.kind` under node id `STAGE.node`) and one entry here
(the import of its room and its `STAGE` in the tuple). Everything typed per kind elsewhere is
derived from this tuple: the registry's declarations by kind (registry.py), the kinds a report may
hold (`step_kinds`), the profile hook's upstream walks (`upstream_walks`), the metrics reference's
spec column, the panel's kinds (the generated vocabulary), the nodes the pack's extension lists
(nodes/extension.py) and the floor of the stage rooms (scripts/import_graph.py reads the rooms
imported here).
"""

from __future__ import annotations

from .. import conditioning, deep_profile, dumps, latent, lora, models, profiler_step, vae
from ..stage import Stage, UpstreamWalk

STAGES: tuple[Stage, ...] = (
    models.STAGE,
    lora.STAGE,
    conditioning.STAGE,
    vae.STAGE,
    latent.STAGE,
    dumps.TENSOR_DUMP_STAGE,
    dumps.TENSOR_COMPARE_STAGE,
    profiler_step.STAGE,
    deep_profile.STAGE,
)


def step_kinds(stages: tuple[Stage, ...] | None = None) -> tuple[str, ...]:
    """The kinds a report's steps may have, in the order of STAGES."""
    kinds = tuple(stage.kind for stage in (STAGES if stages is None else stages))
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"a step kind registered twice: {kinds}")
    return kinds


def upstream_walks(stages: tuple[Stage, ...] | None = None) -> dict[str, UpstreamWalk]:
    """The monitor node (class_type) -> its stage's graph walk, for the passthrough monitors whose
    work ran upstream (the engine's `RunRecorder.begin_run(upstream_walks=...)`)."""
    return {
        stage.node: stage.upstream_walk
        for stage in (STAGES if stages is None else stages)
        if stage.node and stage.upstream_walk
    }


def monitor_nodes(stages: tuple[Stage, ...] | None = None) -> tuple[str, ...]:
    """The node ids (class_type) of the stages that a ComfyUI node records, in the order of STAGES."""
    return tuple(stage.node for stage in (STAGES if stages is None else stages) if stage.node)

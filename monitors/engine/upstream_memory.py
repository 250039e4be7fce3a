"""The memory picture of a passthrough monitor's upstream work (steps `models`, `lora`, `conditioning`).

Those monitors pass their inputs through: the work they describe (loading checkpoints, applying
LoRAs, encoding text) ran in the nodes that feed them, so a span around the monitor's own analysis
would measure the wrong thing. Instead, when a prompt starts, the recorder picks from the prompt
graph the nodes each such monitor describes (`watch_plan`) and gives exactly those nodes a
full-detail span (system RAM, RSS, allocator, NVML), while every other node keeps its light one.
When the monitor runs, `upstream_memory` merges the spans of its upstream nodes that ran into one
picture (monitors.engine.span.memory_picture): baseline at the first one's start, end at the last one's
end, peaks and lows over their spans with the time from the first start. One picture rather than
one per node, so that every step's `memory` has the same shape; `memory_scope` names the nodes it
covers and the ones that did not run. Upstream nodes served from ComfyUI's cache did not run this
prompt: with none run, `memory` is None with the reason, never a picture of something else.

Which nodes a step describes comes from its stage's own graph walk, handed in by the caller
(`walks_by_class`: monitor class_type -> walk, e.g. monitors/lora/upstream.py), so that the engine
imports no stage:
- models: the nodes feeding its model / clip / vae inputs (the loaders);
- lora: the LoRA loaders stacked on its model / clip paths (not the checkpoint loader below them);
- conditioning: the text encode nodes (the nodes fed by a CLIP) behind its positive / negative.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..stage import UpstreamWalk
from .span import SpanResult, memory_picture, merge_sequential

MAX_WATCHED_PER_MONITOR = 64  # a pathological graph must not turn every node into a full span

NO_RECORDER_REASON = "no per-node profile run recorded this step"
PROFILE_OFF_REASON = "per-node profile off: the upstream nodes were not measured"
NO_RUN_REASON = "no profiled prompt was running"
NO_UPSTREAM_REASON = "no upstream node of this step found in the prompt graph"
CACHED_REASON = "upstream nodes cached: nothing ran"


def watch_plan(
    prompt: Mapping | None, walks_by_class: Mapping[str, UpstreamWalk] | None
) -> dict[str, tuple[str, ...]]:
    """monitor node id -> the upstream node ids its step describes, for every node of `prompt`
    whose class_type `walks_by_class` maps to its stage's walk. A walk that trips on an odd graph
    leaves that monitor out (its step then says no upstream node was found)."""
    if not isinstance(prompt, Mapping) or not walks_by_class:
        return {}
    plan = {}
    for node_id, node in prompt.items():
        walk = walks_by_class.get(node.get("class_type")) if isinstance(node, Mapping) else None
        if walk is None:
            continue
        try:
            upstream = walk(prompt, str(node_id))
        except Exception:  # the graph walk is best effort; the profile must go on
            continue
        plan[str(node_id)] = tuple(dict.fromkeys(upstream))[:MAX_WATCHED_PER_MONITOR]
    return plan


def watched_nodes(plan: Mapping[str, Iterable[str]]) -> frozenset[str]:
    return frozenset(node_id for upstream in plan.values() for node_id in upstream)


def unknown(reason: str, upstream: Iterable[str] = ()) -> dict:
    """The step's memory fields when there is no picture."""
    upstream = list(upstream)
    return {
        "memory": None,
        "memory_unknown_reason": reason,
        "memory_scope": {
            "upstream_node_ids": upstream,
            "measured_node_ids": [],
            "not_run_node_ids": upstream,
        },
    }


def upstream_memory(upstream: Iterable[str], results: Mapping[str, SpanResult]) -> dict:
    """{memory, memory_unknown_reason, memory_scope} of one monitor from the full spans of its
    upstream nodes that ran (`results`: node id -> closed span). A node without a result did not
    run this prompt (ComfyUI served it from its cache) or its span failed."""
    upstream = list(upstream)
    if not upstream:
        return unknown(NO_UPSTREAM_REASON)
    measured = [node_id for node_id in upstream if results.get(node_id) is not None]
    if not measured:
        return unknown(CACHED_REASON, upstream)
    merged = merge_sequential("upstream", [results[node_id] for node_id in measured])
    return {
        "memory": memory_picture(merged),
        "memory_unknown_reason": None,
        "memory_scope": {
            "upstream_node_ids": upstream,
            "measured_node_ids": sorted(measured, key=lambda n: results[n].start_unix_s),
            "not_run_node_ids": [node_id for node_id in upstream if node_id not in measured],
        },
    }


def step_memory(recorder, node_id: str | None) -> dict:
    """The memory fields of a monitor step from `recorder` (a RunRecorder, or None)."""
    if recorder is None:
        return unknown(NO_RECORDER_REASON)
    try:
        return recorder.upstream_memory(node_id)
    except Exception as exc:  # the step's own analysis stands without its picture
        return unknown(f"memory picture failed: {type(exc).__name__}: {exc}")

"""Helpers shared by the monitor nodes: attaching steps to the run, finding upstream loaders."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from ..monitors.report import StepReport
from .runtime import get_runtime

log = logging.getLogger(__name__)


def record_step(step: StepReport) -> bool:
    try:
        attached = get_runtime().recorder.add_step(step)
    except Exception:
        log.exception("pipeline monitor: step not recorded")
        return False
    if not attached:
        log.debug(
            "pipeline monitor: %s step of node %s made outside a profiled prompt", step.kind, step.node_id
        )
    return attached


def upstream_node_ids(
    node_id: str | None, prompt: Mapping | None, input_names: Iterable[str]
) -> dict[str, str]:
    """input name -> id of the node feeding it, from the API-format prompt."""
    if node_id is None or not isinstance(prompt, Mapping):
        return {}
    node = prompt.get(str(node_id))
    inputs = node.get("inputs") if isinstance(node, Mapping) else None
    if not isinstance(inputs, Mapping):
        return {}
    found = {}
    for name in input_names:
        link = inputs.get(name)
        if isinstance(link, (list, tuple)) and len(link) == 2:
            found[name] = str(link[0])
    return found


def loader_profiles(
    node_id: str | None, prompt: Mapping | None, input_names: Iterable[str]
) -> dict[str, dict]:
    """input name -> the per-node profile (time, peaks, cached) of the node that produced it."""
    recorder = get_runtime().recorder
    profiles = {}
    for name, source_id in upstream_node_ids(node_id, prompt, input_names).items():
        profile = recorder.node_profile(source_id)
        class_type = None
        source = prompt.get(source_id) if isinstance(prompt, Mapping) else None
        if isinstance(source, Mapping):
            class_type = source.get("class_type")
        row = {"node_id": source_id, "class_type": class_type}
        if profile is not None:
            row.update(profile.to_dict())
        else:
            # An upstream node has produced its output before this node runs; if the profile did
            # not see it run, ComfyUI served it from its cache.
            cached = True if recorder.profile_enabled and recorder.active_prompt_id is not None else None
            row.update({"duration_s": None, "peak_rss_bytes": None, "cached": cached})
        profiles[name] = row
    return profiles

"""Which op launched each kernel, on every torch version.

The profiler links a kernel to the op that launched it through `linked_correlation_id`. torch
keeps that id on its raw Kineto events, but `FunctionEvent` (what `profile.events()` returns) only
carries it from torch 2.12 on (pytorch PR 177662). On torch 2.11 (the GPU machine's) every kernel
then looked unlinked and every node showed 0 s of device time. `restore_links` copies the ids from
the raw events onto the function events that lack them, matching each to its raw event by
(correlation id, start ns, end ns): the function event's id is the raw event's correlation id and
its times are the raw times relative to the trace start, exactly as torch builds them.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def _raw_results(torch_profile):
    """The Kineto results behind a torch.profiler.profile (None where they are not reachable)."""
    inner = getattr(torch_profile, "profiler", None)
    return getattr(inner, "kineto_results", None) if inner is not None else None


def _key(correlation_id, start_ns, end_ns) -> tuple[int, int, int]:
    return int(correlation_id), int(round(start_ns)), int(round(end_ns))


def raw_links(results) -> dict[tuple[int, int, int], int]:
    """(correlation id, start ns, end ns relative to the trace start) -> linked correlation id, for
    every raw event that links to another."""
    trace_start_ns = results.trace_start_ns()
    links = {}
    for raw in results.events():
        linked = raw.linked_correlation_id()
        if linked:
            key = _key(raw.correlation_id(), raw.start_ns() - trace_start_ns, raw.end_ns() - trace_start_ns)
            links[key] = int(linked)
    return links


def restore_links(torch_profile, events) -> tuple[list, str | None]:
    """(the events, each with its `linked_correlation_id`; why some could not get one, or None).

    Events that already carry the attribute (torch >= 2.12, fakes) are returned untouched."""
    events = list(events)
    missing = [e for e in events if not hasattr(e, "linked_correlation_id")]
    if not missing:
        return events, None
    results = _raw_results(torch_profile)
    try:
        links = raw_links(results)
    except Exception as exc:
        reason = f"kernels could not be linked to their ops: {type(exc).__name__}: {exc}"
        log.warning("pipeline monitor: deep profile: %s", reason)
        return events, reason
    for event in missing:
        span = event.time_range
        key = _key(getattr(event, "id", 0), span.start * 1000.0, span.end * 1000.0)
        event.linked_correlation_id = links.get(key, 0)
    return events, None

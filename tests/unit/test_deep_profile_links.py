"""Kernels tied to their ops on a torch whose FunctionEvent lacks `linked_correlation_id` (torch
2.11, the GPU machine's): the ids come back from the raw Kineto events, and the per-node device
time is what a torch that keeps them gives."""

from __future__ import annotations

import types

import pytest

from monitors.deep_profile import analysis
from monitors.deep_profile.links import raw_links, restore_links
from tests.unit.test_deep_profile import cuda_prompt

TRACE_START_NS = 5_000_000_000


class RawEvent:
    """What torch's _KinetoEvent exposes: methods, absolute nanoseconds."""

    def __init__(self, event):
        self._event = event

    def correlation_id(self):
        return self._event.id

    def linked_correlation_id(self):
        return self._event.linked_correlation_id

    def start_ns(self):
        return TRACE_START_NS + round(self._event.time_range.start * 1000)

    def end_ns(self):
        return TRACE_START_NS + round(self._event.time_range.end * 1000)


def old_torch_profile(events):
    """(a torch.profiler.profile-like object, its events as torch 2.11 returns them)."""
    raw = [RawEvent(types.SimpleNamespace(**vars(e))) for e in events]
    results = types.SimpleNamespace(trace_start_ns=lambda: TRACE_START_NS, events=lambda: raw)
    profile = types.SimpleNamespace(profiler=types.SimpleNamespace(kineto_results=results))
    for event in events:
        del event.linked_correlation_id
    return profile, events


def test_links_restored_from_the_raw_events_give_the_same_device_time():
    events, ranges = cuda_prompt()
    expected = analysis.node_rows(analysis.attribute(events, ranges), cuda=True)
    events, ranges = cuda_prompt()
    profile, old_events = old_torch_profile(events)
    assert analysis.node_rows(analysis.attribute(old_events, ranges), cuda=True)[0]["device_time_s"] == 0
    restored, reason = restore_links(profile, old_events)
    assert reason is None
    assert analysis.node_rows(analysis.attribute(restored, ranges), cuda=True) == expected
    assert expected[0]["device_time_s"] == pytest.approx(115e-6)
    launch = next(e for e in restored if e.name == "cudaLaunchKernel")
    assert launch.linked_correlation_id == 11  # a runtime call keeps its link to its op
    assert next(e for e in restored if e.name == "aten::mm").linked_correlation_id == 0


def test_a_raw_event_is_matched_by_its_id_and_both_times():
    events, _ = cuda_prompt()
    profile, old_events = old_torch_profile(events)
    links = raw_links(profile.profiler.kineto_results)
    k1 = next(e for e in old_events if e.name == "gemm_kernel")
    assert links[(k1.id, 20_000, 80_000)] == 11
    k1.time_range = types.SimpleNamespace(start=20.0, end=81.0)  # another event: no link
    restored, _ = restore_links(profile, old_events)
    assert next(e for e in restored if e.name == "gemm_kernel").linked_correlation_id == 0


def test_events_that_carry_their_links_are_left_as_they_are():
    events, _ = cuda_prompt()
    sentinel = object()
    restored, reason = restore_links(types.SimpleNamespace(profiler=sentinel), events)
    assert restored == events and reason is None


def test_unreachable_raw_events_leave_a_reason_and_the_events():
    events, _ = cuda_prompt()
    _, old_events = old_torch_profile(events)
    restored, reason = restore_links(types.SimpleNamespace(), old_events)
    assert restored == old_events
    assert reason.startswith("kernels could not be linked to their ops: AttributeError")

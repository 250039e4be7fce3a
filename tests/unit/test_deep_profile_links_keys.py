"""Raw Kineto links matched by key: correlation id, start and end in ns relative to the trace
start, rounded to the nanosecond; an event without an id is keyed by id 0; unmatched events 0."""

from __future__ import annotations

import types

from monitors.deep_profile.links import raw_links, restore_links

TRACE_START_NS = 1_000_000


class Raw:
    def __init__(self, correlation_id, start_ns, end_ns, linked):
        self._values = (correlation_id, start_ns, end_ns, linked)

    def correlation_id(self):
        return self._values[0]

    def start_ns(self):
        return TRACE_START_NS + self._values[1]

    def end_ns(self):
        return TRACE_START_NS + self._values[2]

    def linked_correlation_id(self):
        return self._values[3]


def profile(raw):
    results = types.SimpleNamespace(trace_start_ns=lambda: TRACE_START_NS, events=lambda: raw)
    return types.SimpleNamespace(profiler=types.SimpleNamespace(kineto_results=results))


def event(start_us, end_us, **attrs):
    return types.SimpleNamespace(time_range=types.SimpleNamespace(start=start_us, end=end_us), **attrs)


def test_raw_links_are_keyed_relative_to_the_trace_start_and_only_when_linked():
    links = raw_links(
        profile([Raw(7, 2000, 5000, 3), Raw(8, 2000, 5000, 0), Raw(9, 1, 2, None)]).profiler.kineto_results
    )
    assert links == {(7, 2000, 5000): 3}


def test_function_events_get_the_link_of_their_raw_event_or_zero():
    raw = [Raw(7, 2000, 5000, 3), Raw(0, 10_000, 12_000, 5)]
    events = [event(2.0, 5.0, id=7), event(10.0, 12.0), event(2.0, 5.0, id=8), event(2.0004, 4.9996, id=7)]
    restored, reason = restore_links(profile(raw), events)
    assert reason is None
    assert [e.linked_correlation_id for e in restored] == [3, 5, 0, 3]  # id-less: 0; times rounded to the ns

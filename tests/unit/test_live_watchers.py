"""The live view's watchers on their own: the watch request's fields, the backfill window, expiry
at the TTL's edge, the bound evicting the watcher closest to expiry, the sink moving with the
sampler, and the executing node from the recorder or the framework."""

from __future__ import annotations

import pytest

from monitors.engine import live
from monitors.engine.live import (
    BACKFILL_S,
    EVENT,
    MAX_BACKFILL_POINTS,
    MAX_WATCHERS,
    WATCH_TTL_S,
    LiveWatchers,
    WatchRequestError,
    backfill_points,
    executing,
    sample_payload,
    watch_request,
)
from monitors.probes.fake import fake_probes


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


class Sinks:
    """A sampler's sink list, nothing else."""

    def __init__(self):
        self.sinks = []

    def add_sink(self, sink):
        self.sinks.append(sink)

    def remove_sink(self, sink):
        self.sinks.remove(sink)


def test_the_constants_the_panel_relies_on():
    assert EVENT == "pipeline_monitor.sample"
    assert (WATCH_TTL_S, MAX_WATCHERS, BACKFILL_S, MAX_BACKFILL_POINTS) == (30.0, 64, 600.0, 1200)


def test_a_watch_request_gives_its_id_its_flag_and_backfill_unless_refused():
    assert watch_request({"client_id": "a-b_9", "watching": True}) == ("a-b_9", True, True)
    assert watch_request({"client_id": "x" * 128, "watching": False, "backfill": False}) == (
        "x" * 128,
        False,
        False,
    )
    assert watch_request({"client_id": "a", "watching": True, "backfill": 0}) == ("a", True, True)
    assert watch_request({"client_id": "a", "watching": True, "backfill": None}) == ("a", True, True)


@pytest.mark.parametrize(
    "body, message",
    [
        (["a", True], "body must be a JSON object"),
        ({"client_id": "a b", "watching": True}, "client_id must be 1-128 letters, digits, '-' or '_'"),
        ({"client_id": "x" * 129, "watching": True}, "client_id must be"),
        ({"client_id": "a\n", "watching": True}, "client_id must be"),
        ({"watching": True}, "client_id must be"),
        ({"client_id": "a", "watching": 1}, "watching must be true or false"),
        ({"client_id": "a"}, "watching must be true or false"),
    ],
)
def test_a_malformed_watch_request_says_what_is_wrong(body, message):
    with pytest.raises(WatchRequestError, match=message):
        watch_request(body)


class Points:
    def __init__(self, points):
        self._points = points
        self.asked = []

    def points(self, since_unix_s=None):
        self.asked.append(since_unix_s)
        return list(self._points)


class Point:
    def __init__(self, n):
        self.n = n

    def to_dict(self):
        return {"n": self.n}


def test_the_backfill_is_the_last_ten_minutes_up_to_its_point_bound(monkeypatch):
    monkeypatch.setattr(live.time, "time", lambda: 5000.0)
    sampler = Points([Point(i) for i in range(MAX_BACKFILL_POINTS + 2)])
    points = backfill_points(sampler)
    assert sampler.asked == [5000.0 - BACKFILL_S]
    assert (
        len(points) == MAX_BACKFILL_POINTS
        and points[0] == {"n": 2}
        and points[-1] == {"n": MAX_BACKFILL_POINTS + 1}
    )


def test_a_watch_expires_after_its_ttl_not_at_it():
    clock = Clock()
    watchers = LiveWatchers(lambda *a: None, clock=clock, ttl_s=10.0)
    sampler = Sinks()
    watchers.watch("a", True, sampler)
    clock.now += 10.0
    assert watchers.clients() == ["a"]
    clock.now += 0.001
    assert watchers.clients() == []


def test_a_renewal_moves_the_expiry():
    clock = Clock()
    watchers = LiveWatchers(lambda *a: None, clock=clock, ttl_s=10.0)
    sampler = Sinks()
    watchers.watch("a", True, sampler)
    clock.now += 8.0
    watchers.watch("a", True, sampler)
    clock.now += 8.0
    assert watchers.clients() == ["a"]


def test_the_bound_evicts_the_watcher_closest_to_expiry_and_a_renewal_evicts_none(monkeypatch):
    monkeypatch.setattr(live, "MAX_WATCHERS", 3)
    clock = Clock()
    watchers = LiveWatchers(lambda *a: None, clock=clock)
    sampler = Sinks()
    for name in ("a", "b", "c"):
        clock.now += 1.0
        watchers.watch(name, True, sampler)
    clock.now += 1.0
    watchers.watch("a", True, sampler)  # a renewal: "a" now expires last
    assert sorted(watchers.clients()) == ["a", "b", "c"]
    watchers.watch("d", True, sampler)
    assert sorted(watchers.clients()) == ["a", "c", "d"]  # "b" was the closest to expiry


def test_only_a_closed_socket_drops_a_watcher_unknown_keeps_it():
    state = {"a": None, "b": True, "c": False}
    watchers = LiveWatchers(lambda *a: None, connected=state.get, clock=Clock())
    sampler = Sinks()
    for name in state:
        watchers.watch(name, True, sampler)
    assert watchers.clients() == ["a", "b"]
    assert watchers.connected("c") is False and watchers.connected("a") is None


def test_the_sink_follows_the_watchers_and_moves_to_a_new_sampler():
    watchers = LiveWatchers(lambda *a: None, clock=Clock())
    first, second = Sinks(), Sinks()
    watchers.watch("a", False, first)  # no watcher: nothing attached
    assert first.sinks == [] and not watchers.attached
    watchers.watch("a", True, first)
    watchers.watch("b", True, first)
    assert first.sinks == [watchers.on_sample] and watchers.attached
    watchers.watch("b", True, second)
    assert first.sinks == [] and second.sinks == [watchers.on_sample]
    watchers.watch("a", False, second)
    watchers.watch("nobody", False, second)
    assert second.sinks == [watchers.on_sample]
    watchers.watch("b", False, second)
    assert second.sinks == [] and not watchers.attached


def test_a_tick_pushes_to_each_watcher_counts_and_detaches_when_none_is_left():
    sent = []
    clock = Clock()
    watchers = LiveWatchers(lambda event, data, sid: sent.append((event, sid, data)), clock=clock, ttl_s=5.0)
    sampler = Sinks()
    probes = fake_probes()
    watchers.watch("a", True, sampler)
    watchers.watch("b", True, sampler)
    snapshot = probes.snapshot()
    watchers.on_sample(snapshot)
    assert [(e, sid) for e, sid, _ in sent] == [(EVENT, "a"), (EVENT, "b")]
    assert sent[0][2] == {**snapshot.to_dict(), "prompt_id": None, "node": None}
    assert watchers.status() == {"n_watchers": 2, "sink_attached": True, "pushed": 2}
    clock.now += 6.0
    watchers.on_sample(snapshot)
    assert len(sent) == 2 and sampler.sinks == []
    assert watchers.status() == {"n_watchers": 0, "sink_attached": False, "pushed": 2}


def test_a_detach_keeps_a_sink_that_a_new_watch_needs():
    watchers = LiveWatchers(lambda *a: None, clock=Clock())
    sampler = Sinks()
    watchers.watch("a", True, sampler)
    watchers._detach()  # a tick raced with the watch: someone still watches
    assert sampler.sinks == [watchers.on_sample]


class Recorder:
    def __init__(self, node=None, prompt_id=None, fails=False):
        self.node, self.active_prompt_id, self.fails = node, prompt_id, fails

    def executing_node(self):
        if self.fails:
            raise AttributeError("no executing_node")
        return self.node


def test_the_executing_node_comes_from_the_recorder_else_the_framework():
    assert executing(None, lambda: "9") is None
    assert executing(Recorder(("7", "KSampler", "title"), "p")) == {
        "node_id": "7",
        "class_type": "KSampler",
        "title": "title",
    }
    assert executing(Recorder(None, "p"), lambda: 12) == {"node_id": "12", "class_type": None, "title": None}
    assert executing(Recorder(None, "p"), lambda: None) is None
    assert executing(Recorder(None, None), lambda: "12") is None  # no prompt runs: no node
    assert executing(Recorder(None, "p")) is None  # without a framework answer
    assert executing(Recorder(fails=True, prompt_id="p"), lambda: "3") is None


def test_a_payload_names_the_prompt_and_node_of_the_moment():
    snapshot = fake_probes().snapshot()
    data = sample_payload(snapshot, Recorder(None, "p5"), lambda: "4")
    assert data == {
        **snapshot.to_dict(),
        "prompt_id": "p5",
        "node": {"node_id": "4", "class_type": None, "title": None},
    }
    assert sample_payload(snapshot)["prompt_id"] is None


def test_the_framework_node_reaches_the_push():
    sent = []
    watchers = LiveWatchers(lambda e, d, sid: sent.append(d), clock=Clock(), last_node_id=lambda: "8")
    watchers.watch("a", True, Sinks(), Recorder(None, "p1"))
    watchers.on_sample(fake_probes().snapshot())
    assert sent[0]["node"]["node_id"] == "8" and sent[0]["prompt_id"] == "p1"

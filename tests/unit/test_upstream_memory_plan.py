"""The watch plan and the memory fields of a passthrough monitor on their own: which nodes are
watched (each once, bounded, a failing walk leaving its monitor out), measured nodes in the order
they ran, and the reasons when there is no picture."""

from __future__ import annotations

from monitors.engine import upstream_memory as module
from monitors.engine.upstream_memory import (
    NO_RECORDER_REASON,
    step_memory,
    unknown,
    upstream_memory,
    watch_plan,
    watched_nodes,
)
from tests.unit.test_upstream_memory import _result


def test_a_walk_gives_each_upstream_node_once_in_its_order_and_ids_as_text():
    prompt = {
        5: {"class_type": "Mon"},
        "6": {"class_type": "Other"},
        "7": "not a node",
        "8": {"class_type": "Mon"},
    }
    asked = []

    def walk(graph, node_id):
        asked.append(node_id)
        assert graph is prompt
        return ["3", "1", "3", "2", "1"]

    plan = watch_plan(prompt, {"Mon": walk})
    assert plan == {"5": ("3", "1", "2"), "8": ("3", "1", "2")}
    assert asked == ["5", "8"]


def test_a_walk_that_trips_leaves_its_monitor_out_only():
    def broken(graph, node_id):
        raise KeyError("odd graph")

    prompt = {"1": {"class_type": "Broken"}, "2": {"class_type": "Fine"}}
    assert watch_plan(prompt, {"Broken": broken, "Fine": lambda g, n: ["9"]}) == {"2": ("9",)}
    assert watch_plan(prompt, None) == {} and watch_plan(["1"], {"Fine": lambda g, n: []}) == {}


def test_the_watched_nodes_of_a_monitor_are_bounded(monkeypatch):
    monkeypatch.setattr(module, "MAX_WATCHED_PER_MONITOR", 2)
    assert watch_plan({"1": {"class_type": "Mon"}}, {"Mon": lambda g, n: ["a", "b", "c"]}) == {
        "1": ("a", "b")
    }
    assert module.MAX_WATCHED_PER_MONITOR == 2


def test_watched_nodes_are_the_union_of_the_plan():
    assert watched_nodes({"10": ("1", "2"), "11": ("2", "3"), "12": ()}) == frozenset({"1", "2", "3"})
    assert watched_nodes({}) == frozenset()


def test_unknown_lists_every_upstream_node_as_not_run():
    assert unknown("why", iter(["2", "3"])) == {
        "memory": None,
        "memory_unknown_reason": "why",
        "memory_scope": {
            "upstream_node_ids": ["2", "3"],
            "measured_node_ids": [],
            "not_run_node_ids": ["2", "3"],
        },
    }
    assert unknown("why")["memory_scope"]["upstream_node_ids"] == []


def test_measured_nodes_are_listed_in_the_order_they_ran():
    late = _result(5.0, 1.0, (100, 200), (300, 5.5), (4, 5.1))
    early = _result(1.0, 1.0, (100, 200), (300, 1.5), (4, 1.1))
    result = upstream_memory(iter(["a", "b", "c"]), {"a": late, "b": None, "c": early})
    assert result["memory_scope"] == {
        "upstream_node_ids": ["a", "b", "c"],
        "measured_node_ids": ["c", "a"],
        "not_run_node_ids": ["b"],
    }
    assert result["memory"] is not None and result["memory_unknown_reason"] is None


class Recorder:
    def __init__(self, fails=False):
        self.fails, self.asked = fails, []

    def upstream_memory(self, node_id):
        self.asked.append(node_id)
        if self.fails:
            raise RuntimeError("span gone")
        return {"memory": "picture"}


def test_step_memory_asks_the_recorder_and_survives_its_failure():
    assert step_memory(None, "5") == unknown(NO_RECORDER_REASON)
    recorder = Recorder()
    assert step_memory(recorder, "5") == {"memory": "picture"} and recorder.asked == ["5"]
    assert step_memory(Recorder(fails=True), "5") == unknown("memory picture failed: RuntimeError: span gone")


def test_a_monitor_watches_at_most_64_nodes():
    upstream = [str(i) for i in range(65)]
    plan = watch_plan({"m": {"class_type": "Mon"}}, {"Mon": lambda g, n: upstream})
    assert plan == {"m": tuple(upstream[:64])}

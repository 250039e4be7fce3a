"""Phases (monitors/profiler_step/phases.py): exact per-name totals of timed rows, from the
profiling API's accumulator or from a report's node rows."""

from __future__ import annotations

import pytest

from monitors.profiler_step.phases import (
    PhaseAccumulator,
    node_gpu_above_start,
    phases_from_nodes,
    profiling_step,
    report_phases,
)


def by_stage(rows):
    return {r["stage"]: r for r in rows}


def test_calls_add_up_exactly_with_min_max_mean_share_and_the_shallowest_depth():
    acc = PhaseAccumulator()
    acc.add("decode", 2.0, peak_rss_bytes=100, rss_change_bytes=10, peak_gpu_allocated_bytes=7, depth=2)
    acc.add(
        "decode",
        1.0,
        peak_rss_bytes=300,
        rss_change_bytes=-4,
        peak_gpu_allocated_bytes=5,
        depth=1,
        error=True,
        peak_rss_above_start_bytes=40,
    )
    acc.add("decode", 4.0, peak_rss_bytes=200, depth=3, peak_rss_above_start_bytes=30)
    (row,) = acc.rows(run_duration_s=14.0)
    assert row == {
        "stage": "decode",
        "n_calls": 3,
        "n_errors": 1,
        "total_s": 7.0,
        "mean_s": 7.0 / 3,
        "min_s": 1.0,
        "max_s": 4.0,
        "share_pct": 50.0,
        "peak_rss_bytes": 300,
        "peak_rss_above_start_bytes": 40,
        "rss_change_bytes": 6,
        "peak_gpu_allocated_bytes": 7,
        "depth": 1,
    }


def test_the_first_call_sets_min_and_max_and_a_later_shorter_one_lowers_min_only():
    acc = PhaseAccumulator()
    acc.add("a", 3.0)
    acc.add("a", 5.0)
    acc.add("a", 4.0)
    (row,) = acc.rows()
    assert (row["min_s"], row["max_s"]) == (3.0, 5.0)


def test_a_phase_without_any_duration_has_no_times_and_no_share():
    acc = PhaseAccumulator()
    acc.add("untimed", None, peak_rss_bytes=5)
    (row,) = acc.rows(run_duration_s=10.0)
    assert row["n_calls"] == 1
    assert row["total_s"] is None and row["mean_s"] is None and row["share_pct"] is None
    assert row["min_s"] is None and row["max_s"] is None
    assert row["rss_change_bytes"] is None and row["peak_gpu_allocated_bytes"] is None
    assert row["depth"] == 0 and row["n_errors"] == 0


def test_no_share_without_a_run_duration():
    acc = PhaseAccumulator()
    acc.add("a", 1.0)
    assert acc.rows()[0]["share_pct"] is None
    assert acc.rows(run_duration_s=0.0)[0]["share_pct"] is None


def test_an_rss_change_of_zero_is_counted_not_unknown():
    acc = PhaseAccumulator()
    acc.add("a", 1.0, rss_change_bytes=0)
    assert acc.rows()[0]["rss_change_bytes"] == 0


def test_rows_are_slowest_first_and_untimed_last():
    acc = PhaseAccumulator()
    acc.add("fast", 1.0)
    acc.add("untimed", None)
    acc.add("slow", 3.0)
    acc.add("middle", 2.0)
    assert [r["stage"] for r in acc.rows()] == ["slow", "middle", "fast", "untimed"]


def test_timed_totals_merge_with_recorded_calls():
    acc = PhaseAccumulator()
    acc.add("step", 2.0, depth=2)
    acc.add_timed("step", n_calls=4, n_errors=1, total_s=6.0, min_s=0.5, max_s=3.0, depth=1)
    (row,) = acc.rows(run_duration_s=16.0)
    assert (row["n_calls"], row["n_errors"], row["total_s"]) == (5, 1, 8.0)
    assert (row["min_s"], row["max_s"], row["mean_s"], row["share_pct"]) == (0.5, 3.0, 1.6, 50.0)
    assert row["depth"] == 1


def test_timed_totals_alone_and_not_lowering_what_is_known():
    acc = PhaseAccumulator()
    acc.add_timed("t", n_calls=2, n_errors=0, total_s=3.0, min_s=1.0, max_s=2.0, depth=2)
    acc.add_timed("t", n_calls=1, n_errors=0, total_s=4.0, min_s=4.0, max_s=4.0, depth=3)
    (row,) = acc.rows()
    assert (row["n_calls"], row["total_s"], row["min_s"], row["max_s"], row["depth"]) == (3, 7.0, 1.0, 4.0, 2)
    acc.add("t", 0.5, depth=5)
    (row,) = acc.rows()
    assert (row["min_s"], row["max_s"], row["depth"]) == (0.5, 4.0, 2)


def test_node_gpu_above_start_is_the_highest_device_figure():
    node = {
        "gpu_peaks": [
            {"peak_allocated_above_start_bytes": 5},
            "not a mapping",
            {"peak_allocated_above_start_bytes": "9"},
            {"peak_allocated_above_start_bytes": 12.5},
            {"other": 1},
        ]
    }
    assert node_gpu_above_start(node) == 12.5
    assert node_gpu_above_start({"gpu_peaks": [{"other": 1}]}) is None
    assert node_gpu_above_start({"gpu_peaks": None}) is None
    assert node_gpu_above_start({}) is None


def test_phases_from_nodes_group_by_class_skip_cached_and_count_errors():
    nodes = [
        {
            "node_id": "1",
            "class_type": "KSampler",
            "duration_s": 3.0,
            "status": "success",
            "peak_rss_bytes": 10,
            "rss_change_bytes": 2,
            "peak_rss_above_start_bytes": 4,
            "gpu_peaks": [{"device": "cuda:0", "peak_allocated_bytes": 70}],
        },
        {"node_id": "2", "class_type": "KSampler", "duration_s": 1.0, "status": "error"},
        {"node_id": "3", "class_type": "KSampler", "duration_s": 1.0, "status": "interrupted"},
        {"node_id": "4", "class_type": "KSampler", "duration_s": 9.0, "cached": True},
        {"node_id": "5", "duration_s": "slow"},
        "not a node",
    ]
    rows = by_stage(phases_from_nodes(nodes, run_duration_s=10.0))
    assert set(rows) == {"KSampler", "node 5"}
    sampler = rows["KSampler"]
    assert (sampler["n_calls"], sampler["n_errors"], sampler["total_s"], sampler["share_pct"]) == (
        3,
        2,
        5.0,
        50.0,
    )
    assert (sampler["peak_rss_bytes"], sampler["rss_change_bytes"]) == (10, 2)
    assert (sampler["peak_rss_above_start_bytes"], sampler["peak_gpu_allocated_bytes"]) == (4, 70)
    assert sampler["depth"] == 0
    assert rows["node 5"]["total_s"] is None and rows["node 5"]["n_calls"] == 1


def test_profiling_step_is_the_first_profiling_kind_step():
    first = {"kind": "profiling", "node_id": "a"}
    report = {"steps": ["junk", {"kind": "lora"}, first, {"kind": "profiling", "node_id": "b"}]}
    assert profiling_step(report) is first
    assert profiling_step({"steps": [{"kind": "lora"}]}) is None
    assert profiling_step({"steps": None}) is None
    assert profiling_step({}) is None


def test_report_phases_prefer_the_profiling_steps_own_phases_as_copies():
    phases = [{"stage": "denoise", "total_s": 2.0}]
    report = {
        "steps": [{"kind": "profiling", "details": {"phases": phases}}],
        "nodes": [{"class_type": "KSampler", "duration_s": 1.0}],
    }
    got = report_phases(report)
    assert got == phases and got[0] is not phases[0]


@pytest.mark.parametrize(
    "details",
    [
        {"phases": [{"total_s": 2.0}]},  # a row without its stage
        {"phases": ["denoise"]},
        {"phases": {"stage": "denoise"}},  # not a list
        {},
        None,
    ],
)
def test_report_phases_fall_back_to_node_classes(details):
    report = {
        "steps": [{"kind": "profiling", "details": details}],
        "nodes": [{"class_type": "KSampler", "duration_s": 1.0}],
        "duration_s": 4.0,
    }
    (row,) = report_phases(report)
    assert (row["stage"], row["total_s"], row["share_pct"]) == ("KSampler", 1.0, 25.0)


def test_report_phases_of_a_report_without_steps_or_nodes():
    assert report_phases({}) == []
    assert report_phases({"nodes": None, "steps": None}) == []


def test_an_untimed_phase_sorts_after_a_phase_shorter_than_a_second():
    acc = PhaseAccumulator()
    acc.add("untimed", None)
    acc.add("quick", 0.5)
    assert [r["stage"] for r in acc.rows()] == ["quick", "untimed"]

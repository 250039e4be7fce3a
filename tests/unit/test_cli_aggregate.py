"""monitors.cli.aggregate on hand-made report dicts: what a malformed file is told, the figures
read from one report, the spread over ranks, and compare's verdicts at their boundaries."""

import json
import math

import pytest

from monitors.cli import aggregate as agg
from monitors.report import SCHEMA_VERSION


def node(node_id, stage, seconds, cached=False, gpu=(), above=None, title=None, status="executed"):
    return {
        "node_id": node_id,
        "class_type": stage,
        "title": title,
        "status": status,
        "cached": cached,
        "duration_s": seconds,
        "peak_rss_above_start_bytes": above,
        "gpu_peaks": [
            {"device": f"cuda:{i}", "peak_allocated_bytes": peak, "peak_allocated_above_start_bytes": add}
            for i, (peak, add) in enumerate(gpu)
        ],
    }


def run(run_id="a", duration=1.0, nodes=(), rank=None, rss=None, summary=None, phases=None, **extra):
    steps = []
    if summary is not None or phases is not None:
        steps.append({"kind": "profiling", "summary": summary or {}, "details": {"phases": phases or []}})
    system = {} if rank is None else {"rank": rank}
    return {
        "schema_version": SCHEMA_VERSION,
        "prompt_id": run_id,
        "status": "success",
        "started_unix_s": 10.0,
        "duration_s": duration,
        "nodes": list(nodes),
        "steps": steps,
        "span": {} if rss is None else {"peak_rss_bytes": rss},
        "system": system,
        **extra,
    }


def phase(stage, total_s, depth=0, above=None):
    return {"stage": stage, "total_s": total_s, "depth": depth, "peak_rss_above_start_bytes": above}


# -- loading ---------------------------------------------------------------------------------------


def write(tmp_path, data, name="r.json"):
    """A planted file, written as version 1 (the session's check of written reports reads only
    current-version files: these are incomplete on purpose)."""
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps({**data, "schema_version": 1}))
    return str(path)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("prompt_id", 7),
        ("status", None),
        ("started_unix_s", "10"),
        ("duration_s", "1.0"),
        ("nodes", {}),
        ("nodes", [1]),
        ("steps", "none"),
        ("steps", [[]]),
        ("system", []),
    ],
)
def test_a_field_of_the_wrong_type_is_named(tmp_path, key, value):
    path = write(tmp_path, {**run(), key: value})
    with pytest.raises(agg.ReportError) as info:
        agg.load_report(path)
    assert str(info.value) == f"malformed run report: {key!r} missing or of the wrong type"


@pytest.mark.parametrize(
    "key", ["prompt_id", "status", "started_unix_s", "duration_s", "nodes", "steps", "system"]
)
def test_a_missing_field_is_named(tmp_path, key):
    data = run()
    del data[key]
    with pytest.raises(agg.ReportError, match=f"'{key}' missing"):
        agg.load_report(write(tmp_path, data))


def test_a_well_formed_report_loads_with_its_figures(tmp_path):
    data = run(duration=None, nodes=[node("1", "A", 0.5)])
    data["started_unix_s"] = 10  # an int time is a time
    loaded = agg.load_report(write(tmp_path, data))
    assert loaded == {**data, "schema_version": SCHEMA_VERSION}  # upgraded from version 1
    assert agg.load_reports([write(tmp_path, data, "x.json"), str(tmp_path / "none.json")]) == (
        [(str(tmp_path / "x.json"), loaded)],
        [{"path": str(tmp_path / "none.json"), "reason": "cannot read: No such file or directory"}],
    )


def test_a_file_that_is_not_utf8_is_not_json(tmp_path):
    path = tmp_path / "bin.json"
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(agg.ReportError, match="^not valid JSON: "):
        agg.load_report(str(path))


# -- one report's figures ---------------------------------------------------------------------------


def test_peak_gpu_is_the_highest_over_nodes_and_the_profiling_summary():
    nodes = [node("1", "A", 1.0, gpu=[(100, 1), (300, 2)]), node("2", "B", 1.0, gpu=[(200, 3)])]
    assert agg.peak_gpu(run(nodes=nodes)) == 300
    assert agg.peak_gpu(run(nodes=nodes, summary={"peak_gpu_allocated_bytes": 400})) == 400
    assert agg.peak_gpu(run(nodes=nodes, summary={"peak_gpu_allocated_bytes": 250})) == 300
    assert agg.peak_gpu(run(nodes=[node("1", "A", 1.0)], summary={"peak_gpu_allocated_bytes": None})) is None


def test_run_figures_keep_numbers_only():
    summary = {"steps_per_s": 2.5, "blocks_per_s": True, "frames_per_s": "fast"}
    figures = agg.run_figures(run(duration=3.0, rss=1000, summary=summary))
    assert figures == {
        "duration_s": 3.0,
        "peak_rss_bytes": 1000,
        "peak_gpu_allocated_bytes": None,
        "steps_per_s": 2.5,
        "blocks_per_s": None,
        "frames_per_s": None,
    }
    assert agg.run_figures(run(duration=True))["duration_s"] is None


def test_rank_is_the_systems_int_rank_else_the_position():
    assert agg.rank_of(run(rank=3), 0) == 3
    assert agg.rank_of(run(rank=0), 5) == 0
    assert agg.rank_of(run(rank=True), 5) == 5
    assert agg.rank_of(run(rank="1"), 5) == 5
    assert agg.rank_of(run(), 2) == 2


def test_top_level_phases_are_depth_0_or_unknown_else_all():
    phases = [{"depth": 0}, {"depth": 1}, {"depth": None}, {}]
    assert agg.top_level(phases) == [{"depth": 0}, {"depth": None}, {}]
    nested = [{"depth": 1}, {"depth": 2}]
    assert agg.top_level(nested) == nested


def test_spread_of_one_and_of_several_values():
    assert agg.spread([2.0]) == {"n": 1, "min": 2.0, "max": 2.0, "mean": 2.0, "std": 0.0}
    s = agg.spread([1.0, 2.0, 6.0])
    assert (s["n"], s["min"], s["max"], s["mean"]) == (3, 1.0, 6.0, 3.0)
    assert s["std"] == pytest.approx(math.sqrt(14 / 3))


# -- aggregate --------------------------------------------------------------------------------------


def test_aggregate_rows_stats_and_slowest():
    r0 = run("a", 2.0, rank=1, rss=10, phases=[phase("load", 1.0), phase("step", 0.5, depth=1)])
    r0["system"]["host"] = "h0"
    r1 = run("b", 6.0, rank=0, rss=30, phases=[phase("load", 3.0), phase("step", 4.0, depth=1)])
    r2 = run("c", 4.0, rss=20, phases=[phase("load", 2.0)])
    result = agg.aggregate([("p0", r0), ("p1", r1), ("p2", r2)], [{"path": "x", "reason": "y"}])
    assert result["kind"] == "pipeline_monitor.aggregate" and result["version"] == 1
    assert result["schema_version"] == SCHEMA_VERSION and result["n_reports"] == 3
    assert result["skipped"] == [{"path": "x", "reason": "y"}]
    d = result["metrics"]["duration_s"]
    assert (d["n"], d["min"], d["max"], d["mean"], d["min_rank"], d["max_rank"]) == (3, 2.0, 6.0, 4.0, 1, 0)
    rows = result["ranks"]
    assert [r["rank"] for r in rows] == [1, 0, 2]  # the third has no rank: its position
    assert rows[0]["host"] == "h0" and rows[0]["run_id"] == "a" and rows[0]["path"] == "p0"
    assert rows[0]["status"] == "success"
    assert [r["duration_vs_mean_pct"] for r in rows] == [-50.0, 50.0, 0.0]
    # the slowest stage of a rank is top-level: step (4 s, nested) is not rank 0's slowest
    assert [(r["slowest_stage"], r["slowest_stage_s"]) for r in rows] == [
        ("load", 1.0),
        ("load", 3.0),
        ("load", 2.0),
    ]
    assert rows[1]["stages_s"] == {"load": 3.0, "step": 4.0}
    load, step = result["stages"]["load"], result["stages"]["step"]
    assert load["n_ranks"] == 3 and (load["min_s"], load["max_s"], load["mean_s"]) == (1.0, 3.0, 2.0)
    assert load["std_s"] == pytest.approx(math.sqrt(2 / 3))
    assert load["imbalance_pct"] == 100.0 and load["slowest_rank"] == 0 and load["top_level"]
    assert step["n_ranks"] == 2 and not step["top_level"] and step["slowest_rank"] == 0
    assert result["slowest_rank"] == {
        "rank": 0,
        "path": "p1",
        "run_id": "b",
        "duration_s": 6.0,
        "duration_vs_mean_pct": 50.0,
    }
    assert result["slowest_stage"] == {"stage": "load", "rank": 0, "total_s": 3.0}


def test_aggregate_without_durations_or_top_level_stages():
    r0 = run("a", None, phases=[phase("inner", 2.0, depth=1), phase("other", 0.0, depth=2)])
    r1 = run("b", None, phases=[phase("inner", 1.0, depth=1), phase("other", 0.0, depth=1)])
    result = agg.aggregate([("p0", r0), ("p1", r1)])
    assert result["skipped"] == [] and "duration_s" not in result["metrics"]
    assert [r["duration_vs_mean_pct"] for r in result["ranks"]] == [None, None]
    assert result["slowest_rank"] is None
    # no top-level stage anywhere: every stage is a candidate
    assert result["slowest_stage"] == {"stage": "inner", "rank": 0, "total_s": 2.0}
    assert result["stages"]["other"]["imbalance_pct"] is None  # a mean of 0 s: no ratio
    assert result["ranks"][0]["slowest_stage"] == "inner"


def test_the_slowest_stage_is_the_one_with_the_slowest_rank_not_the_highest_minimum():
    # load: 3.0 s on rank 0 but 0.5 s on rank 1; step: 2.0 s on both (the higher minimum)
    r0 = run("a", 4.0, rank=0, phases=[phase("load", 3.0), phase("step", 2.0)])
    r1 = run("b", 4.0, rank=1, phases=[phase("load", 0.5), phase("step", 2.0)])
    result = agg.aggregate([("p0", r0), ("p1", r1)])
    assert result["slowest_stage"] == {"stage": "load", "rank": 0, "total_s": 3.0}


def test_a_history_without_numbers_gives_no_limit():
    assert agg.history_limit([None, "x", True], 10, 0.0) == {
        "limit": None,
        "n_runs": 0,
        "median": None,
        "spread": None,
    }


def test_aggregate_of_nothing_and_of_zero_durations():
    empty = agg.aggregate([])
    assert empty["n_reports"] == 0 and empty["schema_version"] == []
    assert empty["slowest_rank"] is None and empty["slowest_stage"] is None
    zero = agg.aggregate([("p", run("a", 0.0)), ("q", run("b", 0.0))])
    assert [r["duration_vs_mean_pct"] for r in zero["ranks"]] == [None, None]
    assert zero["ranks"][0]["slowest_stage"] is None and zero["ranks"][0]["slowest_stage_s"] is None


def test_aggregate_of_mixed_versions_lists_them():
    old = {**run("a", 1.0), "schema_version": 2}
    assert agg.aggregate([("p", old), ("q", run("b", 1.0))])["schema_version"] == [2, SCHEMA_VERSION]


# -- compare ----------------------------------------------------------------------------------------


def test_a_figure_missing_on_either_side_has_no_delta_and_is_no_regression():
    for a, b, read in ((None, 1.0, (None, 1.0)), (1.0, "x", (1.0, None))):  # "x": not a number, read as None
        row = agg.compare(run("a", a), run("b", b))["run"]["duration_s"]
        assert (row["a"], row["b"]) == read
        assert (row["delta"], row["delta_pct"], row["regression"]) == (None, None, False)


def test_deltas_and_percentages_of_the_run_duration():
    row = agg.compare(run("a", 2.0), run("b", 3.0))["run"]["duration_s"]
    assert (row["delta"], row["delta_pct"]) == (1.0, 50.0)
    assert agg.compare(run("a", 4.0), run("b", 2.0))["run"]["duration_s"]["delta_pct"] == -50.0
    assert agg.compare(run("a", 0.0), run("b", 0.0))["run"]["duration_s"]["delta_pct"] == 0.0
    assert agg.compare(run("a", 0), run("b", -1.0))["run"]["duration_s"]["delta_pct"] == 0.0
    from_zero = agg.compare(run("a", 0.0), run("b", 2.0), min_seconds=1.0)["run"]["duration_s"]
    assert from_zero["delta_pct"] is None and from_zero["regression"]  # infinitely worse


def test_a_throughput_drop_by_exactly_the_threshold_is_no_regression():
    a, b = run("a", 1.0, summary={"steps_per_s": 3.0}), run("b", 1.0, summary={"steps_per_s": 2.0})
    assert agg.compare(a, b, threshold_pct=49)["run"]["steps_per_s"]["regression"] is True  # 3 is 50 % above 2
    assert agg.compare(a, b, threshold_pct=50)["run"]["steps_per_s"]["regression"] is False  # not more
    assert agg.compare(a, a, threshold_pct=0)["run"]["steps_per_s"]["regression"] is False


def test_history_limit_takes_the_highest_of_its_three_bounds():
    spread = agg.history_limit([1.0, 2.0, 3.0], 10, 0.0)
    assert spread == {"limit": 5.0, "n_runs": 3, "median": 2.0, "spread": 2.0}  # max + spread
    assert agg.history_limit([10.0, 10.0], 10, 0.5)["limit"] == pytest.approx(11.0)  # median * 1.1
    assert agg.history_limit([10.0, 10.0], 10, 3.0)["limit"] == 13.0  # median + min_abs
    assert agg.history_limit([1.0, True, "x", None, 3.0], 0, 0.0)["n_runs"] == 2


def test_a_run_is_flagged_only_above_the_history_limit():
    def verdict(b_s, history=(1.0,)):
        a, *rest = [run(f"h{i}", s) for i, s in enumerate(history)] or [run("h", None)]
        return agg.compare(a, run("b", b_s), threshold_pct=10, min_seconds=0.0, history=rest)["run"]["duration_s"]

    at = verdict(1.1)
    assert (at["regression"], at["limit"], at["n_runs"]) == (False, pytest.approx(1.1), 1)  # at the limit
    assert verdict(1.2)["regression"] is True
    assert verdict(1.05)["regression"] is False
    assert verdict(None)["regression"] is False
    nothing = verdict(5.0, history=())
    assert (nothing["regression"], nothing["limit"], nothing["n_runs"]) == (False, None, 0)


def test_compare_run_figures_and_throughput():
    a = run("a", 10.0, rss=1000, summary={"steps_per_s": 10.0, "frames_per_s": 4.0})
    b = run("b", 10.5, rss=3000, summary={"steps_per_s": 8.0, "frames_per_s": 4.2})
    result = agg.compare(a, b, threshold_pct=10, min_seconds=0.1, min_bytes=500)
    r = result["run"]
    assert r["duration_s"]["delta_pct"] == pytest.approx(5.0) and not r["duration_s"]["regression"]
    assert r["peak_rss_bytes"]["regression"] and r["peak_rss_bytes"]["limit"] == 1500  # A + min_bytes
    # a drop measured against B: 10 -> 8 steps/s is A 25 % faster
    assert r["steps_per_s"] == {"a": 10.0, "b": 8.0, "delta_pct": pytest.approx(-25.0), "regression": True}
    assert (
        r["frames_per_s"]["delta_pct"] == pytest.approx(100 * 0.2 / 4.2)
        and not r["frames_per_s"]["regression"]
    )
    assert r["blocks_per_s"] == {"a": None, "b": None, "delta_pct": None, "regression": False}
    assert result["regressions"] == ["run peak_rss_bytes", "run steps_per_s"]
    assert (result["threshold_pct"], result["min_seconds"], result["min_bytes"]) == (10, 0.1, 500)
    assert result["a"] == {"run_id": "a", "status": "success"} and result["b"]["run_id"] == "b"
    assert result["kind"] == "pipeline_monitor.compare" and result["version"] == 1


def test_compare_throughput_needs_more_than_the_threshold():
    a = run("a", 1.0, summary={"steps_per_s": 11.0})
    b = run("b", 1.0, summary={"steps_per_s": 10.0})  # A exactly 10 % faster: not more than 10 %
    assert not agg.compare(a, b, threshold_pct=10)["run"]["steps_per_s"]["regression"]
    slower = run("b", 1.0, summary={"steps_per_s": 9.9})
    assert agg.compare(a, slower, threshold_pct=10)["run"]["steps_per_s"]["regression"]


def test_compare_stages_time_and_added_memory():
    a = run("a", 1.0, phases=[phase("load", 1.0, above=100), phase("gone", 1.0)])
    b = run("b", 1.0, phases=[phase("load", 1.0, above=700), phase("new", 0.5)])
    stages = {s["stage"]: s for s in agg.compare(a, b, min_bytes=500)["stages"]}
    assert list(stages) == ["load", "gone", "new"]
    assert (
        stages["load"]["only_in"] is None
        and stages["gone"]["only_in"] == "a"
        and stages["new"]["only_in"] == "b"
    )
    load = stages["load"]["peak_rss_above_start_bytes"]
    assert load["regression"] and load["limit"] == 600 and load["n_runs"] == 1
    assert not stages["load"]["total_s"]["regression"]
    assert stages["new"]["total_s"]["limit"] is None  # no earlier run had it
    result = agg.compare(a, b, min_bytes=500)
    assert result["regressions"] == ["stage load peak_rss_above_start_bytes"]


def test_compare_nodes_rows_and_cached_runs():
    a = run("a", 1.0, nodes=[node(1, "Load", 1.0, title="A title", gpu=[(9, 100)]), node("2", "Gone", 1.0)])
    b = run(
        "b",
        1.0,
        nodes=[
            node("1", "Load", 1.0, title=None, gpu=[(9, 900)], above=900),
            node("3", "Save", 5.0, cached=True),
        ],
    )
    result = agg.compare(a, b, min_seconds=0.1, min_bytes=500)
    nodes = {n["node_id"]: n for n in result["nodes"]}
    assert list(nodes) == ["1", "2", "3"]  # node ids compared as text
    load = nodes["1"]
    assert (load["class_type"], load["title"], load["only_in"], load["cached"]) == (
        "Load",
        "A title",
        None,
        [False, False],
    )
    gpu = load["peak_gpu_allocated_above_start_bytes"]
    assert (gpu["a"], gpu["b"], gpu["limit"], gpu["regression"]) == (100, 900, 600, True)
    assert load["peak_rss_above_start_bytes"]["a"] is None and load["peak_rss_above_start_bytes"]["b"] == 900
    assert nodes["2"]["only_in"] == "a" and nodes["2"]["duration_s"]["b"] is None
    save = nodes["3"]
    assert save["only_in"] == "b" and save["cached"] == [None, True]
    assert "limit" not in save["duration_s"] and not save["duration_s"]["regression"]  # cached: not judged
    assert result["regressions"] == ["node #1 Load peak_gpu_allocated_above_start_bytes"]


def test_compare_history_leaves_out_a_b_and_cached_runs():
    def loader(run_id, seconds, cached=False):
        return run(run_id, 1.0, nodes=[node("1", "Load", seconds, cached=cached)])

    a, b = loader("a", 1.0), loader("b", 1.9)
    history = [loader("h1", 1.2), loader("h2", 1.4, cached=True), loader("a", 50.0), loader("b", 50.0)]
    result = agg.compare(a, b, threshold_pct=10, min_seconds=0.0, history=history)
    assert result["n_history_runs"] == 3  # A, h1 and h2; the copies of A and B are left out
    d = next(n for n in result["nodes"] if n["node_id"] == "1")["duration_s"]
    assert d["n_runs"] == 2 and d["limit"] == pytest.approx(1.2 + 0.2)  # h2 ran cached: not a run
    assert d["regression"] and result["run"]["duration_s"]["n_runs"] == 3


def test_compare_defaults_are_10_pct_50_ms_and_64_mib():
    result = agg.compare(run("a", 1.0), run("b", 1.0))
    assert (result["threshold_pct"], result["min_seconds"], result["min_bytes"]) == (10.0, 0.05, 64 * 1024**2)
    assert result["n_history_runs"] == 1 and result["regressions"] == []


def test_a_ranks_slowest_stage_among_several_top_level_ones():
    r = run("a", 1.0, phases=[phase("a", 0.5), phase("b", 0.75), phase("c", None), phase("d", 0.1)])
    (row,) = agg.aggregate([("p", r)])["ranks"]
    assert (row["slowest_stage"], row["slowest_stage_s"]) == ("b", 0.75)  # an untimed stage is not slower


def test_any_rise_from_zero_is_infinitely_worse():
    d = agg.compare(run("a", 0.0), run("b", 0.5), threshold_pct=10, min_seconds=0.0)["run"]["duration_s"]
    assert d["delta_pct"] is None and d["regression"] is True


def test_a_throughput_drop_needs_no_absolute_minimum():
    a = run("a", 1.0, summary={"steps_per_s": 2.0})
    b = run("b", 1.0, summary={"steps_per_s": 1.0})  # one step a second fewer: half the rate
    assert agg.compare(a, b, threshold_pct=10)["run"]["steps_per_s"]["regression"] is True


def test_the_history_rule_rests_on_the_median_not_the_mean():
    """A skewed history (median 10, mean 10.07): the relative threshold is put on the median."""
    verdict = agg.history_limit([10.0, 10.2, 10.0], 10.0, 0.05)
    assert verdict["median"] == 10.0 and verdict["limit"] == pytest.approx(11.0)

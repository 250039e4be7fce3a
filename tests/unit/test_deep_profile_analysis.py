"""Per-node figures of the deep profile (monitors/deep_profile/analysis.py) from hand-made
events: exact unit conversions, the busy share's interval union, the ranking of top ops, which
events pair with which kernels when ids or links are missing, and zero or tiny wall times."""

from __future__ import annotations

import types

from monitors.deep_profile import analysis
from monitors.deep_profile.analysis import NodeTotals, busy_us, node_row, node_rows, top_ops, totals
from monitors.deep_profile.session import range_name

from .test_deep_profile import cuda_prompt, ev


def bare(name, start, end, parent=None, device="CPU", **ids):
    """An event with only the ids given (torch's events may lack `id` or `linked_correlation_id`)."""
    return types.SimpleNamespace(
        name=name,
        time_range=types.SimpleNamespace(start=start, end=end),
        device_type=device,
        cpu_parent=parent,
        **ids,
    )


def test_seconds_are_exact_and_top_ops_list_five():
    node = ev(range_name("1", "A"), 0, 200, eid=1)
    ops = [ev(f"op{i}", 10 * i, 10 * i + 1 + i, node, eid=10 + i) for i in range(6)]
    (row,) = node_rows(analysis.attribute([node, *ops], {node.name: ("1", "A")}), cuda=False)
    assert row["wall_s"] == 0.0002 and row["n_ops"] == 6
    assert len(row["top_ops"]) == 5 and row["top_ops"][0] == {
        "name": "op5",
        "n_calls": 1,
        "total_s": 6e-06,
        "host_s": 6e-06,
        "device_s": None,
        "share_pct": 100.0 * 6 / 21,
    }


def test_cuda_op_figures_exact_and_an_op_without_kernels_has_no_device_time():
    events, ranges = cuda_prompt()
    row = node_rows(analysis.attribute(events, ranges), cuda=True)[0]
    by_name = {op["name"]: op for op in row["top_ops"]}
    assert by_name["aten::mm"]["device_s"] == 0.0001 and by_name["aten::mm"]["host_s"] == 3e-05
    assert by_name["cudaDeviceSynchronize"]["device_s"] == 0.0
    assert row["n_ops"] == 4


def test_a_sync_nested_under_an_op_is_counted():
    node = ev(range_name("1", "A"), 0, 100, eid=1)
    copy = ev("aten::copy_", 10, 50, node, eid=2)
    memcpy = ev("cudaMemcpy", 20, 40, copy, eid=3)
    deeper = ev("cudaStreamSynchronize", 25, 30, memcpy, eid=4)
    (row,) = node_rows(analysis.attribute([node, copy, memcpy, deeper], {node.name: ("1", "A")}), cuda=True)
    assert row["n_syncs"] == 2 and row["n_ops"] == 1


def test_events_without_ids_or_links_pair_with_nothing():
    node = bare(range_name("1", "A"), 0, 100)  # no id
    op = bare("aten::mm", 10, 20, node, id=1)  # no linked_correlation_id: its own correlation
    unlinked_op = bare("aten::add", 30, 40, node)  # no id
    kernel = bare("k", 50, 60, device="CUDA")  # no link
    linked = bare("mm_kernel", 60, 70, device="CUDA", linked_correlation_id=1)
    (row,) = node_rows(
        analysis.attribute([node, op, unlinked_op, kernel, linked], {node.name: ("1", "A")}), cuda=True
    )
    assert row["device_time_s"] == 1e-05  # the linked kernel only
    assert {o["name"]: o["device_s"] for o in row["top_ops"]} == {"aten::mm": 1e-05, "aten::add": 0.0}


def test_busy_time_is_the_union_of_kernels_inside_the_windows():
    assert busy_us([(0, 10), (5, 15)], [(0, 100)]) == 15
    assert busy_us([(0, 20), (5, 10)], [(0, 100)]) == 20
    assert busy_us([(0, 5), (10, 20), (15, 30)], [(0, 100)]) == 25
    assert busy_us([(0, 5), (10, 30), (15, 20)], [(0, 100)]) == 25
    assert busy_us([(0, 10)], [(20, 30)]) == 0


def test_top_ops_ties_go_by_name():
    node = NodeTotals("1", "A", host_us=20.0)
    node.ops = {"b": [1, 10.0, 0.0], "a": [2, 10.0, 0.0]}
    assert [op["name"] for op in top_ops(node, by_device=False)] == ["a", "b"]


def test_tiny_and_zero_times():
    tiny = NodeTotals("1", "A", windows=[(0.0, 0.5)], host_us=0.5)
    tiny.ops = {"op": [1, 0.5, 0.0]}
    row = node_row(tiny, cuda=True)
    assert row["gpu_busy_pct"] == 0.0 and row["gpu_busy_unknown_reason"] is None
    assert node_row(tiny, cuda=False)["top_ops"][0]["share_pct"] == 100.0
    zero = node_row(NodeTotals("2", "B", windows=[(5.0, 5.0)]), cuda=True)
    assert zero["gpu_busy_pct"] is None and zero["gpu_busy_unknown_reason"] == "no wall time"


def test_rows_in_the_order_the_nodes_started():
    first, second = NodeTotals("1", "A", windows=[(0.0, 100.0)]), NodeTotals("2", "B", windows=[(10.0, 20.0)])
    assert [r["node_id"] for r in node_rows({"2": second, "1": first}, cuda=False)] == ["1", "2"]


def row(node_id, wall_s, busy):
    return {
        "node_id": node_id,
        "class_type": "A",
        "wall_s": wall_s,
        "gpu_busy_pct": busy,
        "host_op_time_s": 0.0,
    }


def test_totals_weigh_busy_shares_by_wall_time_and_name_the_slowest():
    rows = [row("1", 0.0, None), row("2", 2.0, 50.0), row("3", 1.0, 100.0)]
    summary = totals(rows, cuda=True)
    assert summary["gpu_busy_pct"] == 200.0 / 3 and summary["slowest_node"] == "#2 A"
    assert totals(rows, cuda=False)["gpu_busy_pct"] is None
    assert totals([row("1", 0.0, None), row("2", 0.5, None)], cuda=False)["slowest_node"] == "#2 A"

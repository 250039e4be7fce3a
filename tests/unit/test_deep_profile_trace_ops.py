"""The deep profile's ops file and its trace events (monitors/deep_profile/trace_ops.py) from
hand-made events: offsets and depths under a node's range, kernels by stream, the cap's order,
the file's pruning and reading, and the Chrome trace events' exact times."""

from __future__ import annotations

import json
import os
import types

from monitors.deep_profile import trace_ops
from monitors.deep_profile.session import range_name
from monitors.deep_profile.trace_ops import (
    DEVICE_TID_BASE,
    capped,
    collect,
    read_ops,
    trace_events,
    write_ops,
)


def event(name, start, end, parent=None, device="CPU", **extra):
    return types.SimpleNamespace(
        name=name,
        time_range=types.SimpleNamespace(start=start, end=end),
        device_type=device,
        cpu_parent=parent,
        **extra,
    )


def test_host_rows_are_offsets_and_depths_under_the_nodes_range():
    node = event(range_name("1", "A"), 100, 300, id=1)
    op = event("aten::conv", 110, 130, node, id=2)
    child = event("aten::mm", 115, 120, op, id=3, linked_correlation_id=0)
    grandchild = event("cudaLaunchKernel", 116, 117, child, id=4, linked_correlation_id=2)
    outside = event("aten::zeros", 400, 410, None, id=5)
    host, device = collect([node, op, child, grandchild, outside], {node.name: ("1", "A")})
    assert host == [
        ["1", "aten::conv", 10.0, 20.0, 1],
        ["1", "aten::mm", 15.0, 5.0, 2],
        ["1", "cudaLaunchKernel", 16.0, 1.0, 3],
    ]
    assert device == []


def test_kernels_pair_with_their_op_or_range_by_stream():
    node = event(range_name("1", "A"), 100, 300)  # no id
    op = event("aten::mm", 110, 130, node, id=1)  # no link: its own correlation
    no_id = event("aten::add", 140, 150, node)
    ranged = event(range_name("2", "B"), 500, 600, id=9)
    kernels = [
        event("k_op", 120, 125, device="CUDA", linked_correlation_id=1, device_resource_id=7, device_index=1),
        event(
            "k_index",
            126,
            128,
            device="CUDA",
            linked_correlation_id=1,
            device_resource_id=None,
            device_index=2,
        ),
        event(
            "k_none",
            129,
            130,
            device="CUDA",
            linked_correlation_id=1,
            device_resource_id=None,
            device_index=None,
        ),
        event("k_default", 131, 132, device="CUDA", linked_correlation_id=1),
        event("k_range", 510, 520, device="CUDA", linked_correlation_id=9, device_index=0),
        event("k_unlinked", 140, 141, device="CUDA"),
    ]
    ranges = {node.name: ("1", "A"), ranged.name: ("2", "B")}
    host, device = collect([node, op, no_id, ranged, *kernels], ranges)
    assert device == [
        ["1", "k_op", 20.0, 5.0, 7],
        ["1", "k_index", 26.0, 2.0, 2],
        ["1", "k_none", 29.0, 1.0, 0],
        ["1", "k_default", 31.0, 1.0, 0],
        ["2", "k_range", 10.0, 10.0, 0],
    ]


def test_the_cap_keeps_the_longest_in_node_then_start_order():
    host = [
        ["2", "h1", 5.0, 1.0, 1],
        ["1", "h2", 9.0, 7.0, 1],
        ["1", "h3", 1.0, 8.0, 1],
        ["1", "h0", 0.0, 0.5, 1],
    ]
    device = [["2", "d1", 3.0, 9.0, 0], ["1", "d2", 4.0, 5.0, 0], ["1", "d3", 2.0, 6.0, 0]]
    kept_host, kept_device, dropped = capped(host, device, 6)
    assert [r[1] for r in kept_host] == ["h3", "h2", "h1"] and dropped == 1
    assert [r[1] for r in kept_device] == ["d3", "d2", "d1"]
    assert capped(host, device, 7) == (host, device, 0)  # as they were


def test_the_ops_file_one_line_pruned_to_the_newest_and_read_back(tmp_path):
    reports = str(tmp_path)
    folder = tmp_path / trace_ops.DIR_NAME
    folder.mkdir()
    other = folder / "notes.txt"
    other.write_text("not an ops file")
    os.utime(other, (1, 1))
    for i in range(trace_ops.MAX_FILES + 1):
        path = write_ops(reports, f"p{i}", [["1", "op", 0.0, 1.0, 1]], [], 0)
        os.utime(path, (1000 + i, 1000 + i))
    names = sorted(os.listdir(folder))
    assert len(names) == 21 and "notes.txt" in names and "p0.ops.json" not in names
    text = (folder / "p20.ops.json").read_text()
    assert "\n" not in text.strip()
    data = read_ops(str(tmp_path / "p20.json"), "p20")
    assert data["version"] == 1 and data["host"] == [["1", "op", 0.0, 1.0, 1]]
    (folder / "x.ops.json").write_text(json.dumps({"format": "other"}))
    assert read_ops(str(tmp_path / "x.json"), "x") is None
    (folder / "y.ops.json").write_text(json.dumps(["not", "a", "dict"]))
    assert read_ops(str(tmp_path / "y.json"), "y") is None


def test_trace_events_exact_times_lanes_and_malformed_rows_skipped():
    ops = {
        "host": [
            ["1", "aten::mm", 10.12345, 5.55555, 1],
            ["1", "late", 990.0, 50.0, 2],
            ["1", "tiny", 0.0, 0.00051, 1],
            ["9", "no span", 0.0, 1.0, 1],
            ["1", "short"],
        ],
        "device": [
            ["1", "k1", 20.00044, 3.33333, 7],
            ["1", "k2", 30.0, 2.0, 3],
            ["9", "no span", 0.0, 1.0, 0],
            ["1"],
        ],
    }
    events = trace_events(ops, {"1": (2, 1000.0, 2000.0, "#1 A")}, pid=5)
    host = [e for e in events if e.get("cat") == "op"]
    assert [(e["name"], e["ts"], e["dur"], e["tid"], e["args"]) for e in host] == [
        ("aten::mm", 1010.123, 5.556, 2, {"node_id": "1", "depth": 1}),
        ("late", 1990.0, 10.0, 2, {"node_id": "1", "depth": 2}),
        ("tiny", 1000.0, 0.001, 2, {"node_id": "1", "depth": 1}),
    ]
    lanes = [(e["tid"], e["args"]["name"]) for e in events if e["ph"] == "M"]
    assert lanes == [(DEVICE_TID_BASE, "GPU stream 3"), (DEVICE_TID_BASE + 1, "GPU stream 7")]
    spans = [(e["tid"], e["ts"], e["dur"], e["name"]) for e in events if e.get("cat") == "node_kernels"]
    assert spans == [(DEVICE_TID_BASE, 1030.0, 2.0, "#1 A"), (DEVICE_TID_BASE + 1, 1020.0, 3.333, "#1 A")]
    kernels = [(e["name"], e["ts"], e["dur"]) for e in events if e.get("cat") == "kernel"]
    assert kernels == [("k2", 1030.0, 2.0), ("k1", 1020.0, 3.333)]

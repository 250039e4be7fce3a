"""Per-node memory is what the node added (issue 13): each row carries its peak above its own start
next to the process's absolute peak, and compare flags regressions on the node's own figure; for
available memory a span keeps the low point, not the maximum."""

import json

import jsonschema

from monitors.cli.aggregate import compare
from monitors.engine.node_rows import node_memory_above_start
from monitors.engine.recorder import RunRecorder
from monitors.engine.span import Span
from monitors.engine.store import RunStore
from monitors.probes.fake import GiB, fake_probes
from tests.unit.test_report_store import SCHEMA

MiB = 1024**2


def _run_two_nodes(tmp_path, baseline_bytes):
    """Node 1 raises RSS by 100 MiB (and keeps it) and allocates 800 MiB on the GPU, of which the
    allocator had 512 MiB cached already (reserved rises by 288 MiB only); node 2 only adds a
    10 MiB RSS spike on top."""
    probes = fake_probes("1 GPU")
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    probes.host.set_rss(baseline_bytes)
    probes.torch.allocate(0, 2 * GiB + 512 * MiB)  # a model another prompt left on the GPU
    probes.torch.allocate(0, -512 * MiB)  # ... and a freed block the allocator keeps cached
    recorder.begin_run("p", {"1": {"class_type": "Loader"}, "2": {"class_type": "EmptyImage"}})
    recorder.node_started("1")
    probes.host.set_rss(baseline_bytes + 100 * MiB)
    probes.torch.allocate(0, 800 * MiB)
    recorder.node_finished("1")
    recorder.node_started("2")
    probes.host.set_rss(baseline_bytes + 110 * MiB)
    probes.host.set_rss(baseline_bytes + 100 * MiB)
    recorder.node_finished("2")
    return recorder.end_run("success")


def test_node_rows_carry_the_peak_above_their_own_start(tmp_path):
    report = _run_two_nodes(tmp_path, 1 * GiB)
    rows = {n.node_id: n for n in report.nodes}
    # The absolute peak of node 2 is the process's (1.1 GiB); what node 2 added is its spike.
    assert rows["2"].peak_rss_bytes == 1 * GiB + 110 * MiB
    assert rows["2"].peak_rss_above_start_bytes == 10 * MiB
    assert rows["1"].peak_rss_above_start_bytes == 100 * MiB
    gpu1, gpu2 = rows["1"].gpu_peaks[0], rows["2"].gpu_peaks[0]
    assert gpu1.peak_allocated_bytes == 2 * GiB + 800 * MiB
    assert gpu1.peak_allocated_above_start_bytes == 800 * MiB
    assert gpu1.peak_reserved_above_start_bytes == 288 * MiB  # rises apart: neither read for the other
    assert gpu2.peak_allocated_above_start_bytes == 0 and gpu2.peak_reserved_above_start_bytes == 0
    on_disk = json.loads((tmp_path / "p.json").read_text())
    jsonschema.validate(on_disk, SCHEMA)
    assert on_disk["nodes"][1]["peak_rss_above_start_bytes"] == 10 * MiB
    # The node's own figure (GPU first, then RSS) is what badges and bars use.
    # What the node needed is what it allocated, not what the allocator reserved for it.
    assert node_memory_above_start(on_disk["nodes"][0]) == 800 * MiB


def test_unknown_baseline_gives_none_not_a_number(tmp_path):
    probes = fake_probes("no GPU")
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    recorder.begin_run("p", {})
    probes.host.fail.add("process_rss_bytes")
    recorder.node_started("1")
    recorder.node_finished("1")
    row = recorder.end_run("success").nodes[0]
    assert row.peak_rss_above_start_bytes is None
    assert node_memory_above_start(row.to_dict()) is None


def test_compare_of_runs_on_different_baselines_flags_no_node_regression(tmp_path):
    """The same work started 200 MiB higher (the process grew in between) is not a regression."""
    a = _run_two_nodes(tmp_path / "a", 1 * GiB).to_dict()
    b = _run_two_nodes(tmp_path / "b", 1 * GiB + 200 * MiB).to_dict()
    result = compare(a, b)
    node_regressions = [r for r in result["regressions"] if r.startswith(("node", "stage"))]
    assert node_regressions == []
    nodes = {n["node_id"]: n for n in result["nodes"]}
    assert nodes["2"]["peak_rss_above_start_bytes"]["delta"] == 0


def test_compare_flags_a_node_that_needs_more_itself(tmp_path):
    a = _run_two_nodes(tmp_path / "a", 1 * GiB).to_dict()
    b = _run_two_nodes(tmp_path / "b", 1 * GiB).to_dict()
    b["nodes"][1]["peak_rss_above_start_bytes"] = 500 * MiB
    result = compare(a, b)
    assert "node #2 EmptyImage peak_rss_above_start_bytes" in result["regressions"]
    assert "stage EmptyImage peak_rss_above_start_bytes" in result["regressions"]


def test_available_memory_keeps_its_low_point_not_its_maximum():
    probes = fake_probes("no GPU")
    span = Span("s", probes=probes).start()
    probes.host.ram_used_bytes = 12 * GiB  # available drops to 4 GiB
    span.observe(probes.snapshot())
    probes.host.ram_used_bytes = 2 * GiB  # then rises to 14 GiB
    result = span.stop()
    assert "ram_available_bytes" not in result.peaks
    assert result.lows["ram_available_bytes"].value == 4 * GiB
    assert result.peaks["ram_used_bytes"].value == 12 * GiB
    assert result.to_dict()["lows"]["ram_available_bytes"]["value"] == 4 * GiB


def test_html_report_bars_rank_nodes_by_what_they_added(tmp_path):
    from monitors.exporters.html import render_html

    report = _run_two_nodes(tmp_path, 1 * GiB).to_dict()
    page = render_html(report)
    chart = page.split("RSS added per node", 1)[1].split("</svg>", 1)[0]
    assert "100.0 MiB" in chart and "10.0 MiB" in chart
    assert "1.1 GiB" not in chart  # the process's peak is in the table, not in the bars
    assert "RSS added" in page.split("<h2>Nodes</h2>", 1)[1]


def test_node_rows_carry_start_end_change_and_peak_times_from_their_own_readings(tmp_path):
    """The cheap part of the memory picture: RSS and allocator counters at start and end, the change,
    and when each peak was seen; no system RAM or NVML reading per node."""
    report = _run_two_nodes(tmp_path, 1 * GiB)
    rows = {n.node_id: n for n in report.nodes}
    node1 = rows["1"]
    assert (node1.rss_start_bytes, node1.rss_end_bytes) == (1 * GiB, 1 * GiB + 100 * MiB)
    assert node1.rss_change_bytes == node1.rss_end_bytes - node1.rss_start_bytes
    assert node1.peak_rss_at_s is not None and node1.peak_rss_at_s >= 0
    gpu = node1.gpu_peaks[0]
    assert (gpu.allocated_start_bytes, gpu.allocated_end_bytes) == (2 * GiB, 2 * GiB + 800 * MiB)
    assert gpu.allocated_change_bytes == 800 * MiB
    assert (gpu.reserved_start_bytes, gpu.reserved_end_bytes) == (2 * GiB + 512 * MiB, 2 * GiB + 800 * MiB)
    assert gpu.reserved_change_bytes == 288 * MiB
    assert gpu.peak_allocated_at_s is not None and gpu.peak_reserved_at_s is not None
    on_disk = json.loads((tmp_path / "p.json").read_text())
    jsonschema.validate(on_disk, SCHEMA)
    assert on_disk["nodes"][0]["gpu_peaks"][0]["allocated_change_bytes"] == 800 * MiB

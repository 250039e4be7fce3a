"""The HTML report's memory table cell by cell (monitors/exporters/html_memory.py), from hand-made
memory pictures: the change's sign, the start-to-peak bar's bounds, the low point, each unknown's
reason, GPU rows per device and the measured nodes by class."""

from __future__ import annotations

import re

from monitors.exporters.html_memory import _memory_cells, memory_html, memory_scope_text
from monitors.vocabulary.memory_rows import MEMORY_NOT_READ_REASON

KiB = 1024


def na(reason):
    return f'<td class="num na" title="{reason}">n/a</td>'


def test_cells_of_a_figure_with_a_peak():
    cells, bar = _memory_cells({"baseline": KiB, "end": 3 * KiB, "change": 2 * KiB, "peak": 4 * KiB, "peak_at_s": 0.5}, "r")
    assert cells == [
        "<td class=num>1.0 KiB</td>",
        "<td class=num>3.0 KiB</td>",
        "<td class=num>+2.0 KiB</td>",
        '<td class=num title="highest during the step">4.0 KiB<br><span class="muted">@ 500 ms</span></td>',
    ]
    assert bar == '<div class="mbar" title="start → peak"><span style="left:25%;width:75%"></span></div>'


def test_the_change_says_its_sign_and_no_change_is_plus_minus_zero():
    text = {c: _memory_cells({"change": c}, "r")[0][2] for c in (0, 1, -1)}
    assert text == {0: "<td class=num>±0</td>", 1: "<td class=num>+1 B</td>", -1: "<td class=num>-1 B</td>"}
    assert _memory_cells({"change": -0.0}, "r")[0][2] == "<td class=num>±0</td>"
    assert _memory_cells({"change": None}, "why")[0][2] == na("why")


def test_the_bar_from_the_start_to_the_peak_within_its_bounds():
    def bar(baseline, peak):
        return _memory_cells({"baseline": baseline, "peak": peak}, "r")[1]

    assert 'left:0%;width:100%' in bar(0, 1)  # a one-byte peak still has a bar
    assert 'left:100%;width:2%' in bar(KiB, KiB)  # no growth: the thinnest bar
    assert 'left:100%;width:2%' in bar(2 * KiB, KiB)  # a start above the peak stays within the row
    assert 'left:0%;width:100%' in bar(-5, KiB)
    assert 'left:99%;width:2%' in bar(99, 100)
    assert bar(0, 0) == "" and bar(None, KiB) == "" and bar(KiB, None) == ""


def test_a_low_point_has_no_bar_and_says_low():
    cells, bar = _memory_cells({"baseline": 8 * KiB, "low": 2 * KiB, "low_at_s": 1.5}, "r")
    assert bar == ""
    assert cells[3] == '<td class=num title="lowest during the step">2.0 KiB<br><span class="muted">low @ 1.50 s</span></td>'
    timeless = _memory_cells({"low": 2 * KiB}, "r")[0][3]
    assert timeless == '<td class=num title="lowest during the step">2.0 KiB<br><span class="muted">low</span></td>'
    unknown = _memory_cells({"low": None, "low_at_s": 1.0}, "r")[0][3]
    assert unknown == na("r")


def test_unknown_figures_are_n_a_with_their_reason_escaped():
    cells, bar = _memory_cells(None, 'not "read"')
    assert cells == [na("not &quot;read&quot;")] * 4 and bar == ""
    peak_without_time = _memory_cells({"peak": KiB}, "r")[0][3]
    assert peak_without_time == '<td class=num title="highest during the step">1.0 KiB</td>'


def test_scope_names_nodes_by_class_in_order():
    scope = {"measured_node_ids": ["10", 11, "12"], "not_run_node_ids": ["4"]}
    classes = {"10": "LoraLoader", "11": "LoraLoader", "4": "Checkpoint"}
    assert memory_scope_text(scope, classes) == "measured: LoraLoader #10, #11; #12 · not run (cached): Checkpoint #4"
    assert memory_scope_text(scope) == "measured: #10, #11, #12 · not run (cached): #4"
    assert memory_scope_text({"measured_node_ids": [], "not_run_node_ids": ["4"]}) == "not run (cached): #4"
    assert memory_scope_text({"measured_node_ids": ["1"]}, None) == "measured: #1"
    assert memory_scope_text("broken") == ""


def _rows(out):
    return re.findall(r"<tr><td title=\"[^\"]*\">(.*?)(?:<div|</td>)", out)


def test_rows_per_figure_and_per_gpu_device():
    picture = {
        "duration_s": 0.25,
        "process_rss_bytes": {"baseline": KiB, "end": KiB, "change": 0, "peak": KiB, "peak_at_s": 0.0},
        "system_ram": {"used_bytes": {"baseline": KiB}, "available_bytes": {"baseline": KiB, "low": 1}},
        "gpus": [{"device": "cuda:1", "allocated_bytes": {"peak": KiB}}, "not a gpu", {}],
        "unknown_reasons": {"gpu_nvml": "no NVML", "system_ram": "no psutil"},
    }
    out = memory_html({"memory": picture})
    assert out.startswith('<div class="memory"><h4>Memory over 250 ms</h4>')
    assert _rows(out) == [
        "process RSS", "RAM used", "RAM available",
        "cuda:1 allocated", "cuda:1 reserved", "cuda:1 NVML used",
        "GPU allocated", "GPU reserved", "GPU NVML used",
    ]
    nvml = re.search(r"cuda:1 NVML used.*?</tr>", out).group(0)
    assert nvml.count(na("no NVML")) == 4  # the reason its declaration names
    reserved = re.search(r"cuda:1 reserved.*?</tr>", out).group(0)
    assert reserved.count(na(MEMORY_NOT_READ_REASON)) == 4  # no reason declared: not read
    used = re.search(r"RAM used.*?</tr>", out).group(0)
    assert used.count(na("no psutil")) == 3
    assert "GPU:" not in out  # no reason for the GPUs as a whole


def test_a_picture_without_duration_or_gpus_and_a_gpu_note():
    out = memory_html({"memory": {"unknown_reasons": {"gpus": "no GPU <seen>"}}, "memory_scope": {"measured_node_ids": ["3"]}})
    assert "<h4>Memory</h4>" in out
    assert _rows(out) == ["process RSS", "RAM used", "RAM available"]
    assert '<p class="muted">GPU: no GPU &lt;seen&gt;</p><p class="muted mscope">measured: #3</p></div>' in out
    rss = re.search(r"process RSS.*?</tr>", out).group(0)
    assert rss.count(na(MEMORY_NOT_READ_REASON)) == 4


def test_no_picture_says_why_or_that_it_was_not_measured():
    assert memory_html({"memory": "broken", "memory_unknown_reason": 'a "quoted" reason'}) == (
        '<div class="memory"><h4>Memory</h4><p><span class="na" title="a &quot;quoted&quot; reason">n/a</span> '
        '<span class="muted">a &quot;quoted&quot; reason</span></p></div>'
    )
    assert 'title="not measured">n/a</span> <span class="muted">not measured</span>' in memory_html({"memory": None})
    assert memory_html(None) == "" and memory_html({"other": 1}) == "" and memory_html(["memory"]) == ""

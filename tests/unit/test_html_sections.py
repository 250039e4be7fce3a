"""The HTML report's sections one by one (monitors/exporters/html.py), from hand-made report dicts:
the charts' exact geometry and axis, the order of problems, the node table's GPU columns and caveat,
a step's card (title, verdict said once, details cut), the system table, the input changes and the
page's head line."""

from __future__ import annotations

import html
import json
import re

from monitors.exporters import html as page_html
from monitors.exporters.html import (
    breakdown_svg,
    input_changes_html,
    node_label,
    nodes_table,
    problems_html,
    render_html,
    step_html,
    system_html,
    timeline_svg,
)
from monitors.node_fields import GPU_BUSY_CAVEAT, GPU_TIME_CAVEAT
from monitors.vocabulary.formatting import format_bytes, format_seconds


def node(node_id, start, duration, **extra):
    return {"node_id": node_id, "class_type": f"C{node_id}", "start_offset_s": start, "duration_s": duration, **extra}


# -- small helpers -----------------------------------------------------------------------------


def test_times_and_node_labels():
    def started(unix_s):
        page = render_html({"prompt_id": "p", "status": "success", "started_unix_s": unix_s, "nodes": []})
        return re.search(r"started ([^<·]*?) ?(·|<)", page).group(1)

    assert started(None) == "–"
    assert started(0) == "1970-01-01 00:00:00 UTC"
    assert started(1_700_000_000.5) == "2023-11-14 22:13:20 UTC"
    assert node_label({"node_id": "5", "title": "Mine", "class_type": "K"}) == "#5 Mine"
    assert node_label({"node_id": "5", "class_type": "K"}) == "#5 K"
    assert node_label({"node_id": "5"}) == "#5"
    assert page_html.esc(None) == "" and page_html.esc('a"<') == "a&quot;&lt;"


def test_labels_are_clipped_to_34_characters():
    def label(title):
        svg = timeline_svg({"nodes": [node("1", 0.0, 1.0, title=title)]})
        return re.search(r'text-anchor="end">(#1 [^<]*)</text>', svg).group(1)

    assert label("x" * 31) == "#1 " + "x" * 31  # 34 characters: kept
    assert label("x" * 32) == "#1 " + "x" * 30 + "…"


# -- charts ------------------------------------------------------------------------------------


AXIS_4S = (
    '<line class="axis" x1="220" y1="38" x2="780" y2="38"/>'
    '<line class="axis" x1="220.0" y1="38" x2="220.0" y2="42"/><text x="220.0" y="53" text-anchor="start">0.0 ms</text>'
    '<line class="axis" x1="360.0" y1="38" x2="360.0" y2="42"/><text x="360.0" y="53" text-anchor="middle">1.00 s</text>'
    '<line class="axis" x1="500.0" y1="38" x2="500.0" y2="42"/><text x="500.0" y="53" text-anchor="middle">2.00 s</text>'
    '<line class="axis" x1="640.0" y1="38" x2="640.0" y2="42"/><text x="640.0" y="53" text-anchor="middle">3.00 s</text>'
    '<line class="axis" x1="780.0" y1="38" x2="780.0" y2="42"/><text x="780.0" y="53" text-anchor="end">4.00 s</text>'
)


def test_timeline_geometry_on_the_runs_time_axis():
    report = {
        "duration_s": 4.0,
        "nodes": [node("2", 1.0, 2.0, status="error"), node("1", 0.0, 1.0, status="executed"), node("3", None, None)],
    }
    assert timeline_svg(report) == (
        '<svg role="img" aria-label="timeline" width="790" height="60">'
        '<text x="214" y="13" text-anchor="end">#1 C1</text>'
        '<rect class="bar" x="220.0" y="3" width="140.0" height="12"><title>#1 C1: 1.00 s from 0.0 ms</title></rect>'
        '<text x="214" y="31" text-anchor="end">#2 C2</text>'
        '<rect class="errbar" x="360.0" y="21" width="280.0" height="12"><title>#2 C2: 2.00 s from 1.00 s</title></rect>'
        + AXIS_4S
        + "</svg>"
    )


def test_timeline_axis_ends_at_the_last_node_when_the_run_is_shorter_or_unknown():
    late = {"duration_s": None, "nodes": [node("1", 3.5, None, status="interrupted"), node("2", 0.0, 0.5)]}
    svg = timeline_svg(late)
    # no duration: the node ends where it starts; the axis ends at 3.5 s
    assert '<rect class="errbar" x="780.0" y="21" width="1.5" height="12"><title>#1 C1: – from 3.50 s</title>' in svg
    assert '<text x="780.0" y="53" text-anchor="end">3.50 s</text>' in svg
    assert '<rect class="bar" x="220.0" y="3" width="80.0" height="12">' in svg
    tiny = timeline_svg({"nodes": [node("1", 0.0, 0.0004)]})
    assert 'width="224.0"' in tiny  # an axis of at least 1 ms
    assert '<text x="780.0" y="35" text-anchor="end">1.0 ms</text>' in tiny
    one = timeline_svg({"nodes": [node("1", 1.0, 1.0)]})
    assert '<rect class="bar" x="500.0" y="3" width="280.0" height="12">' in one  # the axis ends at its end
    short = timeline_svg({"duration_s": 2.0, "nodes": [node("1", 0.0, 0.5)]})
    assert 'width="140.0"' in short  # the run's duration when it is the longer


def test_timeline_keeps_the_first_200_timed_nodes():
    nodes = [node(str(i), float(i), 1.0) for i in range(201, -1, -1)]
    svg = timeline_svg({"duration_s": 300.0, "nodes": nodes})
    assert svg.count("<rect") == 200 and "#199 C199" in svg and "#200 C200" not in svg
    assert 'height="3624"' in svg  # 200 rows of 18 and the axis
    assert timeline_svg({"nodes": [node("1", None, 1.0)]}).startswith('<p class="muted">No timed nodes')
    assert timeline_svg({}).startswith('<p class="muted">No timed nodes')


def test_breakdown_bars_largest_first_against_the_largest():
    report = {"nodes": [node("1", 0, 1, v=100), node("2", 0, 1, v=400), node("3", 0, 1, v="x"), node("4", 0, 1, v=0)]}
    assert breakdown_svg(report, "v", "bar2", str) == (
        '<svg role="img" aria-label="v" width="870" height="58">'
        '<text x="214" y="13" text-anchor="end">#2 C2</text>'
        '<rect class="bar2" x="220" y="3" width="560.0" height="12"/><text x="786.0" y="13">400</text>'
        '<text x="214" y="31" text-anchor="end">#1 C1</text>'
        '<rect class="bar2" x="220" y="21" width="140.0" height="12"/><text x="366.0" y="31">100</text>'
        '<text x="214" y="49" text-anchor="end">#4 C4</text>'
        '<rect class="bar2" x="220" y="39" width="1.5" height="12"/><text x="227.5" y="49">0</text>'
        "</svg>"
    )


def test_breakdown_of_zeros_nothing_and_too_many():
    zeros = breakdown_svg({"nodes": [node("1", 0, 1, v=0)]}, "v", "bar", str)
    assert 'width="1.5"' in zeros
    assert breakdown_svg({"nodes": [node("1", 0, 1)]}, "v", "bar", str) == '<p class="muted">No values.</p>'
    assert breakdown_svg({}, "v", "bar", str) == '<p class="muted">No values.</p>'
    many = breakdown_svg({"nodes": [node(str(i), 0, 1, v=i) for i in range(41)]}, "v", "bar", str)
    assert many.count("<rect") == 40 and "#0 C0" not in many and 'height="724"' in many


def test_long_labels_are_clipped_in_both_charts():
    long = node("1", 0.0, 1.0, title="T" * 40, v=1)
    assert f">#1 {'T' * 30}…</text>" in timeline_svg({"nodes": [long]})
    assert f">#1 {'T' * 30}…</text>" in breakdown_svg({"nodes": [long]}, "v", "bar", str)


# -- problems ----------------------------------------------------------------------------------


def items(out):
    return re.findall(r'<li class="([^"]*)"><b>[^<]*</b> <span class="muted">\[([^\]]*)\]</span> ([^<]*)</li>', out)


def test_problems_run_error_first_then_by_level_in_order():
    report = {
        "error": {"node_id": "5", "node_type": None, "exception_type": "RuntimeError"},
        "steps": [
            {"kind": "lora", "node_id": "1", "findings": [
                {"level": "odd", "message": "odd one"},
                {"level": "info", "message": "i1"},
                {"message": "no level"},
                {"level": "warning", "message": "w1"},
                {"level": "error", "message": "e1"},
            ], "monitor_errors": ["m1"]},
        ],
        "monitor_errors": ["run-level"],
        "missing_seams": ["a.b", 7],
    }
    assert items(problems_html(report)) == [
        ("error", "run", "Node 5 (?): RuntimeError"),
        ("error", "lora #1", "e1"),
        ("warning", "lora #1", "w1"),
        ("warning", "lora #1", "monitoring: m1"),
        ("warning", "monitor", "ComfyUI seams not found: a.b, 7; the figures that read them are missing from this run"),
        ("info", "lora #1", "i1"),
        ("info", "lora #1", "no level"),
        ("info", "monitor", "run-level"),
        ("odd", "lora #1", "odd one"),
    ]


def test_a_run_errors_message_and_type():
    error = {"node_id": "5", "node_type": "KSampler", "exception_type": "ValueError", "exception_message": "bad"}
    assert items(problems_html({"error": error})) == [("error", "run", "Node 5 (KSampler): ValueError: bad")]
    assert problems_html({}) == '<p class="muted">No errors or suggestions.</p>'
    assert problems_html({"error": None, "steps": [], "missing_seams": []}) == '<p class="muted">No errors or suggestions.</p>'


def test_a_compare_verdict_is_said_once_in_its_card():
    compare = {"kind": "tensor_compare", "node_id": "9", "summary": {"verdict": "close"}, "findings": [
        {"level": "info", "message": "close"},
        {"level": "warning", "message": "close"},
        {"level": "info", "message": "other"},
    ]}
    assert items(problems_html({"steps": [compare]})) == [
        ("warning", "tensor_compare #9", "close"), ("info", "tensor_compare #9", "other")
    ]
    lora = {**compare, "kind": "lora"}  # only a compare has a verdict
    assert len(items(problems_html({"steps": [lora]}))) == 3
    no_verdict = {**compare, "summary": {}}
    assert len(items(problems_html({"steps": [no_verdict]}))) == 3
    card = step_html(compare)  # the card shows the verdict as a figure, and no finding saying it
    assert re.findall(r"<li[^>]*>.*?</li>", card) == ['<li class="info"><b>info</b> other</li>']
    assert "<div><b>verdict</b>close</div>" in card


# -- node table --------------------------------------------------------------------------------


def test_node_rows_with_gpu_times_and_the_caveat():
    rows = [
        node("1", 0.5, 1.25, title="T", status="executed", gpu_time_s=0.5, gpu_busy_s=None,
             gpu_busy_unknown_reason="too short", peak_rss_bytes=2048, peak_rss_above_start_bytes=1024,
             rss_change_bytes=-1024, gpu_peaks=[{"peak_allocated_bytes": 4096, "peak_allocated_above_start_bytes": 2048}]),
    ]
    table = nodes_table({"nodes": rows})
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", table)
    assert cells == ["#1 T", "C1", "executed", "500 ms", "1.25 s", "500 ms", "–", "2.0 KiB", "1.0 KiB", "-1.0 KiB",
                     "4.0 KiB", "2.0 KiB"]
    assert '<td class=num title="too short">–</td>' in table and '<td class=num title="">500 ms</td>' in table
    assert table.endswith(f'</table><p class="muted">{page_html.esc(GPU_TIME_CAVEAT)} {page_html.esc(GPU_BUSY_CAVEAT)}</p>')
    busy_only = nodes_table({"nodes": [node("1", 0, 1, gpu_busy_s=0.25, gpu_time_unknown_reason="no CUDA")]})
    assert busy_only.endswith("</p>") and '<td class=num title="no CUDA">–</td>' in busy_only
    assert ">250 ms</td>" in busy_only


def test_node_rows_without_gpu_times_have_no_caveat():
    table = nodes_table({"nodes": [node("1", None, None, status="cached")]})
    assert table.endswith("</tr></table>")
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", table)
    assert cells == ["#1 ", "C1", "cached", "–", "–", "–", "–", "–", "–", "–", "–", "–"]
    assert nodes_table({}) == '<p class="muted">No nodes profiled.</p>'


# -- a step's card -----------------------------------------------------------------------------


def test_a_step_card_title_badges_figures_findings_and_details():
    step = {
        "kind": "lora", "node_id": "4", "cached": True,
        "summary": {"zeta": 1, "n_loras": 2, "success": True},
        "findings": [{"level": "warning", "message": "w"}],
        "monitor_errors": ["m<"],
        "details": {"text": "日本", "n": 1},
    }
    card = step_html(step)
    assert card.startswith('<section class="card" data-kind="lora"><h3>LoRA <span class="muted">node #4</span>'
                           '<span class="badge">cached</span></h3>')
    assert '<ul><li class="warning"><b>warning</b> w</li><li class="warning">monitoring: m&lt;</li></ul>' in card
    figures = re.findall(r"<div><b>([^<]*)</b>([^<]*)</div>", card)
    assert figures == [("applied", "yes"), ("LoRAs", "2"), ("zeta", "1")]
    assert "<pre>{\n &quot;text&quot;: &quot;日本&quot;,\n &quot;n&quot;: 1\n}</pre>" in card


def test_a_step_of_an_unknown_kind_or_without_anything():
    card = step_html({"kind": "my_kind", "node_id": None})
    assert card == (
        '<section class="card" data-kind="my_kind"><h3>my kind <span class="muted">node #</span></h3>'
        "<details><summary>details</summary><pre>{}</pre></details></section>"
    )
    assert "<h3>step <span" in step_html({"kind": None}) and "<h3>7 <span" in step_html({"kind": 7})


def test_details_are_cut_beyond_200000_characters():
    def details_of_length(n):
        filler = n - len(json.dumps({"x": ""}, indent=1))
        return {"x": "a" * filler}

    exact = step_html({"kind": "lora", "details": details_of_length(200_000)})
    assert "(cut)" not in exact and "a&quot;\n}</pre>" in exact
    details = details_of_length(200_001)
    longer = step_html({"kind": "lora", "details": details})
    text = html.unescape(re.search(r"<pre>(.*)</pre>", longer, re.S).group(1))
    assert text == json.dumps(details, indent=1)[:200_000] + "\n… (cut)"  # the last "}" cut


# -- system, input changes, the page -----------------------------------------------------------


def test_system_rows():
    assert system_html({}) == '<p class="muted">No system information.</p>'
    assert system_html({"ram_total_bytes": 2048, "n_gpus": 2}) == (
        '<table><tr><th title="ram_total_bytes">ram total</th><td>2.0 KiB</td></tr>'
        '<tr><th title="n_gpus">gpus (count)</th><td>2</td></tr></table>'
    )


def test_input_changes():
    assert input_changes_html({}) == "" and input_changes_html({"input_changes": "x"}) == ""
    first = {"first_run": True, "changes": None}
    assert input_changes_html({"input_changes": first}) == "<p>inputs: first run of this workflow</p>"
    unknown = {"first_run": False, "changes": None, "compared_with_prompt_id": "p0", "unknown_reason": "no <inputs>"}
    assert input_changes_html({"input_changes": unknown}) == '<p class="muted">inputs changed: unknown (no &lt;inputs&gt;)</p>'
    assert input_changes_html({"input_changes": {**unknown, "compared_with_prompt_id": None}}) == ""
    none = {"first_run": False, "changes": [], "compared_with_prompt_id": "p0", "n_changes": 0}
    assert input_changes_html({"input_changes": none}) == "<p>inputs: none changed since the last run</p>"
    change = {"node_id": "3", "node_type": "KSampler", "input": "seed", "before": 1, "after": 2}
    some = {"first_run": False, "changes": [change, "x"], "compared_with_prompt_id": "p0", "n_changes": 3}
    assert input_changes_html({"input_changes": some}) == (
        "<p>inputs changed since the last run (p0):</p><table><thead><tr><th>Node</th><th>Input</th>"
        "<th>Before → now</th></tr></thead><tbody><tr><td>#3 KSampler</td><td>seed</td><td class=mono>1 → 2</td></tr>"
        '</tbody></table><p class="muted">1 more not listed</p>'
    )
    listed = {**some, "changes": [change], "n_changes": 1}
    assert input_changes_html({"input_changes": listed}).endswith("</table>")
    untyped = {**some, "changes": [{**change, "node_type": None}], "n_changes": None}
    assert "<td>#3 </td>" in input_changes_html({"input_changes": untyped})
    assert input_changes_html({"input_changes": untyped}).endswith("</table>")


def test_the_page_head_line_and_footer():
    nodes = [
        node("1", 0.0, 1.0, cached=False, gpu_peaks=[{"peak_allocated_bytes": 3 * 1024**2}]),
        node("2", None, None, cached=True, gpu_peaks=[{"peak_allocated_bytes": None}]),
        node("3", None, None, cached=True),
    ]
    report = {"prompt_id": "p9", "status": "success", "started_unix_s": 0, "duration_s": 1.5, "nodes": nodes,
              "span": {"peak_rss_bytes": 2 * 1024**3}, "schema_version": 4, "workflow": {"name": "flow"}}
    page = render_html(report)
    assert (
        '<p><span class="success"><b>success</b></span> · started 1970-01-01 00:00:00 UTC · 1.50 s · '
        "peak RSS 2.0 GiB · peak GPU 3.0 MiB · 3 nodes (2 cached)</p>"
    ) in page
    assert "<title>Pipeline Monitor · flow · p9</title>" in page and "<p>workflow <b>flow</b></p>" in page
    assert '<p class="muted">schema version 4 · profile on · made by Pipeline Monitor</p>' in page
    assert "profile off" in render_html({**report, "profile_enabled": False})
    bare = render_html({"prompt_id": "p0"})
    assert '<span class="unknown"><b>unknown</b></span>' in bare and "peak RSS – · peak GPU – · 0 nodes (0 cached)" in bare
    assert "<title>Pipeline Monitor · p0</title>" in bare and '<p class="muted">No monitor steps.</p>' in bare
    assert '<h2>System</h2><p class="muted">No system information.</p>' in bare
    with_system = render_html({"prompt_id": "p0", "system": {"n_gpus": 1}})
    assert '<h2>System</h2><table><tr><th title="n_gpus">' in with_system


def test_the_page_has_every_section_in_order():
    report = {"prompt_id": "p", "nodes": [node("1", 0.0, 1.0, peak_rss_above_start_bytes=1024)],
              "steps": [{"kind": "lora", "node_id": "2"}]}
    page = render_html(report)
    heads = re.findall(r"<h2>([^<]*)</h2>", page)
    assert heads == ["Errors and suggestions", "Timeline", "Time per node", "RSS added per node (peak above its start)",
                     "Monitor steps", "Nodes", "System"]
    assert f">{format_seconds(1.0)}</text>" in page and f">{format_bytes(1024)}</text>" in page
    assert '<section class="card" data-kind="lora">' in page


def test_the_node_table_shows_the_processs_device_memory_only_where_measured():
    """A column per device-memory figure some node has, its cell titled with the reason where
    unknown; the head line names the run's highest; a run without the figures has no such column."""
    mib = 1024**2
    measured = {"device": "cuda:0", "peak_allocated_bytes": 1, "peak_process_used_bytes": 900 * mib}
    unread = {
        "device": "cuda:0",
        "peak_allocated_bytes": 1,
        "peak_process_used_bytes": None,
        "process_used_unknown_reason": "not among the processes NVML lists",
    }
    rows = [node("1", 0, 1, gpu_peaks=[measured]), node("2", 1, 1, gpu_peaks=[unread])]
    table = nodes_table({"nodes": rows})
    assert table.count(">Device</th>") == 1 and "Dyn VRAM" not in table
    assert f">{format_bytes(900 * mib)}</td>" in table
    assert 'title="not among the processes NVML lists">–</td>' in table
    page = render_html({"prompt_id": "p", "status": "success", "nodes": rows})
    assert f"peak device memory {format_bytes(900 * mib)}" in page
    plain = nodes_table({"nodes": [node("1", 0, 1, gpu_peaks=[{"device": "cuda:0", "peak_allocated_bytes": 1}])]})
    assert "Device" not in plain and "peak device memory" not in render_html({"prompt_id": "p", "nodes": []})


def test_the_head_line_names_the_runs_highest_gpu_and_device_memory_peaks():
    mib = 1024**2
    nodes = [
        node("1", 0.0, 1.0, gpu_peaks=[{"peak_allocated_bytes": 3 * mib, "peak_process_used_bytes": 900 * mib}]),
        node("2", 1.0, 1.0, gpu_peaks=[{"peak_allocated_bytes": 1 * mib, "peak_process_used_bytes": 200 * mib}]),
    ]
    page = render_html({"prompt_id": "p", "status": "success", "nodes": nodes})
    assert f"peak GPU {format_bytes(3 * mib)} · peak device memory {format_bytes(900 * mib)} · 2 nodes" in page

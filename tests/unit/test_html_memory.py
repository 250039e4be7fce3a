"""The HTML report's memory section: the panel's table (start, end, change, peak @ time) per step."""

import re

from monitors.engine.span import Change, Peak, SpanResult, memory_picture
from monitors.engine.upstream_memory import upstream_memory
from monitors.exporters.html import memory_html, memory_scope_text, render_html
from monitors.probes import Snapshot

MiB = 1024**2
GiB = 1024**3


def span(start_s: float, rss_before: int, rss_after: int, peak: int, at_s: float) -> SpanResult:
    return SpanResult(
        name="n",
        start_unix_s=start_s,
        duration_s=1.0,
        baseline=Snapshot(monotonic_s=start_s, unix_time_s=start_s, process_rss_bytes=rss_before),
        end=Snapshot(monotonic_s=start_s + 1, unix_time_s=start_s + 1, process_rss_bytes=rss_after),
        peaks={"process_rss_bytes": Peak(peak, at_s, "kernel_hwm")},
        changes={"process_rss_bytes": Change.between(rss_before, rss_after)},
        lows={},
        peak_rss_method="kernel_hwm",
    )


def lora_details():
    results = {"10": span(100.0, 512 * MiB, 640 * MiB, GiB, 0.4), "11": span(101.5, 640 * MiB, 768 * MiB, 900 * MiB, 0.2)}
    return upstream_memory(["10", "11", "4"], results)


def cells(row_html: str) -> list[str]:
    return [re.sub(r"<[^>]+>", " ", c).split() for c in re.findall(r"<td[^>]*>(.*?)</td>", row_html)]


def test_memory_table_rows_columns_and_scope():
    details = lora_details()
    out = memory_html(details, {"10": "LoraLoader", "11": "LoraLoader", "4": "CheckpointLoaderSimple"})
    assert "<h4>Memory over 2.50 s</h4>" in out
    assert re.findall(r"<th[^>]*>([^<]*)</th>", out) == ["", "start", "end", "change", "peak"]
    rows = re.findall(r"<tr><td.*?</tr>", out)
    labels = [re.match(r'<tr><td title="[^"]*">([^<]*)', r).group(1) for r in rows]
    assert labels == ["process RSS", "RAM used", "RAM available"]  # no GPU in this picture
    assert cells(rows[0]) == [["process", "RSS"], ["512.0", "MiB"], ["768.0", "MiB"], ["+256.0", "MiB"], ["1.0", "GiB", "@", "400", "ms"]]
    assert ">+256.0 MiB<" in rows[0]
    assert 'class="mbar"' in rows[0] and "left:50%" in rows[0]  # a bar from the start (half the peak) to the peak
    # a figure the spans did not read: n/a with the reason as its title
    reason = details["memory"]["unknown_reasons"]["system_ram"]
    assert rows[1].count(f'title="{reason}">n/a<') == 4
    assert "measured: LoraLoader #10, #11 · not run (cached): CheckpointLoaderSimple #4" in out
    assert "GPU: no GPU seen by torch or NVML" in out


def test_memory_gpu_rows_and_low_point():
    result = span(100.0, 100, 200, 300, 0.1)
    result.changes.update(
        {
            "cuda:0.allocated_bytes": Change.between(GiB, 2 * GiB),
            "cuda:0.reserved_bytes": Change.between(2 * GiB, 2 * GiB),
            "ram_available_bytes": Change.between(8 * GiB, 7 * GiB),
        }
    )
    result.peaks["cuda:0.allocated_bytes"] = Peak(3 * GiB, 1.25, "torch")
    result.lows["ram_available_bytes"] = Peak(6 * GiB, 0.5, "sampled")
    out = memory_html({"memory": memory_picture(result)})
    assert "cuda:0 allocated" in out and "cuda:0 reserved" in out and "cuda:0 NVML used" in out
    allocated = re.search(r"<tr><td[^>]*>cuda:0 allocated.*?</tr>", out).group(0)
    assert "3.0 GiB<br><span class=\"muted\">@ 1.25 s</span>" in allocated
    available = re.search(r"<tr><td[^>]*>RAM available.*?</tr>", out).group(0)
    assert 'title="lowest during the step">6.0 GiB<br><span class="muted">low @ 500 ms</span>' in available
    assert "-1.0 GiB" in available
    assert "mbar" not in available  # a low point has no start-to-peak bar


def test_no_picture_says_why_and_steps_without_memory_have_no_section():
    out = memory_html(
        {
            "memory": None,
            "memory_unknown_reason": "upstream nodes cached: nothing ran",
            "memory_scope": {"upstream_node_ids": ["4"], "measured_node_ids": [], "not_run_node_ids": ["4"]},
        }
    )
    assert 'title="upstream nodes cached: nothing ran">n/a<' in out and "not run (cached): #4" in out
    assert memory_html({"samples": {}}) == ""
    assert memory_scope_text(None) == ""


def test_report_shows_the_section_in_the_step_card_with_node_classes_and_escapes():
    evil = "<script>x</script>"
    report = {
        "schema_version": 2,
        "prompt_id": "p",
        "status": "success",
        "nodes": [{"node_id": "10", "class_type": evil, "status": "executed"}],
        "steps": [{"kind": "lora", "node_id": "12", "summary": {}, "details": lora_details()}],
    }
    page = render_html(report)
    card = re.search(r'<section class="card" data-kind="lora">.*?</section>', page, re.S).group(0)
    assert "Memory over" in card and "measured: &lt;script&gt;x&lt;/script&gt; #10; #11" in card
    assert evil not in page

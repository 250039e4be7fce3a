"""The self-contained HTML report: escaping of every run string, charts, no external loads."""

import re

from monitors.exporters.html import format_value, label, render_html

EVIL = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


def report(**overrides):
    data = {
        "schema_version": 1,
        "prompt_id": "p-1",
        "status": "error",
        "started_unix_s": 1_700_000_000.0,
        "finished_unix_s": 1_700_000_002.0,
        "duration_s": 2.0,
        "nodes": [
            {
                "node_id": "1",
                "class_type": EVIL,
                "title": EVIL,
                "status": "executed",
                "cached": False,
                "start_offset_s": 0.0,
                "duration_s": 1.5,
                "peak_rss_bytes": 2 * 1024**3,
                "peak_rss_method": "kernel_hwm",
                "rss_change_bytes": 1024,
                "peak_rss_above_start_bytes": 300 * 1024**2,
                "gpu_peaks": [
                    {"device": "cuda:0", "peak_allocated_bytes": 1024**3, "peak_reserved_bytes": None}
                ],
            },
            {
                "node_id": "2",
                "class_type": "VAELoader",
                "title": None,
                "status": "cached",
                "cached": True,
                "start_offset_s": None,
                "duration_s": None,
                "peak_rss_bytes": None,
                "peak_rss_method": None,
                "rss_change_bytes": None,
                "gpu_peaks": [],
            },
        ],
        "steps": [
            {
                "kind": "conditioning",
                "node_id": "3",
                "summary": {"positive_text": EVIL, "encode_s": 0.25, "n_tokens": 77, "chars_per_s": 3.0},
                "details": {"prompt": EVIL, "nested": {"file_name": EVIL}},
                "findings": [{"level": "warning", "message": EVIL, "code": None}],
                "monitor_errors": [EVIL],
                "created_unix_s": None,
                "cached": True,
            }
        ],
        "span": {"peak_rss_bytes": 3 * 1024**3},
        "system": {"platform": EVIL, "ram_total_bytes": 16 * 1024**3},
        "error": {
            "node_id": "1",
            "node_type": EVIL,
            "exception_type": "RuntimeError",
            "exception_message": EVIL,
        },
        "monitor_errors": [EVIL],
        "profile_enabled": True,
    }
    data.update(overrides)
    return data


def test_every_run_string_is_escaped():
    page = render_html(report())
    assert "<img" not in page and "<script" not in page and 'onerror="' not in page
    assert page.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") >= 8


def test_no_external_loads_and_a_strict_policy():
    page = render_html(report())
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?\s*(https?:)?//""", page, re.I)
    assert "default-src 'none'" in page
    assert "<script" not in page


def test_charts_sections_and_figures():
    page = render_html(report())
    assert page.count("<svg") == 3  # timeline, time per node, RSS added per node
    assert "<rect" in page and "Errors and suggestions" in page and "Monitor steps" in page
    assert "2.0 GiB" in page and "1.50 s" in page and "cached" in page
    assert page.index("RuntimeError") < page.index("Timeline")  # problems on top


def test_empty_and_odd_reports_still_render():
    page = render_html(report(nodes=[], steps=[], span=None, system={}, error=None, monitor_errors=[]))
    assert "No timed nodes" in page and "No monitor steps" in page
    assert "<html" in render_html({"prompt_id": "x"})


def test_values_by_unit():
    assert format_value("size_bytes", 1536) == "1.5 KiB"
    assert format_value("encode_s", 0.25) == "250 ms"
    assert format_value("frames_per_s", 2.5) == "2.5/s"
    assert format_value("ram_used_pct", 12.34) == "12.3 %"
    assert format_value("x", None) == "–"
    assert label(None, "peak_rss_bytes") == "peak rss" and label(None, "n_tokens") == "tokens (count)"
    assert label("conditioning", "positive_n_tokens") == "positive tokens"  # the kind's declared label


def test_missing_comfyui_seams_are_a_warning_of_the_run():
    html = render_html(report(missing_seams=["execution.reset_progress_state", EVIL]))
    assert "ComfyUI seams not found: execution.reset_progress_state" in html
    assert EVIL not in html  # escaped like every run string
    assert "ComfyUI seams not found" not in render_html(report(missing_seams=[]))

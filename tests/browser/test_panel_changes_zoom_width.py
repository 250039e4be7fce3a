"""The panel at ComfyUI's default sidebar width (312 px): the inputs changed since the last run of
the same workflow in the run list and the run ("first run", "width 64 → 96", markup in a value shown
as text), the live chart zoomed to a run by clicking the run or its band and back to live, and the
node table inside the panel's width. Text and geometry assertions, no pixels; screenshots go to
PIPELINE_MONITOR_ARTIFACTS (or a pytest temp folder)."""

from __future__ import annotations

import pytest

from .browser_support import (
    COUNT_PACK_TIMERS,
    EVIL,
    PANEL,
    TAB_BUTTON,
    app_page,
    artifacts_dir,
)

WORKFLOW = "pm changes demo"


def changing_prompt(width: int, text: str) -> dict:
    """A slow node (so the live chart has samples of the run to click) and a text encode, whose
    widget values change between the two runs."""
    return {
        "1": {
            "class_type": "EmptyImage",
            "inputs": {"width": width, "height": 64, "batch_size": 1, "color": 0},
        },
        "2": {"class_type": "PMTestSlow", "inputs": {"image": ["1", 0], "seconds": 2.5, "seed": width}},
        "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
        "4": {"class_type": "PMTestTinyClip", "inputs": {"kind": "sd1", "seed": 0}},
        "5": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["4", 0], "text": text}},
        "6": {
            "class_type": "PipelineMonitorConditioning",
            "inputs": {"positive": ["5", 0], "clip": ["4", 0]},
        },
    }


def queue_named(page, prompt: dict, name: str) -> str:
    """POST /prompt from the page with the graph's extra data as the frontend sends it for a
    workflow the panel named."""
    body = {
        "prompt": prompt,
        "extra_data": {
            "extra_pnginfo": {
                "workflow": {
                    "id": "pm-changes",
                    "nodes": [],
                    "extra": {"pipeline_monitor_workflow_name": name},
                }
            }
        },
    }
    return page.evaluate(
        """async (body) => { const api = window.comfyAPI.api.api;
             const r = await api.fetchApi('/prompt', {method: 'POST', headers: {'Content-Type': 'application/json'},
               body: JSON.stringify({client_id: api.clientId, ...body})});
             const j = await r.json(); if (!r.ok) throw new Error(JSON.stringify(j)); return j.prompt_id; }""",
        body,
    )


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    path = artifacts_dir(tmp_path_factory)
    print(f"\nbrowser screenshots: {path}")
    return path


@pytest.fixture(scope="module")
def page(server):
    with app_page(server, init_script=COUNT_PACK_TIMERS, open_panel=False) as page:
        yield page


@pytest.fixture(scope="module")
def two_runs(page, server):
    """The tab open at its default width, then the same named workflow twice with two widget values
    changed (one of them to markup)."""
    from .browser_support import wait_for_report

    page.click(TAB_BUTTON)
    page.wait_for_selector(PANEL)
    ids = []
    for width, text in ((64, "a cat"), (96, EVIL)):
        prompt_id = queue_named(page, changing_prompt(width, text), WORKFLOW)
        report = wait_for_report(server, prompt_id)
        assert report["status"] == "success", report["error"]
        ids.append(prompt_id)
    page.evaluate("window.__pipelineMonitor.show({name: 'runs'})")
    page.locator(f'.pm-run-row[data-prompt-id="{ids[1]}"]:not(.pm-running-row)').wait_for(timeout=15_000)
    return ids


def test_the_panel_is_at_the_default_sidebar_width(page, two_runs):
    width = page.eval_on_selector(PANEL, "e => e.getBoundingClientRect().width")
    assert 280 <= width <= 340, f"the sidebar is not at its default width: {width}px"


def test_run_list_and_run_say_which_inputs_changed_as_text(page, server, two_runs, shots):
    first, second = two_runs
    changes = server.get_json(f"/pipeline_monitor/runs/{second}")["input_changes"]
    assert changes["compared_with_prompt_id"] == first
    assert {(c["node_id"], c["input"]) for c in changes["changes"]} == {
        ("1", "width"),
        ("2", "seed"),
        ("5", "text"),
    }
    first_row = page.locator(f'.pm-run-row[data-prompt-id="{first}"] .pm-run-changes')
    assert first_row.inner_text() == "first run"
    line = page.locator(f'.pm-run-row[data-prompt-id="{second}"] .pm-run-changes').get_attribute("title")
    assert "#1 EmptyImage width: 64 → 96" in line and f"text: a cat → {EVIL}" in line
    assert (
        page.locator(f'.pm-run-row[data-prompt-id="{second}"] .pm-run-changes')
        .inner_text()
        .startswith("width 64 → 96")
    )
    page.screenshot(path=str(shots / "changes_run_list.png"))
    page.click(f'.pm-run-row[data-prompt-id="{second}"]')
    page.wait_for_selector(f'.pm-run[data-prompt-id="{second}"] .pm-input-changes')
    table = page.inner_text(".pm-input-changes .pm-changes")
    assert "width" in table and "64 → 96" in table and f"a cat → {EVIL}" in table
    # the markup stayed text: no element made from it, its handler never ran
    assert page.locator(f"{PANEL} img[src='x']").count() == 0
    assert page.evaluate("window.__pmXss") is None
    page.screenshot(path=str(shots / "changes_run.png"))


def test_opening_a_run_zooms_the_chart_to_it_and_back_to_live(page, two_runs, shots):
    second = two_runs[1]
    page.evaluate("window.__pipelineMonitor.show({name: 'runs'})")
    page.click(f'.pm-run-row[data-prompt-id="{second}"]')
    bar = page.locator(".pm-zoom-bar")
    bar.wait_for(state="visible", timeout=5_000)
    assert bar.inner_text().startswith(f"Zoomed to run: {WORKFLOW}")
    zoom = page.evaluate("({...window.__pipelineMonitor.zoom})")
    report_start = page.evaluate(
        "(id) => window.__pipelineMonitor.runs.find((r) => r.prompt_id === id).started_unix_s", second
    )
    assert zoom["promptId"] == second and zoom["from"] <= report_start < zoom["to"]
    assert zoom["to"] - zoom["from"] < 60, "the window is the run's span, not the live 2 minutes"
    # the hover readout reads the zoomed run's samples
    box = page.locator(".pm-chart").bounding_box()
    page.mouse.move(box["x"] + 48 + (box["width"] - 78) * 0.5, box["y"] + box["height"] / 2)
    page.wait_for_function(
        f"document.querySelector('.pm-readout').textContent.includes('run {second[:8]}')", timeout=5_000
    )
    page.screenshot(path=str(shots / "zoomed_chart.png"))
    page.click(".pm-live-back")
    bar.wait_for(state="hidden", timeout=5_000)
    assert page.evaluate("window.__pipelineMonitor.zoom") is None


def test_clicking_a_runs_band_on_the_live_chart_zooms_to_that_run(page, two_runs):
    first = two_runs[0]
    page.evaluate("window.__pipelineMonitor.show({name: 'runs'})")
    # where the first run's samples sit in the live window
    where = page.evaluate(
        """(id) => { const panel = window.__pipelineMonitor, span = panel.chartSpan();
             const own = panel.buffer.points.filter((p) => p.promptId === id);
             if (!own.length) return null;
             const t = own[Math.floor(own.length / 2)].t;
             const rect = panel.canvas.getBoundingClientRect();
             return {x: rect.left + 48 + (rect.width - 78) * (t - span.from) / (span.to - span.from), y: rect.top + rect.height / 2}; }""",
        first,
    )
    assert where is not None, "the live chart has no samples of the first run"
    page.mouse.click(where["x"], where["y"])
    page.wait_for_selector(f'.pm-run[data-prompt-id="{first}"]')
    assert page.evaluate("window.__pipelineMonitor.zoom.promptId") == first
    assert "Zoomed to run" in page.inner_text(".pm-zoom-bar")
    page.click(".pm-live-back")


def test_node_table_fits_the_default_sidebar_width(page, two_runs, shots):
    second = two_runs[1]
    page.evaluate("(id) => window.__pipelineMonitor.show({name: 'run', id})", second)
    page.wait_for_selector(f'.pm-run[data-prompt-id="{second}"] .pm-nodes')
    sizes = page.evaluate(
        """(panel) => { const wrap = document.querySelector('.pm-nodes-wrap'), table = wrap.querySelector('table');
             const root = document.querySelector(panel), box = root.parentElement;
             return {table: table.scrollWidth, wrap: wrap.clientWidth, panel: root.scrollWidth, panelBox: root.clientWidth,
                     container: box.scrollWidth, containerBox: box.clientWidth,
                     headers: [...table.querySelectorAll('th')].map((th) => th.textContent)}; }""",
        PANEL,
    )
    assert sizes["table"] <= sizes["wrap"] + 1, sizes  # no GPU columns here: it fits without scrolling
    assert sizes["panel"] <= sizes["panelBox"] + 1 and sizes["container"] <= sizes["containerBox"] + 1, sizes
    assert not any(h.startswith("Cached") for h in sizes["headers"])
    cached = page.locator(".pm-nodes tr.pm-cached").first
    if cached.count():
        assert "cached" in cached.inner_text()
    page.locator(".pm-nodes").screenshot(path=str(shots / "node_table_312px.png"))
    assert not page.errors, page.errors


def test_memory_section_fits_the_default_sidebar_width(page, two_runs, shots):
    """The conditioning card's memory section (the text encode node's span) at 312 px: a start and a
    peak time, the scope line, and no table wider than its card."""
    second = two_runs[1]
    page.evaluate("(id) => window.__pipelineMonitor.show({name: 'run', id})", second)
    memory = page.locator(f'.pm-run[data-prompt-id="{second}"] .pm-step[data-kind="conditioning"] .pm-memory')
    memory.wait_for(timeout=10_000)
    assert "Start" in memory.locator("thead").inner_text() and "Peak" in memory.locator("thead").inner_text()
    # the peak's time when it came after the start; never "@ 0.0 ms", which says nothing
    assert "@ 0.0 ms" not in memory.inner_text()
    assert "measured: CLIPTextEncode #5" in memory.inner_text()
    sizes = memory.evaluate(
        """(e) => { const table = e.querySelector('table'), card = e.closest('.pm-step');
             return {table: table.scrollWidth, block: e.clientWidth, card: card.scrollWidth, cardBox: card.clientWidth}; }"""
    )
    assert sizes["table"] <= sizes["block"] + 1 and sizes["card"] <= sizes["cardBox"] + 1, sizes
    memory.scroll_into_view_if_needed()
    memory.screenshot(path=str(shots / "memory_section_312px.png"))
    # The widest figures a run can give (a loaded machine: four-digit sizes, long peak times) still
    # fit: a value wraps between number and unit rather than widen the card.
    widest = memory.evaluate(
        """(e) => {
             for (const td of e.querySelectorAll('td.pm-num')) {
               td.firstChild.textContent = '+1,023.9 MiB';
               const at = td.querySelector('.pm-memory-at');
               if (at) at.textContent = 'low @ 1,234.56 s';
             }
             const table = e.querySelector('table'), card = e.closest('.pm-step');
             return {table: table.scrollWidth, block: e.clientWidth, card: card.scrollWidth, cardBox: card.clientWidth}; }"""
    )
    assert widest["table"] <= widest["block"] + 1 and widest["card"] <= widest["cardBox"] + 1, widest
    memory.screenshot(path=str(shots / "memory_section_312px_widest.png"))
    assert not page.errors, page.errors

"""The sidebar panel in the real ComfyUI UI (0.33.0 with frontend 1.49.6 in CI; 0.8.0 with 1.35.9 too), driven by Playwright in Chromium.

Open the page, open the tab, watch the live chart move while a real prompt with monitor nodes
runs (queued from the page), open the run and its step cards, compare two runs, download the JSON
and HTML reports (the HTML report renders offline), check that a prompt carrying
`<img src=x onerror=...>` never executes, that a closed tab does no periodic work, that monitor
nodes show their summary on the node (the examples from the template browser:
test_templates_browser.py).
Screenshots go to PIPELINE_MONITOR_ARTIFACTS (or a pytest temp folder; the path is printed).
"""

from __future__ import annotations

import json
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from .browser_support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    COUNT_PACK_TIMERS,
    EVIL,
    PANEL,
    TAB_BUTTON,
    artifacts_dir,
    open_app,
    queue_from_page,
    rich_prompt,
    wait_for_report,
    widen_sidebar,
    write_tiny_wan_lora,
)

REPO = Path(__file__).resolve().parents[2]
WAN = "pm_tiny_wan21.safetensors"
WAN_VAE = "pm_tiny_wan21_vae.safetensors"
LORA = "pm_browser_lora.safetensors"
PACK_FOLDER = "pipeline-monitor"  # the name the session server links the pack under


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    path = artifacts_dir(tmp_path_factory)
    print(f"\nbrowser screenshots and downloads: {path}")
    return path


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    instance = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    yield instance
    instance.close()
    playwright.stop()


@pytest.fixture(scope="module")
def page(browser, server):
    import requests

    write_tiny_wan_lora(server.base, LORA)
    # A fresh user: skip the first-run template browser.
    requests.post(server.url + "/api/settings", json={"Comfy.TutorialCompleted": True}, timeout=10)
    context = browser.new_context(viewport={"width": 1500, "height": 950}, accept_downloads=True)
    context.add_init_script(COUNT_PACK_TIMERS)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    open_app(page, server.url)
    yield page
    context.close()


@pytest.fixture(scope="module")
def runs(page, server, shots):
    """The tab opened, then the rich prompt queued twice from the page (the loaders cached the
    second time, the sampler, the VAE chain and the monitors run again)."""
    page.click(TAB_BUTTON)
    page.wait_for_selector(PANEL)
    widen_sidebar(page)
    ids = []
    for i in range(2):
        prompt_id = queue_from_page(page, rich_prompt(LORA, WAN, WAN_VAE, variant=i))
        if i == 0:
            # the live view while the prompt runs: the executing node is named in the values row
            try:
                page.wait_for_function(
                    "document.querySelector('.pm-executing b')?.textContent.startsWith('#')", timeout=20_000
                )
            except Exception:
                pass  # a very fast run can finish between two samples; checked below via samples
            page.screenshot(path=str(shots / "1_live_running.png"))
        ids.append(prompt_id)
        report = wait_for_report(server, prompt_id)
        assert report["status"] == "success", report["error"]
    return ids


def panel_stats(page) -> dict:
    return page.evaluate("({...window.__pipelineMonitor.stats})")


def test_only_the_entry_is_loaded_as_an_extension(page, server):
    listed = [path for path in server.get_json("/extensions") if f"/{PACK_FOLDER}/" in path]
    assert listed == [f"/extensions/{PACK_FOLDER}/pipeline_monitor.js"]
    # the frontend of the ComfyUI under test: the server runs with the Python of these tests
    assert page.evaluate("window.__COMFYUI_FRONTEND_VERSION__") == version("comfyui-frontend-package")
    names = page.evaluate("window.app.extensions.map((e) => e.name)")
    assert names.count("PipelineMonitor") == 1
    loaded = page.evaluate(
        "performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname)"
        ".filter((p) => p.includes('/pipeline-monitor/'))"
    )
    assert f"/extensions/{PACK_FOLDER}/pipeline_monitor.js" in loaded
    assert all(p.endswith((".js", ".mjs", ".css")) for p in loaded), loaded
    assert [p for p in loaded if p.endswith(".js")] == [f"/extensions/{PACK_FOLDER}/pipeline_monitor.js"]


def test_tab_and_settings_are_registered_and_settings_reach_the_server(page, server):
    import requests

    tabs = page.evaluate("window.app.extensionManager.getSidebarTabs().map((t) => t.id)")
    assert "pipeline-monitor" in tabs
    assert page.evaluate("window.app.extensionManager.setting.get('PipelineMonitor.SampleIntervalMs')") == 500
    page.evaluate("window.app.extensionManager.setting.set('PipelineMonitor.HistoryLength', 77)")
    deadline = time.monotonic() + 10
    while server.get_json("/pipeline_monitor/settings")["max_runs"] != 77 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.get_json("/pipeline_monitor/settings")["max_runs"] == 77
    # a restarted server forgets; the next page load sends the user's stored non-default values
    requests.post(server.url + "/pipeline_monitor/settings", json={"max_runs": 50}, timeout=10)
    open_app(page, server.url)  # loads the page again
    deadline = time.monotonic() + 10
    while server.get_json("/pipeline_monitor/settings")["max_runs"] != 77 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.get_json("/pipeline_monitor/settings")["max_runs"] == 77
    page.evaluate("window.app.extensionManager.setting.set('PipelineMonitor.HistoryLength', 50)")


def test_live_chart_is_fed_only_while_watching_and_paints(page, server, runs, shots):
    live = server.get_json("/pipeline_monitor/live")
    assert live["n_watchers"] == 1 and live["sink_attached"] is True
    before = panel_stats(page)["samples"]
    page.wait_for_function(f"window.__pipelineMonitor.stats.samples > {before + 1}", timeout=10_000)
    painted = page.evaluate(
        """() => { const c = document.querySelector('.pm-chart');
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }"""
    )
    assert painted > 1000
    named = "window.__pipelineMonitor.buffer.points.filter((p) => p.node).length"
    if page.evaluate(named) == 0:
        # the rich prompts can finish between two samples on a loaded machine: a node that runs
        # for 2 s while the panel watches must be named by the samples taken meanwhile
        slow = {
            "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
            "2": {"class_type": "PMTestSlow", "inputs": {"image": ["1", 0], "seconds": 2.0, "seed": 7}},
            "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
        }
        wait_for_report(server, queue_from_page(page, slow))
    assert page.evaluate(named) >= 1, "no sample named an executing node while the prompts ran"
    values = page.inner_text(".pm-live-values")
    assert "process RSS" in values and "RAM used" in values
    page.screenshot(path=str(shots / "2_live_after_runs.png"))


def test_run_list_run_view_and_step_cards(page, runs, shots):
    first, second = runs
    page.wait_for_selector(f'.pm-run-row[data-prompt-id="{second}"]:not(.pm-running-row)', timeout=10_000)
    rows = page.eval_on_selector_all(".pm-run-row", "rows => rows.map((r) => r.dataset.promptId)")
    assert rows.index(second) < rows.index(first), "newest first"
    page.screenshot(path=str(shots / "3_runs.png"))
    page.click(f'.pm-run-row[data-prompt-id="{first}"]')
    page.wait_for_selector(".pm-run .pm-step")
    kinds = page.eval_on_selector_all(".pm-step", "cards => cards.map((c) => c.dataset.kind)")
    assert {"lora", "vae_encode", "latent", "tensor_dump", "conditioning", "models"} <= set(kinds), kinds
    vae_badges = page.inner_text('.pm-step[data-kind="vae_encode"] .pm-step-head')
    assert "direct" in vae_badges or "tiled" in vae_badges or "cpu" in vae_badges
    lora_text = page.inner_text('.pm-step[data-kind="lora"]')
    # designed cards: the LoRA's own table, the unmatched key names by block, per-block bars
    assert LORA in lora_text and "Strength model / clip" in lora_text and "Rank" in lora_text
    assert "blocks 9: self_attn_q" in lora_text, lora_text
    assert page.locator('.pm-step[data-kind="lora"] .pm-bar').count() >= 1
    assert page.locator('.pm-step[data-kind="vae_encode"] .pm-attempts tbody tr').count() >= 1
    assert page.locator('.pm-step[data-kind="models"] .pm-models tbody tr').count() == 2
    # the LoRA loader ran in this first run: its card's memory section has a start and a peak time
    memory = page.locator('.pm-step[data-kind="lora"] .pm-memory')
    assert memory.count() == 1
    headers = memory.locator("thead th").all_inner_texts()
    assert "Start" in headers and "Peak" in headers, headers
    rss = memory.locator("tbody tr").first.inner_text()
    assert rss.startswith("process RSS") and "@ " in rss, rss
    assert "measured: LoraLoaderModelOnly #2" in memory.inner_text()
    # the memory table and the models table fit the card: nothing scrolls inside them
    for selector in ('.pm-step[data-kind="lora"] .pm-memory', '.pm-step[data-kind="models"] .pm-models'):
        overflow = page.eval_on_selector(selector, "e => e.closest('.pm-block').scrollWidth - e.closest('.pm-block').clientWidth")
        assert overflow <= 1, (selector, overflow)
    assert page.locator(".pm-nodes tr.pm-slowest").count() == 1
    assert page.locator(".pm-nodes tr.pm-hungriest").count() == 1
    page.screenshot(path=str(shots / "4_run_top.png"))
    # the hostile title and prompt text are shown as text (the conditioning card shows the
    # prompt, positive beside negative) and never run; no card shows JSON, it is a download
    prompt_text = page.inner_text('.pm-step[data-kind="conditioning"] .pm-sides')
    assert "a cat 0 <img src=x onerror=" in prompt_text and "Negative" in prompt_text
    page.click('.pm-step[data-kind="conditioning"] .pm-details summary')
    assert page.locator(".pm-step .pm-json").count() == 0
    assert "{" not in page.inner_text('.pm-step[data-kind="conditioning"] .pm-details')
    assert page.evaluate("window.__pmXss") is None
    assert page.locator(f"{PANEL} img").count() == 0
    page.locator('.pm-step[data-kind="lora"]').scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "5_run_lora_card.png"))
    page.locator('.pm-step[data-kind="vae_encode"]').scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "6_run_vae_card.png"))
    # sorting by time puts the slowest first, then toggles
    page.click('.pm-nodes th[data-key="durationS"]')
    page.click('.pm-nodes th[data-key="durationS"]')
    assert "pm-slowest" in page.get_attribute(".pm-nodes tbody tr:first-child", "class")


def test_compare_view(page, runs, shots):
    first, second = runs
    # the Compare button's border holds its label
    assert page.eval_on_selector("button.pm-compare", "b => b.scrollWidth <= b.clientWidth + 1")
    page.select_option(".pm-compare-select", second)
    page.click(".pm-compare")
    page.wait_for_selector(".pm-compare .pm-compare-nodes")
    # every step is either a card of the figures that changed or named on the "no figure changed" line
    changed = page.locator(".pm-compare-step").count()
    same = page.locator(".pm-compare-same")
    unchanged = same.inner_text().count("#") if same.count() else 0
    assert changed >= 1 and changed + unchanged >= 6, (changed, unchanged)
    text = page.inner_text(".pm-compare")
    assert "regression" in text and "largest change first" in text.lower()
    assert "→" in page.inner_text(".pm-compare-nodes tbody tr:first-child")
    page.screenshot(path=str(shots / "7_compare.png"))
    page.click(".pm-compare .pm-back")
    page.wait_for_selector(".pm-run .pm-step")


def test_runs_are_named_by_their_workflow_and_compare_picks_the_same_workflow(page, server, runs, shots):
    """Queued as a user does (the app's own queue, so the graph travels as extra_pnginfo): the run
    carries the open workflow's name into the list, the compare picker and the HTML report."""
    workflow = json.loads((REPO / "example_workflows" / "models_profile_demo.json").read_text())
    before = {r["prompt_id"] for r in server.get_json("/pipeline_monitor/runs")["runs"]}
    named = []
    page.evaluate("(wf) => window.app.loadGraphData(wf, true, true, 'pm named demo')", workflow)
    for _ in range(2):
        page.evaluate("() => window.app.queuePrompt(0, 1)")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            fresh = [r for r in server.get_json("/pipeline_monitor/runs")["runs"] if r["prompt_id"] not in before | set(named)]
            if fresh:
                named.append(fresh[0]["prompt_id"])
                break
            time.sleep(0.3)
    assert len(named) == 2, "the app's queue produced no run"
    for prompt_id in named:  # the list shows a run as soon as it starts: wait for its end
        wait_for_report(server, prompt_id)
    summary = next(r for r in server.get_json("/pipeline_monitor/runs")["runs"] if r["prompt_id"] == named[1])
    assert summary["workflow_name"] == "pm named demo" and summary["workflow_id"]
    assert "n_warnings" in summary and "n_errors" in summary
    page.evaluate("window.__pipelineMonitor.show({name: 'runs'})")
    # the finished run's row (while it ran, the running row stood in its place)
    row = page.locator(f'.pm-run-row[data-prompt-id="{named[1]}"]:not(.pm-running-row)')
    row.wait_for(timeout=15_000)
    assert "pm named demo" in row.inner_text()
    assert "peak" in row.inner_text()
    page.screenshot(path=str(shots / "7b_runs_named.png"))
    row.click()
    page.wait_for_selector(f'.pm-run[data-prompt-id="{named[1]}"]')
    assert "pm named demo" in page.inner_text(".pm-run-head")
    # the rich runs came first and are newer than nothing of this workflow: the picker takes the
    # earlier run of the same workflow, not merely the previous run
    assert page.eval_on_selector(".pm-compare-select", "s => s.value") == named[0]
    html = server.get(f"/pipeline_monitor/runs/{named[1]}/report.html").text
    assert "<title>Pipeline Monitor · pm named demo ·" in html
    # the next tests start from the first rich run, as before this one
    page.evaluate("(id) => window.__pipelineMonitor.show({name: 'run', id})", runs[0])
    page.wait_for_selector(f'.pm-run[data-prompt-id="{runs[0]}"]')


def test_downloads_and_the_html_report_renders_offline(page, browser, runs, shots):
    first = runs[0]
    with page.expect_download() as info:
        page.click(".pm-export-json")
    json_path = shots / "report.json"
    info.value.save_as(str(json_path))
    assert json.loads(json_path.read_text())["prompt_id"] == first
    with page.expect_download() as info:
        page.click(".pm-export-html")
    html_path = shots / "report.html"
    info.value.save_as(str(html_path))
    text = html_path.read_text()
    assert "<script" not in text and EVIL not in text
    offline = browser.new_context(offline=True, java_script_enabled=True)
    report_page = offline.new_page()
    requests = []
    report_page.on("request", lambda request: requests.append(request.url))
    report_page.goto(html_path.as_uri())
    assert report_page.inner_text("h1") == "Pipeline Monitor report"
    assert report_page.locator("svg rect").count() > 5
    assert report_page.locator("section.card").count() >= 6
    assert report_page.evaluate("window.__pmXss") is None
    assert [url for url in requests if not url.startswith("file:")] == []
    report_page.screenshot(path=str(shots / "8_html_report.png"), full_page=True)
    offline.close()


def test_closed_tab_does_no_periodic_work(page, server, runs):
    # the top bar's readout keeps the page watching while it is shown: off for this test
    page.evaluate("window.app.extensionManager.setting.set('PipelineMonitor.TopBarReadout', false)")
    page.wait_for_selector(".pm-topbar", state="detached")
    before_open = page.evaluate("window.__pmTimerCalls")
    time.sleep(1.5)
    assert page.evaluate("window.__pmTimerCalls") > before_open, "open: draws are scheduled per sample"
    page.click(TAB_BUTTON)  # close
    page.wait_for_selector(PANEL, state="detached")
    deadline = time.monotonic() + 10
    while server.get_json("/pipeline_monitor/live")["sink_attached"] and time.monotonic() < deadline:
        time.sleep(0.1)
    live = server.get_json("/pipeline_monitor/live")
    assert live["n_watchers"] == 0 and live["sink_attached"] is False
    time.sleep(0.5)  # a push that was already in flight
    stats, timers = panel_stats(page), page.evaluate("window.__pmTimerCalls")
    pushed = server.get_json("/pipeline_monitor/live")["pushed"]
    time.sleep(3)
    assert panel_stats(page) == stats
    assert page.evaluate("window.__pmTimerCalls") == timers, (
        "a timer or animation frame ran with the tab closed"
    )
    assert server.get_json("/pipeline_monitor/live")["pushed"] == pushed
    page.click(TAB_BUTTON)  # reopen: watching again, data kept
    page.wait_for_selector(PANEL)
    assert server.get_json("/pipeline_monitor/live")["n_watchers"] == 1
    page.evaluate("window.app.extensionManager.setting.set('PipelineMonitor.TopBarReadout', true)")


def test_monitor_nodes_show_their_summary_on_the_node(page, server, shots):
    workflow = json.loads((REPO / "example_workflows" / "models_profile_demo.json").read_text())
    page.evaluate("(wf) => window.app.loadGraphData(wf)", workflow)
    page.evaluate("window.app.queuePrompt(0, 1)")
    page.wait_for_function(
        "[...document.querySelectorAll('.pm-node-summary')].some((e) => e.textContent.trim())", timeout=60_000
    )
    summary = page.inner_text(".pm-node-summary")
    assert "model" in summary and "vae" in summary
    serialized = page.evaluate("window.app.graph.serialize()")
    monitor = next(n for n in serialized["nodes"] if n["type"] == "PipelineMonitorModels")
    assert not monitor.get("widgets_values"), "the summary must not become a saved widget value"
    page.click(TAB_BUTTON)  # close the panel to see the graph
    page.wait_for_selector(PANEL, state="detached")
    page.evaluate(
        """() => { const node = window.app.graph.nodes.find((n) => n.type === 'PipelineMonitorModels');
          window.app.canvas.ds.scale = 1.2; window.app.canvas.centerOnNode(node); window.app.canvas.setDirty(true, true); }"""
    )
    page.wait_for_timeout(500)
    page.screenshot(path=str(shots / "9_node_summary.png"))

"""The top bar's live readout (issue 38, 8): on by default beside the Run button, live figures with
the panel closed, a click opens the panel, "Free memory" calls ComfyUI's /free and says what it
freed, and the setting switches it off (the page then stops watching)."""

from __future__ import annotations

import time

import pytest

from .browser_support import PANEL, app_page, artifacts_dir, toggle_tab

READOUT = ".actionbar-container .pm-topbar"
SETTING = "PipelineMonitor.TopBarReadout"


@pytest.fixture(scope="module")
def page(server):
    with app_page(server, width=1600, height=1000, open_panel=False) as page:
        yield page
        page.evaluate(f"window.app.extensionManager.setting.set('{SETTING}', true)")


def watchers(server, n: int) -> None:
    deadline = time.monotonic() + 10
    while server.get_json("/pipeline_monitor/live")["n_watchers"] != n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.get_json("/pipeline_monitor/live")["n_watchers"] == n


def test_the_readout_is_live_with_the_panel_closed(page, server, tmp_path_factory):
    page.wait_for_selector(READOUT)
    assert page.locator(PANEL).count() == 0
    page.wait_for_function(
        f"document.querySelector('{READOUT} .pm-topbar-values').textContent.includes('RAM')", timeout=15_000
    )
    text = page.inner_text(f"{READOUT} .pm-topbar-values")
    assert "GiB" in text and ("idle" in text or "running" in text), text
    watchers(server, 1)
    page.screenshot(path=str(artifacts_dir(tmp_path_factory) / "topbar_readout.png"))


def test_a_click_opens_the_panel_and_a_second_keeps_it_open(page):
    page.click(f"{READOUT} .pm-topbar-open")
    page.wait_for_selector(PANEL)
    page.click(f"{READOUT} .pm-topbar-open")
    page.wait_for_timeout(300)
    assert page.locator(PANEL).count() == 1
    toggle_tab(page)  # closed again
    page.wait_for_selector(PANEL, state="detached")


def test_free_memory_calls_comfyui_and_says_what_it_freed(page):
    page.click(f"{READOUT} .pm-topbar-free")
    page.get_by_text("Models unloaded", exact=False).first.wait_for(timeout=15_000)
    assert page.errors == []


def test_the_setting_switches_it_off_and_the_page_stops_watching(page, server):
    page.evaluate(f"window.app.extensionManager.setting.set('{SETTING}', false)")
    page.wait_for_selector(READOUT, state="detached")
    watchers(server, 0)  # neither the panel nor the readout is shown
    page.evaluate(f"window.app.extensionManager.setting.set('{SETTING}', true)")
    page.wait_for_selector(READOUT)
    watchers(server, 1)
    assert page.errors == []

"""The panel's live renewals follow what is shown, whatever the frontend calls (issue 38, 1):
switching from the panel to another sidebar tab (which frontends 1.49 and 1.58 do without calling
the tab's destroy) stops the POST /pipeline_monitor/live renewals, switching back resumes them,
and open-then-switch cycles never leave more than one renewal interval behind. Its messages use
the frontend's current toast calls (issue 38, 3)."""

from __future__ import annotations

import time

import pytest

from .browser_support import COUNT_PACK_TIMERS, PANEL, TAB_BUTTON, TAB_ID, app_page, toggle_tab

RENEW_MS = 200  # the panel's 10 s renewal, shortened for the test
READOUT_SETTING = "PipelineMonitor.TopBarReadout"


@pytest.fixture(scope="module")
def page(server):
    with app_page(server, init_script=COUNT_PACK_TIMERS, open_panel=False) as page:
        page.evaluate(f"window.__pipelineMonitor.live.renewMs = {RENEW_MS}")
        # the top bar's readout keeps the page watching while it is shown: off, to see the panel's part
        page.evaluate(f"window.app.extensionManager.setting.set('{READOUT_SETTING}', false)")
        page.wait_for_selector(".pm-topbar", state="detached")
        yield page
        page.evaluate(f"window.app.extensionManager.setting.set('{READOUT_SETTING}', true)")


def renewals(page) -> int:
    return page.evaluate("window.__pipelineMonitor.stats.renewals")


def live_intervals(page) -> int:
    return page.evaluate("window.__pmIntervals.size")


def other_tab(page) -> str:
    tabs = page.evaluate("window.app.extensionManager.getSidebarTabs().map((t) => t.id)")
    return next(t for t in tabs if t != TAB_ID)


def wait_for_watchers(server, n: int) -> None:
    deadline = time.monotonic() + 10
    while server.get_json("/pipeline_monitor/live")["n_watchers"] != n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.get_json("/pipeline_monitor/live")["n_watchers"] == n


def test_switching_to_another_tab_stops_renewals_and_switching_back_resumes(page, server):
    page.click(TAB_BUTTON)  # the user's click, on the button every frontend draws
    page.wait_for_selector(PANEL)
    page.wait_for_function("window.__pipelineMonitor.stats.renewals >= 3")
    wait_for_watchers(server, 1)
    assert live_intervals(page) == 1

    toggle_tab(page, other_tab(page))
    page.wait_for_selector(PANEL, state="detached")
    wait_for_watchers(server, 0)  # the server was told: no more samples for this page
    assert live_intervals(page) == 0
    hidden = renewals(page)
    pushed = server.get_json("/pipeline_monitor/live")["pushed"]
    page.wait_for_timeout(RENEW_MS * 8)
    assert renewals(page) == hidden, "renewals went on with the panel hidden"
    assert server.get_json("/pipeline_monitor/live")["pushed"] == pushed

    toggle_tab(page)  # back to the panel
    page.wait_for_selector(PANEL)
    page.wait_for_function(f"window.__pipelineMonitor.stats.renewals >= {hidden + 3}")
    wait_for_watchers(server, 1)
    assert live_intervals(page) == 1


def test_open_then_switch_cycles_leave_one_interval(page, server):
    for _ in range(3):
        toggle_tab(page, other_tab(page))
        page.wait_for_selector(PANEL, state="detached")
        toggle_tab(page)
        page.wait_for_selector(PANEL)
    assert live_intervals(page) == 1
    assert page.locator(PANEL).count() == 1
    wait_for_watchers(server, 1)
    toggle_tab(page)  # closed by its own button: destroy, nothing left running
    page.wait_for_selector(PANEL, state="detached")
    wait_for_watchers(server, 0)
    assert live_intervals(page) == 0
    assert page.errors == []


def test_a_message_reaches_the_screen_through_the_frontends_toast(page):
    page.evaluate("window.__pipelineMonitor.actions.focusNode('98765')")
    page.get_by_text("Node #98765 is not in the workflow on the canvas.").first.wait_for(timeout=10_000)
    assert page.errors == []

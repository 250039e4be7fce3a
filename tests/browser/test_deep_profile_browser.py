"""The deep profile from the panel in the real ComfyUI 0.8 UI: the title bar's button arms and
cancels it (the route agrees), a prompt queued while armed is deep-profiled and turns the button
off, its run is marked in the list and shows the Deep profile card (bars and top ops), and the next
prompt is plain. Screenshots go to PIPELINE_MONITOR_ARTIFACTS (or a pytest temp folder)."""

from __future__ import annotations

import pytest

from .browser_support import (
    PANEL,
    app_page,
    artifacts_dir,
    queue_from_page,
    wait_for_report,
)

TOGGLE = f"{PANEL} .pm-deep-toggle"


def small_prompt(width: int) -> dict:
    return {
        "1": {"class_type": "EmptyImage", "inputs": {"width": width, "height": 64, "batch_size": 1, "color": 0}},
        "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
        "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
    }


@pytest.fixture(scope="module")
def page(server):
    with app_page(server) as page:
        yield page


def wait_armed(page, armed: bool) -> None:
    page.wait_for_selector(f'{TOGGLE}[data-armed="{str(armed).lower()}"]', timeout=15_000)


def test_the_button_arms_and_cancels_through_the_route(page, server):
    requests_state = lambda: server.get_json("/pipeline_monitor/deep_profile")["armed"]  # noqa: E731
    wait_armed(page, requests_state())
    if requests_state():
        page.click(TOGGLE)
        wait_armed(page, False)
    page.click(TOGGLE)
    wait_armed(page, True)
    assert requests_state() is True
    assert page.inner_text(TOGGLE) == "Deep profile: armed"
    page.click(TOGGLE)
    wait_armed(page, False)
    assert requests_state() is False


def test_an_armed_prompt_is_deep_profiled_once_and_the_card_shows_it(page, server, tmp_path_factory):
    shots = artifacts_dir(tmp_path_factory)
    wait_armed(page, False)
    page.click(TOGGLE)
    wait_armed(page, True)
    deep_id = queue_from_page(page, small_prompt(72))
    report = wait_for_report(server, deep_id)
    assert report["status"] == "success"
    assert any(s["kind"] == "deep_profile" for s in report["steps"])
    wait_armed(page, False)  # the run's announcement refreshed the button: the request is used up
    page.evaluate("window.__pipelineMonitor.show({name: 'runs'})")
    # the finished rows, not the running ones: a running row is replaced when its run's announcement
    # comes, and a click on it (or a card opened under it) goes with it
    row = page.locator(f'.pm-run-row[data-prompt-id="{deep_id}"]:not(.pm-running-row)')
    row.wait_for(timeout=15_000)
    assert "deep" in row.locator(".pm-badge").all_inner_texts()
    plain_id = queue_from_page(page, small_prompt(80))
    plain = wait_for_report(server, plain_id)
    assert not any(s["kind"] == "deep_profile" for s in plain["steps"])
    plain_row = page.locator(f'.pm-run-row[data-prompt-id="{plain_id}"]:not(.pm-running-row)')
    plain_row.wait_for(timeout=15_000)
    assert "deep" not in plain_row.locator(".pm-badge").all_inner_texts()
    row.click()
    card = page.locator(f'.pm-run[data-prompt-id="{deep_id}"] .pm-step[data-kind="deep_profile"]')
    card.wait_for(timeout=30_000)  # the run view fetches the run's report and its workflow's history
    text = card.inner_text()
    assert "Deep profile" in text and "Wall time vs host op time per node" in text
    assert "ImageInvert" in text and "Top ops per node (by host time)" in text
    assert card.locator(".pm-bar-row").count() >= 2
    card.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "deep_profile_card.png"))
    assert page.errors == []

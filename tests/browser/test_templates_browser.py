"""Every example workflow opened from the template browser as a new user does (issue 38, 4 and 5):
Chromium at 1600 x 1000, the Pipeline Monitor panel open at the sidebar's default width, Browse
Templates -> the pack -> the card. Each one loads with every node type known and every link, opens
readable (LiteGraph draws titles: the zoom is over its low-quality threshold) with no node under
the open sidebar, and shows no missing-file warning, except the example made for the user's own
SD1.5 checkpoint and LoRA, which names exactly those two. ComfyUI serves a pack's examples from
`example_workflows/` (app/custom_node_manager.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .browser_support import app_page

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "example_workflows"
PACK_FOLDER = "pipeline-monitor"  # the name the session server links the pack under
# Made for the user's own models; every other example runs on the pack's tiny generated models.
OWN_MODELS = {"text_to_image_lora_monitor": {"v1-5-pruned-emaonly-fp16.safetensors", "my_style_lora.safetensors"}}

# Visible texts that say something is missing (a toast, a dialog, a node's error), textareas (a
# Note's text) left out.
MISSING_TEXTS = """() => [...document.querySelectorAll('body *')]
  .filter((e) => e.tagName !== 'TEXTAREA' && e.children.length === 0 && /missing/i.test(e.textContent)
    && e.getClientRects().length > 0)
  .map((e) => e.textContent.trim())"""

# Each node's box on the screen (its title bar included) and the open sidebar's right edge.
PLACEMENT = """() => {
  const canvas = window.app.canvas, rect = canvas.canvas.getBoundingClientRect();
  const title = window.LiteGraph.NODE_TITLE_HEIGHT;
  const toScreen = (x, y) => [rect.left + (x + canvas.ds.offset[0]) * canvas.ds.scale,
                              rect.top + (y + canvas.ds.offset[1]) * canvas.ds.scale];
  const nodes = window.app.graph.nodes.map((n) => {
    const [left, top] = toScreen(n.pos[0], n.pos[1] - title);
    const [right, bottom] = toScreen(n.pos[0] + n.size[0], n.pos[1] + n.size[1]);
    return {id: n.id, type: n.type, left, top, right, bottom};
  });
  const sidebar = document.querySelector('.sidebar-content-container').getBoundingClientRect();
  return {nodes, sidebarRight: sidebar.right, scale: canvas.ds.scale, lowQuality: canvas.low_quality,
          viewportWidth: window.innerWidth};
}"""


@pytest.fixture(scope="module")
def page(server):
    with app_page(server, width=1600, height=1000) as page:
        yield page


def dismiss_messages(page) -> None:
    page.evaluate(
        "() => { const t = window.app.extensionManager.toast; (t.dismissAll ?? t.removeAll)?.call(t); }"
    )
    page.keyboard.press("Escape")


# Whether a card still shows a leaf element whose whole text is the file name (the frontend's title).
SHOWS_FILE_NAME = """([selector, name]) => [...document.querySelectorAll(selector + ' *')]
  .some((e) => e.childElementCount === 0 && e.textContent.trim() === name)"""


def open_from_template_browser(page, name: str, title: str) -> None:
    """Browse Templates -> the pack -> the card (`[role=dialog]` in every frontend: PrimeVue's
    `.p-dialog` in 1.35, reka-ui's since 1.49). The card's title is the workflow's, not its file
    name (web/lib/templates.mjs)."""
    page.evaluate("window.app.extensionManager.command.execute('Comfy.BrowseTemplates')")
    dialog = page.locator("[role=dialog]")
    dialog.get_by_text(PACK_FOLDER, exact=True).first.click()
    selector = f'[data-testid="template-workflow-{name}"]'
    card = dialog.locator(selector).first
    card.wait_for()
    page.wait_for_function(f"(arg) => !({SHOWS_FILE_NAME})(arg)", arg=[selector, name])
    headings = card.locator("h3")
    if headings.count():  # frontends since 1.49 title a card with an h3
        assert headings.first.inner_text().strip() == title, (name, headings.first.inner_text())
    card.click()
    page.wait_for_selector("[role=dialog] >> text=" + PACK_FOLDER, state="detached", timeout=20_000)


def test_every_example_opens_readable_and_complete_from_the_template_browser(page, server):
    files = sorted(EXAMPLES.glob("*.json"))
    assert len(files) >= 4
    templates = server.get_json("/workflow_templates")
    assert sorted(templates[PACK_FOLDER]) == sorted(f.stem for f in files), "each listed once"
    for path in files:
        workflow = json.loads(path.read_text())
        assert server.get_json(f"/api/workflow_templates/{PACK_FOLDER}/{path.name}") == workflow
        # the template browser's thumbnail (a real screenshot, scripts/make_screenshots.py) and the
        # Note that says what to look at
        thumbnail = server.get(f"/api/workflow_templates/{PACK_FOLDER}/{path.stem}.jpg")
        assert thumbnail.status_code == 200 and thumbnail.content[:2] == b"\xff\xd8", path.stem
        assert any(n["type"] == "Note" and n["widgets_values"][0].startswith("What to look at") for n in workflow["nodes"])

        open_from_template_browser(page, path.stem, workflow["extra"]["title"])
        page.wait_for_function(f"window.app.graph.nodes.length === {len(workflow['nodes'])}", timeout=20_000)
        types = page.evaluate("window.app.graph.nodes.map((n) => n.type)")
        assert sorted(types) == sorted(n["type"] for n in workflow["nodes"]), path.name
        unknown = page.evaluate(
            "window.app.graph.nodes.filter((n) => !window.LiteGraph.registered_node_types[n.type]).map((n) => n.type)"
        )
        assert unknown == [], (path.name, unknown)
        links = page.evaluate("Object.keys(window.app.graph.links ?? {}).length || window.app.graph.links.size")
        assert links == len(workflow["links"]), path.name
        page.wait_for_timeout(800)  # a missing-model scan answers after the graph is drawn

        missing = page.evaluate(MISSING_TEXTS)
        own = OWN_MODELS.get(path.stem, set())
        assert all(any(name in text for name in own) for text in missing if "." in text), (path.name, missing)
        if not own:
            assert missing == [], (path.name, missing)

        placed = page.evaluate(PLACEMENT)
        assert placed["lowQuality"] is False, (path.name, placed["scale"])  # titles and widgets drawn
        under = [n for n in placed["nodes"] if n["left"] < placed["sidebarRight"]]
        assert under == [], (path.name, placed["sidebarRight"], under)
        cut = [n for n in placed["nodes"] if n["right"] > placed["viewportWidth"]]
        assert cut == [], (path.name, cut)
        dismiss_messages(page)
    assert page.errors == []

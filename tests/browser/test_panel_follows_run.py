"""The panel follows the run, at 1600x1000 with ComfyUI's default sidebar width (312 px): a new
prompt brings a zoomed chart back to live, the running prompt is the first row of the runs list
(elapsed time, node, progress from the last run of the same workflow), no table is wider than its
box, compare rows are sorted by size of change, monitor summaries on the canvas never cover
another node, and the template browser shows each example's description. Text and geometry
assertions, no pixels; screenshots go to PIPELINE_MONITOR_ARTIFACTS (or a pytest temp folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .browser_support import (
    PANEL,
    app_page,
    artifacts_dir,
    wait_for_report,
)

WORKFLOW = "pm follow demo"
WORKFLOW_ID = "pm-follow"


def slow_prompt(seconds: float, seed: int) -> dict:
    """A slow node (the run lasts long enough to watch), a text encode with its monitor, and a
    tensor dump (the widest card table)."""
    return {
        "1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 64, "batch_size": 1, "color": 0}},
        "2": {"class_type": "PMTestSlow", "inputs": {"image": ["1", 0], "seconds": seconds, "seed": seed}},
        "3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
        "4": {"class_type": "PMTestTinyClip", "inputs": {"kind": "sd1", "seed": 0}},
        "5": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["4", 0], "text": f"a cat {seed}"}},
        "6": {
            "class_type": "PipelineMonitorConditioning",
            "inputs": {"positive": ["5", 0], "clip": ["4", 0]},
        },
        "7": {
            "class_type": "EmptyHunyuanLatentVideo",
            "inputs": {"width": 32, "height": 32, "length": 1, "batch_size": 1},
        },
        "8": {
            "class_type": "PipelineMonitorTensorDump",
            "inputs": {"latent": ["7", 0], "name": f"pm_follow_{seed}", "npy": False},
        },
    }


def queue_as_frontend(page, prompt: dict) -> str:
    """Queue through the frontend's own api.queuePrompt, as the Run button does, with the graph's
    extra data naming the workflow."""
    workflow = {"id": WORKFLOW_ID, "nodes": [], "extra": {"pipeline_monitor_workflow_name": WORKFLOW}}
    return page.evaluate(
        """async ([prompt, workflow]) => {
             const r = await window.comfyAPI.api.api.queuePrompt(0, {output: prompt, workflow});
             return r.prompt_id; }""",
        [prompt, workflow],
    )


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return artifacts_dir(tmp_path_factory)


@pytest.fixture(scope="module")
def page(server):
    with app_page(server, width=1600, height=1000) as page:
        yield page


@pytest.fixture(scope="module")
def first_run(page, server):
    prompt_id = queue_as_frontend(page, slow_prompt(1.0, 1))
    report = wait_for_report(server, prompt_id)
    assert report["status"] == "success", report["error"]
    page.evaluate("window.__pipelineMonitor.show({name: 'runs'})")
    # the finished row, not the running one: the run's announcement comes in the store's batch, after
    # the report can already be read
    page.locator(f'.pm-run-row[data-prompt-id="{prompt_id}"]:not(.pm-running-row)').wait_for(timeout=15_000)
    return prompt_id


def test_a_new_prompt_brings_the_zoomed_chart_back_to_live_and_is_the_first_row(
    page, server, first_run, shots
):
    page.click(f'.pm-run-row[data-prompt-id="{first_run}"]')
    page.locator(".pm-zoom-bar").wait_for(state="visible", timeout=5_000)
    assert page.evaluate("window.__pipelineMonitor.zoom.promptId") == first_run

    running = queue_as_frontend(page, slow_prompt(4.0, 2))
    page.wait_for_function("window.__pipelineMonitor.zoom === null", timeout=10_000)
    assert page.locator(".pm-zoom-bar").is_hidden()
    page.click(".pm-back")
    row = page.locator(f'.pm-run-list > .pm-running-slot .pm-running-row[data-prompt-id="{running}"]')
    row.wait_for(timeout=10_000)
    first_child = page.evaluate("document.querySelector('.pm-run-list').firstElementChild.className")
    assert "pm-running-slot" in first_child, "the running prompt is the list's first row"
    assert WORKFLOW in row.inner_text() and "running" in row.inner_text()
    elapsed = row.locator(".pm-running-elapsed").inner_text()
    page.wait_for_function(
        "(before) => { const e = document.querySelector('.pm-running-elapsed'); return e && e.textContent !== before; }",
        arg=elapsed,
        timeout=10_000,
    )
    page.wait_for_function(
        "document.querySelector('.pm-running-node')?.textContent.includes('#2')", timeout=10_000
    )
    assert "% of the last run" in row.locator(".pm-progress-text").inner_text()
    page.screenshot(path=str(shots / "follows_running_row.png"))
    wait_for_report(server, running)
    page.locator(f'.pm-run-row[data-prompt-id="{running}"]:not(.pm-running-row)').wait_for(timeout=15_000)
    assert page.locator(".pm-running-row").count() == 0
    assert not page.errors, page.errors


# Every table in the panel against the box it sits in: the table's own scroll width, and its
# wrapper's, never more than the wrapper's width (no hidden column), and no figure wrapped between
# number and unit (a .pm-num cell is one line unless it holds a second, labelled line).
TABLES_FIT = """(panel) => {
  const root = document.querySelector(panel), out = [];
  for (const table of root.querySelectorAll('table')) {
    const box = table.parentElement;
    if (!table.getClientRects().length) continue;
    out.push({cls: table.className, table: table.scrollWidth, box: box.clientWidth, boxScroll: box.scrollWidth});
  }
  const wrapped = [];
  for (const td of root.querySelectorAll('td.pm-num')) {
    const line = parseFloat(getComputedStyle(td).lineHeight) || 16;
    const text = td.firstChild && td.firstChild.nodeType === 3 ? td.firstChild : null;
    if (!text || !text.textContent.trim()) continue;
    const range = document.createRange(); range.selectNodeContents(text);
    if (range.getClientRects().length > 1) wrapped.push(td.textContent);
  }
  return {tables: out, wrapped, panel: root.scrollWidth, panelBox: root.clientWidth};
}"""


def assert_tables_fit(page) -> dict:
    sizes = page.evaluate(TABLES_FIT, PANEL)
    assert sizes["tables"], "no table measured"
    for t in sizes["tables"]:
        assert t["table"] <= t["box"] + 1 and t["boxScroll"] <= t["box"] + 1, t
    assert sizes["panel"] <= sizes["panelBox"] + 1, sizes
    assert not sizes["wrapped"], sizes["wrapped"]
    return sizes


def test_no_table_is_wider_than_its_box_at_312_px(page, first_run, shots):
    width = page.eval_on_selector(PANEL, "e => e.getBoundingClientRect().width")
    assert 280 <= width <= 340, f"the sidebar is not at its default width: {width}px"
    page.evaluate("(id) => window.__pipelineMonitor.show({name: 'run', id})", first_run)
    page.wait_for_selector(f'.pm-run[data-prompt-id="{first_run}"] .pm-step[data-kind="tensor_dump"]')
    page.wait_for_selector(
        f'.pm-run[data-prompt-id="{first_run}"] .pm-step[data-kind="conditioning"] .pm-memory'
    )
    sizes = assert_tables_fit(page)
    assert any("pm-stackable" in t["cls"] for t in sizes["tables"]), "the dump's statistics reflow"
    # the node table's hidden columns are named on the toggle, and shown by it
    toggle = page.locator(".pm-columns-toggle")
    assert "Peak RSS" in toggle.inner_text()
    page.locator(f'.pm-run[data-prompt-id="{first_run}"] .pm-step[data-kind="tensor_dump"]').screenshot(
        path=str(shots / "tensor_dump_312px.png")
    )
    toggle.click()
    page.wait_for_selector(".pm-nodes th[data-key='peakRssBytes']")
    page.locator(".pm-columns-toggle").click()
    page.wait_for_selector(".pm-nodes th[data-key='peakRssBytes']", state="detached")
    assert not page.errors, page.errors


def test_compare_leads_with_the_largest_change_and_fits(page, server, first_run, shots):
    runs = page.evaluate(
        "(name) => window.__pipelineMonitor.runs.filter((r) => r.workflow_name === name).map((r) => r.prompt_id)",
        WORKFLOW,
    )
    newer = next(r for r in runs if r != first_run)
    page.evaluate("([a, b]) => window.__pipelineMonitor.show({name: 'compare', a, b})", [newer, first_run])
    page.wait_for_selector(".pm-compare .pm-compare-nodes")
    head = page.inner_text(".pm-compare-head")
    assert head.count(WORKFLOW) == 2 and first_run[:8] not in head, head
    changes = page.eval_on_selector_all(
        ".pm-compare-nodes tbody tr",
        "rows => rows.map((r) => [r.dataset.nodeId, parseFloat(r.dataset.change)])",
    )
    assert changes == sorted(changes, key=lambda c: -c[1]), changes
    assert changes[0][0] == "2", "the slow node went from 1 s to 4 s: the largest change leads"
    assert "earlier run" in page.inner_text(".pm-compare-basis")
    assert_tables_fit(page)
    page.locator(".pm-compare").screenshot(path=str(shots / "compare_312px.png"))
    assert not page.errors, page.errors


EXAMPLES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "example_workflows").glob("*.json"))

# Load an example into the canvas, give every monitor node the longest summary it can show (more
# lines than fit: the rest goes behind the tooltip), and return each node's rectangle in graph
# coordinates, title bar included, with whether its summary is cut mid-line.
SUMMARIES_ON_EXAMPLE = """async (workflow) => {
  const app = window.comfyAPI.app.app;
  await app.loadGraphData(workflow, true, true, 'pm-example');
  const lines = Array.from({length: 12}, (_, i) => `line ${i}: ` + 'a long figure, '.repeat(6));
  for (const node of app.graph.nodes) {
    if (String(node.type).startsWith('PipelineMonitor')) node.onExecuted({text: lines});
  }
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const title = window.LiteGraph?.NODE_TITLE_HEIGHT ?? 30;
  return app.graph.nodes.map((n) => {
    const w = (n.widgets || []).find((x) => x.name === 'pipeline_monitor_summary');
    return {id: n.id, type: n.type, monitor: String(n.type).startsWith('PipelineMonitor'),
      x: n.pos[0], y: n.pos[1] - title, w: n.size[0], h: n.size[1] + title,
      cut: w ? w.element.scrollHeight > w.element.clientHeight + 1 : false};
  });
}"""


def overlaps(a: dict, b: dict) -> bool:
    return (
        a["x"] < b["x"] + b["w"]
        and b["x"] < a["x"] + a["w"]
        and a["y"] < b["y"] + b["h"]
        and b["y"] < a["y"] + a["h"]
    )


@pytest.mark.parametrize("name", EXAMPLES)
def test_no_canvas_summary_covers_another_node(page, name):
    import json

    workflow = json.loads((Path(__file__).resolve().parents[2] / "example_workflows" / f"{name}.json").read_text())
    nodes = page.evaluate(SUMMARIES_ON_EXAMPLE, workflow)
    monitors = [n for n in nodes if n["monitor"]]
    assert monitors, f"{name} has no monitor node"
    covered = [
        (m["id"], m["type"], o["id"], o["type"])
        for m in monitors
        for o in nodes
        if o is not m and overlaps(m, o)
    ]
    assert not covered, f"{name}: summaries cover nodes: {covered}"
    assert not [m["id"] for m in monitors if m["cut"]], f"{name}: a summary is cut mid-line"


def test_template_cards_show_each_examples_description(page, shots):
    import json

    folder = Path(__file__).resolve().parents[2] / "example_workflows"
    page.evaluate("window.app.extensionManager.command.execute('Comfy.BrowseTemplates')")
    dialog = page.locator("[role=dialog]")
    dialog.get_by_text("pipeline-monitor", exact=True).first.click()
    for path in sorted(folder.glob("*.json")):
        extra = json.loads(path.read_text())["extra"]
        info = extra["info"]
        card = dialog.locator(f'[data-testid="template-workflow-{path.stem}"]')
        card.wait_for(timeout=20_000)
        page.wait_for_function(
            """([testid, text]) => [...document.querySelectorAll(`[data-testid="${testid}"] *`)]
                 .some((e) => e.childElementCount === 0 && e.textContent === text && e.title === text)""",
            arg=[f"template-workflow-{path.stem}", info],
            timeout=10_000,
        )
        # titled with the workflow's title; its file name in the title's tooltip
        page.wait_for_function(
            """([testid, title, name]) => [...document.querySelectorAll(`[data-testid="${testid}"] *`)]
                 .some((e) => e.childElementCount === 0 && e.textContent === title && e.title === name)""",
            arg=[f"template-workflow-{path.stem}", extra["title"], path.name],
            timeout=10_000,
        )
    lora = dialog.locator('[data-testid="template-workflow-text_to_image_lora_monitor"]')
    assert "Needs your own models" in lora.inner_text()
    page.screenshot(path=str(shots / "template_browser_descriptions.png"))
    dialog.locator('[data-testid="template-workflow-models_profile_demo"]').click()  # opening one closes the browser
    page.wait_for_selector("[role=dialog]", state="detached", timeout=20_000)
    assert not page.errors, page.errors

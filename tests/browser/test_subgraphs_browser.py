"""Subgraphs in the browser, on any frontend with subgraphs: the example workflow models_profile_demo
run once, then its monitor and VAE nodes converted to a subgraph (and the VAE pair to a subgraph
inside it) as "Convert to Subgraph" does. The fully cached run still shows the monitor's card;
after an input change the run's node table groups rows under collapsible subgraph roll-ups, the
subgraph nodes and the nodes inside them carry badges, and a row click opens the subgraph."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from tests.browser.browser_support import app_page, wait_for_report

REPO = Path(__file__).resolve().parents[2]
PANEL = ".pipeline-monitor-panel"

# Convert the monitor (3) and the VAE pair (5, 6) of the root graph to a subgraph, then the VAE
# pair inside it to a nested one, as the canvas menu's "Convert to Subgraph" does; returns the ids.
CONVERT = """
() => {
  const root = window.app.rootGraph ?? window.app.graph;
  const convert = (graph, ids) => {
    const before = new Set(graph.nodes.map((n) => n.id));
    const made = graph.convertToSubgraph(new Set(ids.map((id) => graph.getNodeById(id))));
    return made?.node ?? graph.nodes.find((n) => !before.has(n.id) && n.subgraph);
  };
  const outer = convert(root, [3, 5, 6]);
  const inner = convert(outer.subgraph, [5, 6]);
  return {outer: String(outer.id), inner: String(inner.id), outerName: outer.subgraph.name, innerName: inner.subgraph.name};
}
"""
QUEUE_AND_WAIT_FOR_ID = """
async (before) => {
  await window.app.queuePrompt(0, 1);
  const api = window.comfyAPI.api.api;
  for (let i = 0; i < 600; i++) {
    const runs = (await (await api.fetchApi('/pipeline_monitor/runs')).json()).runs;
    const fresh = runs.find((r) => !before.includes(r.prompt_id));
    if (fresh) return fresh.prompt_id;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error('the app queue produced no run');
}
"""
SET_COLOR = """
(color) => {
  const root = window.app.rootGraph ?? window.app.graph;
  const image = root.nodes.find((n) => n.type === 'EmptyImage');
  image.widgets.find((w) => w.name === 'color').value = color;
}
"""
BADGES = """
(ids) => {
  const root = window.app.rootGraph ?? window.app.graph;
  const text = (node) => node?.__pipelineMonitorBadge?.text ?? null;
  const outer = root.getNodeById(Number(ids.outer));
  const inner = outer.subgraph.getNodeById(Number(ids.inner));
  return {outer: text(outer), inner: text(inner), decode: text(inner.subgraph.nodes.find((n) => n.type === 'VAEDecode')),
    monitor: text(outer.subgraph.nodes.find((n) => n.type === 'PipelineMonitorModels')),
    image: text(root.nodes.find((n) => n.type === 'EmptyImage'))};
}
"""


def run_from_page(page, server) -> dict:
    before = [r["prompt_id"] for r in server.get_json("/pipeline_monitor/runs?limit=1000")["runs"]]
    prompt_id = page.evaluate(QUEUE_AND_WAIT_FOR_ID, before)
    return wait_for_report(server, prompt_id, timeout_s=300)


def open_run(page, prompt_id: str) -> None:
    page.evaluate("(id) => window.__pipelineMonitor.show({name: 'run', id})", prompt_id)
    page.wait_for_selector(f'.pm-run[data-prompt-id="{prompt_id}"]', timeout=30_000)


@pytest.fixture(scope="module")
def subgraph_runs(server):
    workflow = json.loads((REPO / "example_workflows" / "models_profile_demo.json").read_text())
    with app_page(server, open_panel=False) as page:
        has_subgraphs = page.evaluate("() => typeof (window.app.rootGraph ?? window.app.graph).convertToSubgraph === 'function'")
        if not has_subgraphs:
            pytest.skip("this frontend has no subgraphs")
        page.evaluate("() => window.app.extensionManager.command.execute('Workspace.ToggleSidebarTab.pipeline-monitor')")
        page.wait_for_selector(PANEL)
        page.evaluate("(wf) => window.app.loadGraphData(wf, true, true, 'pm subgraph demo')", workflow)
        page.evaluate(SET_COLOR, random.randrange(1, 2**24))
        plain = run_from_page(page, server)
        ids = page.evaluate(CONVERT)
        cached = run_from_page(page, server)  # the same inputs: ComfyUI serves every node from its cache
        page.evaluate(SET_COLOR, random.randrange(1, 2**24))
        fresh = run_from_page(page, server)
        yield page, ids, plain, cached, fresh


def test_the_reports_roll_up_the_converted_subgraphs(subgraph_runs):
    _, ids, plain, cached, fresh = subgraph_runs
    assert plain["subgraphs"] == []
    outer, inner = f"{ids['outer']}", f"{ids['outer']}:{ids['inner']}"
    rollups = {s["id"]: s for s in fresh["subgraphs"]}
    assert set(rollups) == {outer, inner}
    assert rollups[outer]["name"] == ids["outerName"] and rollups[inner]["name"] == ids["innerName"]
    assert rollups[inner]["parent_id"] == outer
    assert {n.rpartition(":")[2] for n in rollups[outer]["node_ids"]} == {"3", "5", "6"}
    assert rollups[outer]["wall_s"] > 0 and rollups[inner]["wall_s"] > 0
    assert all(s["wall_s"] is None for s in cached["subgraphs"]) and cached["subgraphs"]


def test_a_cached_run_shows_the_card_of_the_monitor_inside_the_subgraph(subgraph_runs):
    page, ids, _, cached, _ = subgraph_runs
    (step,) = [s for s in cached["steps"] if s["kind"] == "models"]
    assert step["cached"] and step["node_id"] == f"{ids['outer']}:3"
    open_run(page, cached["prompt_id"])
    assert page.locator(".pm-run .pm-step").count() >= 1
    assert "No monitor nodes in this prompt" not in page.inner_text(".pm-run")


def test_the_node_table_groups_rows_under_collapsible_subgraphs(subgraph_runs):
    page, ids, _, _, fresh = subgraph_runs
    open_run(page, fresh["prompt_id"])
    outer, inner = ids["outer"], f"{ids['outer']}:{ids['inner']}"
    head = page.locator(f'.pm-subgraph-row[data-subgraph-id="{outer}"]')
    assert ids["outerName"] in head.inner_text() and "3 nodes" in head.inner_text()
    decode = f'.pm-nodes tr[data-node-id="{inner}:6"]'
    order = page.eval_on_selector_all(".pm-nodes tbody tr", "rows => rows.map((r) => r.dataset.subgraphId ?? r.dataset.nodeId)")
    assert order.index(outer) < order.index(inner) < order.index(f"{inner}:6")
    page.click(f'.pm-subgraph-row[data-subgraph-id="{inner}"]')
    assert page.locator(decode).count() == 0, "a folded subgraph hides its nodes"
    page.click(f'.pm-subgraph-row[data-subgraph-id="{inner}"]')
    page.wait_for_selector(decode)


def test_badges_on_subgraph_nodes_and_inside_them(subgraph_runs):
    page, ids, _, _, fresh = subgraph_runs
    deadline = time.monotonic() + 60  # the badges follow the run event (hang watchdog, not a speed bar)
    badges = page.evaluate(BADGES, ids)
    while (badges["decode"] is None or "wall" not in str(badges["outer"])) and time.monotonic() < deadline:
        time.sleep(0.2)
        badges = page.evaluate(BADGES, ids)
    assert "wall" in badges["outer"] and "wall" in badges["inner"], badges
    assert badges["decode"] and badges["image"], badges
    assert badges["monitor"] is None, "the monitor's loaders did not change: it was cached, no badge"


def test_a_row_click_opens_the_subgraph_and_centres_the_node(subgraph_runs):
    page, ids, _, _, fresh = subgraph_runs
    open_run(page, fresh["prompt_id"])
    inner = f"{ids['outer']}:{ids['inner']}"
    page.click(f'.pm-nodes tr[data-node-id="{inner}:6"]')
    shown = page.evaluate(
        """(ids) => {
          const canvas = window.app.canvas;
          const root = window.app.rootGraph ?? window.app.graph;
          const inner = root.getNodeById(Number(ids.outer)).subgraph.getNodeById(Number(ids.inner));
          const selected = Object.values(canvas.selected_nodes ?? {}).map((n) => String(n.id));
          return {inside: canvas.graph === inner.subgraph, selected};
        }""",
        ids,
    )
    assert shown == {"inside": True, "selected": ["6"]}
    page.evaluate("() => { const c = window.app.canvas; c.setGraph(window.app.rootGraph ?? window.app.graph); }")

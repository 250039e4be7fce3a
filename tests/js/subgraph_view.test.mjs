// Subgraphs in the panel: rows grouped under their roll-ups (nested, collapsible), the subgraph
// node's badge, badges inside subgraphs recursively, and a row click opening the subgraph.
import assert from "node:assert/strict";
import { test } from "node:test";
import { applyRunBadges, focusNode } from "../../web/lib/canvas_badges.mjs";
import { graphsWithPrefixes, groupedLines, parentSubgraph, resolveNodePath, subgraphBadgeText } from "../../web/lib/subgraph_view.mjs";

const MiB = 1024 ** 2;
const rollup = (o) => ({ id: "54", parent_id: null, name: "Upscale pass", node_ids: ["54:73", "54:62:174"], n_cached: 0,
  start_offset_s: 1, wall_s: 1.25, node_time_sum_s: 0.75, peak_rss_bytes: 300, peak_rss_above_start_bytes: 75, gpu_peaks: [], ...o });
const SUBGRAPHS = [rollup({}), rollup({ id: "54:62", parent_id: "54", name: "Inner", node_ids: ["54:62:174"], wall_s: 0.25 })];
const row = (nodeId) => ({ nodeId });

test("a node's subgraph is its id without the last part", () => {
  assert.equal(parentSubgraph("54:62:174"), "54:62");
  assert.equal(parentSubgraph("54:73"), "54");
  assert.equal(parentSubgraph("3"), null);
});

test("rows are grouped under their subgraphs, nested ones inside, in the sorted order", () => {
  const rows = ["54:62:174", "3", "54:73", "9"].map(row);
  const lines = groupedLines(rows, SUBGRAPHS, new Set());
  assert.deepEqual(lines.map((l) => [l.kind === "node" ? l.row.nodeId : `[${l.subgraph.id}]`, l.depth]),
    [["[54]", 0], ["[54:62]", 1], ["54:62:174", 2], ["54:73", 1], ["3", 0], ["9", 0]]);
  const folded = groupedLines(rows, SUBGRAPHS, new Set(["54:62"]));
  assert.deepEqual(folded.map((l) => (l.kind === "node" ? l.row.nodeId : `[${l.subgraph.id}]`)), ["[54]", "[54:62]", "54:73", "3", "9"]);
  assert.equal(folded[1].collapsed, true);
  assert.deepEqual(groupedLines(rows, SUBGRAPHS, new Set(["54"])).map((l) => l.depth), [0, 0, 0]);
});

test("a row whose subgraph has no roll-up stays at the level above", () => {
  const lines = groupedLines(["7:1", "54:73"].map(row), SUBGRAPHS.slice(0, 1), new Set());
  assert.deepEqual(lines.map((l) => (l.kind === "node" ? l.row.nodeId : `[${l.subgraph.id}]`)), ["7:1", "[54]", "54:73"]);
});

test("a subgraph's badge is its wall-clock time and the most a node inside added", () => {
  assert.equal(subgraphBadgeText(rollup({})), "1.25 s wall · +75 B");
  assert.equal(subgraphBadgeText(rollup({ gpu_peaks: [{ device: "cuda:0", peak_allocated_bytes: 9, peak_allocated_above_start_bytes: 40 * MiB }] })),
    "1.25 s wall · +40.0 MiB GPU");
  assert.equal(subgraphBadgeText(rollup({ wall_s: null, n_cached: 2 })), "cached");
});

function workflowGraph() {
  const inner = { id: "uuid-inner", nodes: [{ id: 174, type: "VAEDecode", badges: [] }] };
  const outer = { id: "uuid-outer", nodes: [{ id: 73, type: "KSampler", badges: [] }, { id: 62, type: "uuid-inner", subgraph: inner, badges: [] }] };
  const root = { id: "root", nodes: [{ id: 3, type: "EmptyImage", badges: [] }, { id: 54, type: "uuid-outer", subgraph: outer, badges: [] }] };
  return { root, outer, inner };
}

test("every graph is reached with the compound prefix of its nodes", () => {
  const { root, outer, inner } = workflowGraph();
  assert.deepEqual(graphsWithPrefixes(root).map(({ graph, prefix }) => [graph.id, prefix]),
    [["root", ""], ["uuid-outer", "54:"], ["uuid-inner", "54:62:"]]);
  const path = resolveNodePath(root, "54:62:174");
  assert.deepEqual(path?.instances.map((n) => n.id), [54, 62]);
  assert.equal(path?.node, inner.nodes[0]);
  assert.equal(resolveNodePath(root, "54:99"), null);
  assert.equal(resolveNodePath(root, "3:1"), null, "node 3 is no subgraph");
  assert.equal(resolveNodePath(root, "3")?.node, root.nodes[0]);
  assert.equal(outer.nodes.length, 2);
});

test("badges go on the subgraph nodes and on the nodes inside them, recursively", () => {
  const { root, outer, inner } = workflowGraph();
  const node = (id, type, duration) => ({ node_id: id, class_type: type, status: "executed", cached: false, duration_s: duration, gpu_peaks: [] });
  const report = { prompt_id: "p", status: "success", started_unix_s: 0,
    nodes: [node("3", "EmptyImage", 0.5), node("54:73", "KSampler", 1), node("54:62:174", "VAEDecode", 0.25)], subgraphs: SUBGRAPHS };
  assert.equal(applyRunBadges(root, report), 5);
  const text = (graphNode) => graphNode.badges[0]().text;
  assert.equal(text(root.nodes[1]), "1.25 s wall · +75 B");
  assert.equal(text(outer.nodes[0]), "1.00 s");
  assert.equal(text(outer.nodes[1]), "250 ms wall · +75 B");
  assert.equal(text(inner.nodes[0]), "250 ms");
  assert.match(root.nodes[1].badges[0]().title, /Upscale pass: 2 nodes/);
});

test("a row click opens the subgraph the node is in and centres the node", () => {
  const { root, inner } = workflowGraph();
  const calls = [];
  const canvas = { graph: root, openSubgraph: (graph, from) => { calls.push(["open", graph.id, from.id]); canvas.graph = graph; },
    setGraph: (graph) => { calls.push(["root", graph.id]); canvas.graph = graph; },
    centerOnNode: (n) => calls.push(["centre", n.id]), selectNode: (n) => calls.push(["select", n.id]) };
  const app = { rootGraph: root, canvas };
  assert.equal(focusNode(app, "54:62:174"), true);
  assert.deepEqual(calls, [["open", "uuid-inner", 62], ["centre", 174], ["select", 174]]);
  assert.equal(canvas.graph, inner);
  calls.length = 0;
  assert.equal(focusNode(app, "3"), true);
  assert.deepEqual(calls, [["root", "root"], ["centre", 3], ["select", 3]]);
  assert.equal(focusNode(app, "54:1"), false);
});

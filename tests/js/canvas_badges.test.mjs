import assert from "node:assert/strict";
import { test } from "node:test";
import { applyRunBadges, badgeTexts, focusNode, profileBadgeText, staleMonitorIds } from "../../web/lib/canvas_badges.mjs";

const MiB = 1024 ** 2;
const node = (o) => ({ node_id: "1", class_type: "KSampler", status: "executed", cached: false, duration_s: 1.8, peak_rss_above_start_bytes: 12 * MiB, gpu_peaks: [], ...o });

test("a badge gives time and what the node added; only for nodes that ran to the end", () => {
  assert.equal(profileBadgeText(node({})), "1.80 s · +12.0 MiB");
  assert.equal(profileBadgeText(node({ gpu_peaks: [{ device: "cuda:0", peak_allocated_bytes: 9, peak_allocated_above_start_bytes: 512 * MiB }] })), "1.80 s · +512.0 MiB GPU");
  assert.equal(profileBadgeText(node({ peak_rss_above_start_bytes: 0 })), "1.80 s");
  assert.equal(profileBadgeText(node({ status: "error", duration_s: 0.013 })), null, "a failed node gets no badge");
  assert.equal(profileBadgeText(node({ status: "cached", cached: true })), null);
  assert.equal(profileBadgeText(node({ status: "interrupted" })), null);
});

test("badges go only to graph nodes of the same class (the canvas may show another workflow)", () => {
  const report = { prompt_id: "p", status: "success", started_unix_s: 0, nodes: [node({}), node({ node_id: "2", class_type: "VAEDecode" })] };
  const texts = badgeTexts(report, (id) => ({ 1: "KSampler", 2: "SaveImage" })[id]);
  assert.deepEqual([...texts.keys()], ["1"]);
});

test("applying badges adds one drawable badge per node and clears it on the next run", () => {
  const graphNode = { id: 1, type: "KSampler", badges: [] };
  const other = { id: 5, type: "SaveImage" };
  const graph = { nodes: [graphNode, other] };
  assert.equal(applyRunBadges(graph, { prompt_id: "p", status: "success", started_unix_s: 0, nodes: [node({})] }), 1);
  assert.equal(graphNode.badges.length, 1);
  const badge = graphNode.badges[0]();
  const ctx = { font: "", measureText: (t) => ({ width: t.length * 6 }) };
  assert.ok(badge.getWidth(ctx) > 0 && badge.height > 0);
  assert.equal(other.badges, undefined, "nodes without a figure get nothing");
  applyRunBadges(graph, { prompt_id: "q", status: "error", started_unix_s: 1, nodes: [] });
  assert.equal(graphNode.badges.length, 1, "the same badge is reused");
  assert.equal(graphNode.badges[0]().getWidth(ctx), 0, "and shows nothing for a run the node did not finish");
});

test("monitor summaries are stale when the run failed before the monitor ran", () => {
  const report = { prompt_id: "p", status: "error", started_unix_s: 0, nodes: [node({ node_id: "3" }), node({ node_id: "4", status: "cached", cached: true })] };
  assert.deepEqual(staleMonitorIds(report, ["3", "4", "9"]), ["9"]);
  assert.deepEqual(staleMonitorIds({ ...report, status: "success" }, ["9"]), []);
});

test("focusing a node centres and selects it; a missing node says so", () => {
  const calls = [];
  const target = { id: 7 };
  const app = { graph: { getNodeById: (id) => (id === 7 ? target : null) }, canvas: { centerOnNode: (n) => calls.push(["centre", n.id]), selectNode: (n) => calls.push(["select", n.id]) } };
  assert.equal(focusNode(app, "7"), true);
  assert.deepEqual(calls, [["centre", 7], ["select", 7]]);
  assert.equal(focusNode(app, "8"), false);
});

test("badges are coloured by the node's share of the run and say the change since the last run", async () => {
  const { runBadges, heatColor } = await import("../../web/lib/canvas_badges.mjs");
  const report = { prompt_id: "p2", status: "success", started_unix_s: 2, nodes: [node({ duration_s: 3 }), node({ node_id: "2", class_type: "VAEDecode", duration_s: 1 })] };
  const previous = { prompt_id: "p1", status: "success", started_unix_s: 1, nodes: [node({ duration_s: 2.5 }), node({ node_id: "2", class_type: "VAEDecode", duration_s: 1.005 })] };
  const badges = runBadges(report, (id) => ({ 1: "KSampler", 2: "VAEDecode" })[id], previous);
  assert.equal(badges.get("1")?.share, 0.75);
  assert.equal(badges.get("1")?.text, "3.00 s · +12.0 MiB (+500 ms)");
  assert.equal(badges.get("2")?.text, "1.00 s · +12.0 MiB", "a 5 ms change is no change");
  assert.match(String(badges.get("1")?.title), /75 % of the run/);
  assert.equal(heatColor(0.75), "hsl(0, 60%, 36%)", "half the run or more: red");
  assert.equal(heatColor(0), "hsl(210, 60%, 28%)");
});

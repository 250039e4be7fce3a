// The canvas tied to the last run: a small time / memory badge on every node that ran to the end
// (the per-node profile, drawn through the node's own `badges` list, which LiteGraph draws above
// the title; no draw method is replaced), coloured on a heat scale by the node's share of the run
// and saying how its time changed since the last run of the workflow, monitor summaries marked stale when the run that should
// have refreshed them failed, and centring a node from the panel.
import { formatBytes, formatSeconds, isNumber } from "./format.mjs";
import { nodeGpuAdded, nodeRssAdded } from "./report_view.mjs";
import { graphsWithPrefixes, isSubgraphNode, resolveNodePath, subgraphBadgeText, subgraphName } from "./subgraph_view.mjs";

const BADGE_KEY = "__pipelineMonitorBadge";

/**
 * The badge text of one profiled node: "1.80 s · +11.5 MiB" (memory it added: GPU allocated where
 * measured, else RSS); null for nodes that did not run to the end (cached, failed, interrupted).
 * @param {import("./report_view.mjs").NodeProfile} node
 */
export function profileBadgeText(node) {
  if (!node || node.cached || node.status !== "executed" || !isNumber(node.duration_s)) return null;
  const gpu = nodeGpuAdded(node);
  const added = gpu ?? nodeRssAdded(node);
  const memory = isNumber(added) && added > 0 ? ` · +${formatBytes(added)}${gpu !== null ? " GPU" : ""}` : "";
  return `${formatSeconds(node.duration_s)}${memory}`;
}

/** A time change worth a word on the badge. */
const MIN_CHANGE_S = 0.01;

/**
 * The badge's change since the last run of the workflow: "+0.42 s", "-1.10 s"; null when the node
 * did not run to the end there, or the change is under MIN_CHANGE_S.
 * @param {import("./report_view.mjs").NodeProfile} node
 * @param {import("./report_view.mjs").NodeProfile | undefined} before the same node in the last run
 */
export function changeSinceText(node, before) {
  if (!before || before.cached || before.status !== "executed" || !isNumber(before.duration_s) || !isNumber(node.duration_s)) return null;
  const delta = node.duration_s - before.duration_s;
  if (Math.abs(delta) < MIN_CHANGE_S) return null;
  return `${delta > 0 ? "+" : "-"}${formatSeconds(Math.abs(delta))}`;
}

/**
 * A heat-scale colour for a share of the run: cool blue for a sliver, through amber, to red for
 * half the run or more.
 * @param {number} share 0..1
 */
export function heatColor(share) {
  const t = Math.max(0, Math.min(1, share * 2));
  const hue = Math.round(210 - 210 * t); // 210 blue -> 0 red
  return `hsl(${hue}, 60%, ${Math.round(28 + 8 * t)}%)`;
}

/**
 * Per graph node id, the badge for a report: its text (time, memory added, change since the last
 * run of the workflow) and its share of the run; only nodes whose class matches the graph's node
 * of that id (the graph on screen may not be the one that ran).
 * @param {import("./report_view.mjs").RunReport} report
 * @param {(id: string) => string | null | undefined} classOf class of the graph's node with that id
 * @param {import("./report_view.mjs").RunReport | null} [previous] the last run of the same workflow
 * @returns {Map<string, {text: string, share: number, title: string}>}
 */
export function runBadges(report, classOf, previous = null) {
  const ran = (report.nodes ?? []).filter((n) => profileBadgeText(n) !== null);
  const total = ran.reduce((sum, n) => sum + /** @type {number} */ (n.duration_s), 0) || 1;
  const before = new Map((previous?.nodes ?? []).map((n) => [`${n.node_id}\u0000${n.class_type}`, n]));
  const badges = new Map();
  for (const node of ran) {
    const id = String(node.node_id);
    if (node.class_type && classOf(id) !== node.class_type) continue;
    const share = /** @type {number} */ (node.duration_s) / total;
    const change = changeSinceText(node, before.get(`${node.node_id}\u0000${node.class_type}`));
    const text = `${profileBadgeText(node)}${change ? ` (${change})` : ""}`;
    const title = `${Math.round(100 * share)} % of the run's node time${change ? `; ${change} since the last run of this workflow` : ""}`;
    badges.set(id, { text, share, title });
  }
  return badges;
}

/**
 * Per graph node id, the badge text for a report (runBadges without the colours).
 * @param {import("./report_view.mjs").RunReport} report
 * @param {(id: string) => string | null | undefined} classOf class of the graph's node with that id
 */
export function badgeTexts(report, classOf) {
  return new Map([...runBadges(report, classOf)].map(([id, b]) => [id, b.text]));
}

/** A badge LiteGraph can draw (duck-typed like its LGraphBadge: height, getWidth, draw). */
class ProfileBadge {
  constructor() {
    this.text = "";
    this.color = "#1e3a5f";
    this.height = 18;
    this.fontSize = 11;
    this.padding = 5;
  }

  /** @param {CanvasRenderingContext2D} ctx */
  getWidth(ctx) {
    if (!this.text) return 0;
    const font = ctx.font;
    ctx.font = `${this.fontSize}px sans-serif`;
    const width = ctx.measureText(this.text).width + 2 * this.padding;
    ctx.font = font;
    return width;
  }

  /** @param {CanvasRenderingContext2D} ctx @param {number} x @param {number} y */
  draw(ctx, x, y) {
    if (!this.text) return;
    const { font, fillStyle, textBaseline, textAlign } = ctx;
    const width = this.getWidth(ctx);
    ctx.font = `${this.fontSize}px sans-serif`;
    ctx.fillStyle = this.color;
    ctx.beginPath();
    if (ctx.roundRect) ctx.roundRect(x, y, width, this.height, 5);
    else ctx.rect(x, y, width, this.height);
    ctx.fill();
    ctx.fillStyle = "#f1f5f9";
    ctx.textBaseline = "middle";
    ctx.textAlign = "left";
    ctx.fillText(this.text, x + this.padding, y + this.height / 2 + 1);
    Object.assign(ctx, { font, fillStyle, textBaseline, textAlign });
  }
}

/**
 * Put the run's badges on the graph's nodes (and clear them on nodes the run did not execute), in
 * the root graph and inside every subgraph, recursively: a node inside the instance 54 is the
 * report's "54:<id>", and a subgraph node shows its roll-up (wall-clock time and peak).
 * @param {any} graph the root LGraph of the workflow on screen
 * @param {import("./report_view.mjs").RunReport} report
 * @param {import("./report_view.mjs").RunReport | null} [previous] the last run of the same workflow
 * @returns {number} badges shown
 */
export function applyRunBadges(graph, report, previous = null) {
  /** @type {Map<string, any>} */
  const byId = new Map();
  for (const { graph: shown, prefix } of graphsWithPrefixes(graph)) {
    for (const node of Array.isArray(shown.nodes) ? shown.nodes : []) byId.set(`${prefix}${node.id}`, node);
  }
  const badges = runBadges(report, (id) => byId.get(id)?.type ?? byId.get(id)?.comfyClass, previous);
  const total = (report.nodes ?? []).reduce((sum, n) => sum + (profileBadgeText(n) !== null ? /** @type {number} */ (n.duration_s) : 0), 0) || 1;
  for (const s of report.subgraphs ?? []) {
    const text = subgraphBadgeText(s);
    if (text && isSubgraphNode(byId.get(String(s.id)))) {
      const share = isNumber(s.node_time_sum_s) ? s.node_time_sum_s / total : 0;
      badges.set(String(s.id), { text, share, title: `${subgraphName(s)}: ${s.node_ids.length} nodes, ${formatSeconds(s.node_time_sum_s ?? null)} node time` });
    }
  }
  for (const [id, node] of byId) {
    const info = badges.get(id);
    const text = info?.text ?? "";
    let badge = node[BADGE_KEY];
    if (!badge && !text) continue;
    if (!badge) {
      badge = new ProfileBadge();
      node[BADGE_KEY] = badge;
      if (!Array.isArray(node.badges)) node.badges = [];
      node.badges.push(() => badge); // LiteGraph calls functions in `badges` for the badge to draw
    }
    badge.text = text;
    badge.color = info ? heatColor(info.share) : badge.color;
    badge.title = info?.title ?? "";
  }
  graph?.setDirtyCanvas?.(true, true);
  return [...badges.keys()].filter((id) => byId.has(id)).length;
}

/**
 * Monitor nodes whose summary is from an earlier run: the last run failed or was interrupted
 * before they ran. Ids of the graph's monitor nodes that the report has no finished row for.
 * @param {import("./report_view.mjs").RunReport} report
 * @param {string[]} monitorNodeIds
 */
export function staleMonitorIds(report, monitorNodeIds) {
  if (report.status === "success" || report.status === "running") return [];
  const finished = new Set((report.nodes ?? []).filter((n) => n.status === "executed" || n.cached).map((n) => String(n.node_id)));
  return monitorNodeIds.filter((id) => !finished.has(id));
}

/**
 * Centre the canvas on a node and select it, opening the subgraph it is in ("54:73": node 73
 * inside the instance 54); false when the workflow on screen has no such node.
 * @param {any} app ComfyUI's app
 * @param {string} nodeId
 */
export function focusNode(app, nodeId) {
  const canvas = app?.canvas;
  const root = app?.rootGraph ?? app?.graph;
  const path = resolveNodePath(root, nodeId);
  if (!canvas || !path) return false;
  const { instances, node } = path;
  const inner = instances.length ? instances[instances.length - 1] : null;
  if (inner && canvas.graph !== inner.subgraph && typeof canvas.openSubgraph === "function") canvas.openSubgraph(inner.subgraph, inner);
  else if (!inner && canvas.graph && canvas.graph !== root && typeof canvas.setGraph === "function") canvas.setGraph(root);
  canvas.centerOnNode?.(node);
  canvas.selectNode?.(node, false);
  canvas.setDirty?.(true, true);
  return true;
}

// Per-node sparklines: a node's time and memory over the last runs of its workflow, as two tiny
// SVG lines in the node table. The points are pure functions (tests/js); only sparklineSvg makes DOM.
import { formatBytes, formatSeconds, isNumber } from "./format.mjs";
import { nodeMemory } from "./compare.mjs";

/** Runs a sparkline covers: the run shown and up to this many before it. */
export const TREND_RUNS = 20;

/**
 * @typedef {{durations: (number | null)[], memories: (number | null)[]}} Trend
 * @typedef {import("./report_view.mjs").RunReport} RunReport
 */

/**
 * Per node (id and class), its time and memory added in each run, oldest first, the run shown last;
 * null where the node was cached or missing in a run.
 * @param {RunReport} report the run shown
 * @param {RunReport[]} history earlier runs of its workflow, any order
 * @returns {Map<string, Trend>}
 */
export function nodeTrends(report, history) {
  const runs = [...history.filter((r) => r.prompt_id !== report.prompt_id)]
    .sort((a, b) => (a.started_unix_s ?? 0) - (b.started_unix_s ?? 0))
    .slice(-(TREND_RUNS - 1));
  runs.push(report);
  /** @type {Map<string, Trend>} */
  const trends = new Map();
  for (const node of report.nodes ?? []) {
    const key = trendKey(String(node.node_id), node.class_type ?? "");
    const durations = [];
    const memories = [];
    for (const run of runs) {
      const same = (run.nodes ?? []).find((n) => String(n.node_id) === String(node.node_id) && (n.class_type ?? "") === (node.class_type ?? ""));
      const ran = same && !same.cached && same.status === "executed";
      durations.push(ran && isNumber(same.duration_s) ? same.duration_s : null);
      memories.push(ran ? nodeMemory(same) : null);
    }
    trends.set(key, { durations, memories });
  }
  return trends;
}

/** @param {string} nodeId @param {string} classType */
export function trendKey(nodeId, classType) {
  return `${nodeId}\u0000${classType}`;
}

/**
 * The polyline points of values in a w x h box (min at the bottom, max at the top); gaps (null)
 * are skipped. Empty with fewer than two known values.
 * @param {(number | null)[]} values @param {number} w @param {number} h
 */
export function sparklinePoints(values, w, h) {
  const known = values.map((v, i) => [i, v]).filter(([, v]) => isNumber(v));
  if (known.length < 2) return "";
  const nums = known.map(([, v]) => /** @type {number} */ (v));
  const lo = Math.min(...nums);
  const hi = Math.max(...nums);
  const step = values.length > 1 ? (w - 2) / (values.length - 1) : 0;
  return known.map(([i, v]) => {
    const y = hi === lo ? h / 2 : 1 + (h - 2) * (1 - (/** @type {number} */ (v) - lo) / (hi - lo));
    return `${(1 + /** @type {number} */ (i) * step).toFixed(1)},${y.toFixed(1)}`;
  }).join(" ");
}

/**
 * One sparkline as an inline SVG element with its range in the tooltip; null without two values.
 * @param {(number | null)[]} values @param {"time" | "memory"} what
 */
export function sparklineSvg(values, what) {
  const points = sparklinePoints(values, 44, 12);
  if (!points) return null;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", `pm-spark pm-spark-${what}`);
  svg.setAttribute("width", "44");
  svg.setAttribute("height", "12");
  svg.setAttribute("viewBox", "0 0 44 12");
  const title = document.createElementNS(ns, "title");
  const nums = /** @type {number[]} */ (values.filter(isNumber));
  const format = what === "time" ? formatSeconds : formatBytes;
  title.textContent = `${what} over the last ${values.length} runs of this workflow: ${format(Math.min(...nums))} to ${format(Math.max(...nums))}, now ${format(values[values.length - 1])}`;
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points);
  line.setAttribute("fill", "none");
  line.setAttribute("stroke-width", "1.5");
  svg.append(title, line);
  return svg;
}

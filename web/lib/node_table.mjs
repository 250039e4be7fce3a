// The per-node table of a run: the node's own figures by default, the process-wide peaks behind a
// toggle that names them, sortable headers, the slowest and hungriest rows marked, a sparkline of
// each node's time and memory over the workflow's last runs, and a CSV of every column.
import { h } from "./dom.mjs";
import { clip, formatBytes, formatSeconds, isNumber } from "./format.mjs";
import { nodeRows, sortRows } from "./report_view.mjs";
import { sparklineSvg, trendKey } from "./sparkline.mjs";
import { groupedLines, subgraphAdded, subgraphName } from "./subgraph_view.mjs";
import { NODE_FIELDS, NODE_GPU_FIGURES } from "./vocabulary.generated.mjs";
import { badge, breakable } from "./widgets.mjs";

/** @typedef {import("./report_view.mjs").RunReport} RunReport @typedef {import("./run_views.mjs").Actions} Actions */

// Short labels so the table fits the default sidebar width (312 px); each title says it whole.
// "cached" is a mark in the node's cell, not a column of its own. `few`: shown by default; the
// others (the process-wide peaks, the same on most rows) are behind the "more columns" toggle.
const NODE_COLUMNS = [
  { key: "nodeId", label: "Node", few: true },
  { key: "durationS", label: "Time", num: true, few: true, title: "wall time: when the host ran the node" },
  // GPU busy (from NVML's samples: an idle node shows ~0) by default; the stream span of CUDA events,
  // idle time included, behind the toggle. Labels and titles from the vocabulary (NODE_GPU_FIGURES).
  { key: "gpuBusyS", label: NODE_GPU_FIGURES.gpu_busy_s.label, num: true, present: "gpuBusyS", few: true, title: NODE_GPU_FIGURES.gpu_busy_s.description },
  { key: "gpuTimeS", label: NODE_GPU_FIGURES.gpu_time_s.label, num: true, present: "gpuTimeS", title: NODE_GPU_FIGURES.gpu_time_s.description },
  { key: "rssAddedBytes", label: "RSS +", num: true, few: "noGpu", title: "RSS added: peak RSS above the node's start, what the node itself added" },
  { key: "gpuAddedBytes", label: "GPU +", num: true, gpu: true, few: true, title: "GPU added: peak GPU allocated above the node's start" },
  { key: "peakRssBytes", label: "Peak RSS", num: true, title: "the process's peak RSS while the node ran, everything before included" },
  { key: "peakGpuBytes", label: "Peak GPU", num: true, gpu: true, title: "peak GPU allocated while the node ran" },
  // This process's device memory beside torch's counters, where measured (NVML, dynamic VRAM).
  { key: "deviceBytes", label: NODE_GPU_FIGURES.peak_process_used_bytes.label, num: true, present: "deviceBytes", reason: "deviceUnknownReason", title: NODE_GPU_FIGURES.peak_process_used_bytes.description },
  { key: "aimdoBytes", label: NODE_GPU_FIGURES.peak_aimdo_used_bytes.label, num: true, present: "aimdoBytes", reason: "aimdoUnknownReason", title: NODE_GPU_FIGURES.peak_aimdo_used_bytes.description },
  // Model weights the model manager loaded and unloaded while the node ran (model_lane.mjs), where any moved.
  { key: "weightsMovedBytes", label: "Weights", num: true, present: "weightsMovedBytes", few: true, title: `weights moved: ${NODE_FIELDS.fields?.weights_loaded_bytes.description}` },
];

/** @param {any} r @param {string} key */
function nodeCellText(r, key) {
  return key === "durationS" || key === "gpuTimeS" || key === "gpuBusyS" ? formatSeconds(r[key]) : formatBytes(r[key]);
}

/**
 * The node table's columns: those that have figures in this run, the few by default, all when the
 * user asked; `hidden` names the others for the toggle.
 * @param {any[]} rows @param {boolean} all
 */
export function nodeColumns(rows, all) {
  const hasGpu = rows.some((r) => r.peakGpuBytes !== null);
  const present = NODE_COLUMNS.filter((c) => (!c.gpu || hasGpu) && (!c.present || rows.some((r) => r[c.present] !== null)));
  const few = present.filter((c) => c.few === true || (c.few === "noGpu" && !hasGpu));
  return { shown: all ? present : few, hidden: all ? [] : present.filter((c) => !few.includes(c)) };
}

/**
 * The node's time and memory over the workflow's last runs, two tiny lines; null without history.
 * @param {import("./sparkline.mjs").Trend | undefined} trend
 */
function sparks(trend) {
  if (!trend) return null;
  const time = sparklineSvg(trend.durations, "time");
  const memory = sparklineSvg(trend.memories, "memory");
  return time || memory ? h("span", { class: "pm-sparks" }, time, memory) : null;
}

/**
 * @param {RunReport} report
 * @param {{key: string, dir: "asc" | "desc", allColumns?: boolean, collapsed?: Set<string>}} sort
 * @param {Actions} actions
 * @param {Map<string, import("./sparkline.mjs").Trend>} [trends] per node, over the workflow's last runs
 */
export function nodesTable(report, sort, actions, trends = new Map()) {
  const rows = sortRows(nodeRows(report), /** @type {any} */ (sort.key), sort.dir);
  if (!rows.length) return h("p", { class: "pm-muted", text: report.profile_enabled === false ? "The per-node profile was off for this run." : "No nodes profiled." });
  const { shown, hidden } = nodeColumns(rows, Boolean(sort.allColumns));
  const toggle = hidden.length || sort.allColumns
    ? h("button", { class: "pm-button pm-columns-toggle", onclick: () => actions.toggleColumns?.(),
      text: hidden.length ? `+${hidden.length} columns: ${hidden.map((c) => c.label).join(", ")}` : "Fewer columns",
      title: hidden.length ? hidden.map((c) => `${c.label}: ${c.title}`).join("\n") : "Back to the columns that fit the sidebar" })
    : null;
  const exportCsv = h("button", { class: "pm-button pm-export-csv", text: "CSV", title: "Download the node table as CSV (all columns)",
    onclick: () => actions.downloadCsv?.(report.prompt_id, nodeTableCsv(rows)) });
  // With every column shown, a table too wide scrolls inside its own box, never the panel; the
  // scroll cue says so.
  return h("div", { class: "pm-nodes-block" }, h("div", { class: "pm-toolbar pm-nodes-tools" }, toggle, exportCsv),
    h("div", { class: `pm-table-wrap pm-nodes-wrap${sort.allColumns ? " pm-scroll-cue" : ""}` }, h("table", { class: "pm-table pm-nodes" },
      h("thead", {}, h("tr", {}, shown.map((c) => h("th", {
        class: `pm-sortable${c.num ? " pm-num" : ""}${sort.key === c.key ? " pm-sorted" : ""}`,
        dataset: { key: c.key }, title: c.title ? `${c.title} (sort)` : "Sort", onclick: () => actions.sort(c.key),
        text: `${c.label}${sort.key === c.key ? (sort.dir === "desc" ? " ▾" : " ▴") : ""}` })))),
      h("tbody", {}, tableLines(report, rows, sort).map((line) => line.kind === "subgraph"
        ? subgraphRow(line.subgraph, line.depth, line.collapsed, shown, actions)
        : nodeRow(line.row, line.depth, shown, actions, trends))))));
}

/**
 * The table's lines: the node rows as sorted, grouped under their subgraphs when the run has any.
 * @param {RunReport} report @param {any[]} rows @param {{collapsed?: Set<string>}} sort
 */
function tableLines(report, rows, sort) {
  const subgraphs = report.subgraphs ?? [];
  if (!subgraphs.length) return rows.map((row) => ({ kind: /** @type {const} */ ("node"), row, depth: 0 }));
  return groupedLines(rows, subgraphs, sort.collapsed ?? new Set());
}

/** @param {number} depth */
function indent(depth) {
  return depth ? h("span", { class: "pm-indent", text: "\u00a0\u00a0".repeat(depth) }) : null;
}

/**
 * A subgraph's roll-up row: click to fold or unfold its nodes.
 * @param {import("./subgraph_view.mjs").SubgraphRollup} s @param {number} depth @param {boolean} collapsed
 * @param {{key: string}[]} shown @param {Actions} actions
 */
function subgraphRow(s, depth, collapsed, shown, actions) {
  const added = subgraphAdded(s);
  const gpuPeaks = (s.gpu_peaks ?? []).map((p) => p.peak_allocated_bytes).filter(isNumber);
  /** @type {Record<string, string>} */
  const cells = {
    durationS: isNumber(s.wall_s) ? formatSeconds(s.wall_s) : "cached",
    rssAddedBytes: formatBytes(s.peak_rss_above_start_bytes ?? null),
    gpuAddedBytes: added?.gpu ? formatBytes(added.bytes) : "–",
    peakRssBytes: formatBytes(s.peak_rss_bytes ?? null),
    peakGpuBytes: gpuPeaks.length ? formatBytes(Math.max(...gpuPeaks)) : "–",
  };
  const title = `${subgraphName(s)}: wall-clock ${formatSeconds(s.wall_s ?? null)} (first node start to last node end), `
    + `node time sum ${formatSeconds(s.node_time_sum_s ?? null)}, ${s.node_ids.length} nodes, ${s.n_cached} cached. Click to ${collapsed ? "unfold" : "fold"}.`;
  return h("tr", { class: "pm-subgraph-row", dataset: { subgraphId: s.id }, title, onclick: () => actions.toggleSubgraph?.(s.id) },
    shown.map((c) => c.key === "nodeId"
      ? h("td", {}, indent(depth), h("span", { class: "pm-subgraph-toggle", text: collapsed ? "▸ " : "▾ " }),
        h("span", { class: "pm-muted", text: `#${s.id} ` }), h("b", { text: clip(subgraphName(s), 28) }),
        badge(`${s.node_ids.length} nodes`, "neutral"))
      : h("td", { class: "pm-num", text: cells[c.key] ?? "" })));
}

/**
 * @param {any} r @param {number} depth @param {{key: string}[]} shown @param {Actions} actions
 * @param {Map<string, import("./sparkline.mjs").Trend>} trends
 */
function nodeRow(r, depth, shown, actions, trends) {
  return h("tr", {
    class: [r.slowest ? "pm-slowest" : "", r.hungriest ? "pm-hungriest" : "", r.cached ? "pm-cached" : ""].join(" ").trim(),
    dataset: { nodeId: r.nodeId }, title: `Click to centre this node on the canvas\npeak RSS ${formatBytes(r.peakRssBytes)}${r.peakGpuBytes !== null ? ` · peak GPU ${formatBytes(r.peakGpuBytes)}` : ""}`,
    onclick: () => actions.focusNode?.(r.nodeId) },
  shown.map((c) => c.key === "nodeId"
    ? h("td", { title: `${r.classType} (${r.status})` }, indent(depth), h("span", { class: "pm-muted", text: `#${r.nodeId} ` }), ...breakable(clip(r.label, 32)),
      r.slowest ? badge("slowest", "warn") : null, r.hungriest ? badge("most memory", "warn") : null,
      r.status === "error" ? badge("failed", "error") : r.status === "interrupted" ? badge("interrupted", "neutral") : null,
      r.cached ? badge("cached", "neutral", "served from ComfyUI's cache: it did not run") : null,
      sparks(trends.get(trendKey(r.nodeId, r.classType))))
    : h("td", { class: "pm-num", text: nodeCellText(r, c.key), title: cellReason(r, c) })));
}

/** Why a cell's figure is unknown, as its title. @param {any} r @param {any} c */
function cellReason(r, c) {
  if (c.key === "gpuTimeS") return r.gpuTimeUnknownReason;
  if (c.key === "gpuBusyS") return r.gpuBusyUnknownReason;
  if (c.key === "weightsMovedBytes") return r.weightsTitle;
  return c.reason && r[c.key] === null ? r[c.reason] : null;
}

/**
 * The node table as CSV, every column, figures in seconds and bytes (not the panel's rounding).
 * @param {any[]} rows
 */
export function nodeTableCsv(rows) {
  const keys = ["nodeId", "classType", "label", "status", "cached", "durationS", "gpuBusyS", "gpuTimeS", "rssAddedBytes", "peakRssBytes", "gpuAddedBytes", "peakGpuBytes", "deviceBytes", "aimdoBytes", "weightsMovedBytes", "weightsMovedS"];
  const heads = ["node_id", "class_type", "title", "status", "cached", "duration_s", "gpu_busy_s", "gpu_time_s", "rss_added_bytes", "peak_rss_bytes", "gpu_added_bytes", "peak_gpu_bytes", "peak_process_used_bytes", "peak_aimdo_used_bytes", "weights_moved_bytes", "weights_moved_s"];
  const quote = (/** @type {unknown} */ v) => {
    if (v === null || v === undefined) return "";
    const text = String(v);
    // a leading = + - @ would be a formula in a spreadsheet: quoted and prefixed
    const safe = /^[=+\-@]/.test(text) && !/^-?[0-9.]+(e-?[0-9]+)?$/.test(text) ? `'${text}` : text;
    return /[",\n']/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
  };
  return [heads.join(","), ...rows.map((r) => keys.map((k) => quote(r[k])).join(","))].join("\n") + "\n";
}

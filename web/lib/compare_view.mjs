// The comparison of two runs, leading with the answer: which run against which (by workflow name),
// the verdict and how many runs it rests on, the nodes that changed most first, nodes served from
// the cache in both runs folded away, and per step only the figures that changed, by their
// vocabulary labels. Every table reflows to labelled rows in the 312 px sidebar (panel.css).
import { h } from "./dom.mjs";
import { MISSING, clip, formatBytes, formatDelta, formatSeconds, formatTime, formatValue, labelFromKey } from "./format.mjs";
import { MIN_JUDGED_RUNS, compareRuns, orderForCompare, withholdThinVerdicts } from "./compare.mjs";
import { runName } from "./report_view.mjs";
import { badge, breakable } from "./widgets.mjs";
import { deepCompareNote } from "./deep_profile_card.mjs";

/**
 * @typedef {import("./report_view.mjs").RunReport} RunReport
 * @typedef {ReturnType<typeof compareRuns>} Comparison
 */

/** @param {number | null} a @param {number | null} b @param {(v: number | null) => string} format */
function pair(a, b, format) {
  return h("span", { class: "pm-nowrap" }, `${format(a)} → ${format(b)}`);
}

/** @param {string} label @param {(HTMLElement | string | null)[]} cells @param {string} [cls] */
function stackRow(label, cells, cls) {
  return h("tr", { class: cls ?? null }, h("td", {}, label), cells);
}

/** @param {string} label @param {string | HTMLElement | null} content @param {boolean} [num] */
function cell(label, content, num = true) {
  return h("td", { class: num ? "pm-num" : null, dataset: { label } }, content);
}

/** @param {Comparison} c */
function totalsTable(c) {
  const t = c.totals;
  const flag = (/** @type {boolean} */ on, /** @type {string} */ title) => on ? badge("regression", "error", title) : null;
  return h("table", { class: "pm-table pm-compare-totals pm-stackable" },
    h("thead", {}, h("tr", {}, ["", "base → newer", "Δ", ""].map((label, i) => h("th", { class: i && i < 3 ? "pm-num" : null, text: label })))),
    h("tbody", {},
      stackRow("duration", [cell("", pair(t.durationA, t.durationB, formatSeconds)),
        cell("Δ", formatDelta("duration_s", isFinite(t.durationA ?? NaN) && isFinite(t.durationB ?? NaN) ? /** @type {number} */ (t.durationB) - /** @type {number} */ (t.durationA) : null)),
        h("td", {}, flag(t.timeRegression, "slower than the spread of the earlier runs allows"))]),
      stackRow("peak RSS", [cell("", pair(t.peakRssA, t.peakRssB, formatBytes)),
        cell("Δ", formatDelta("peak_bytes", isFinite(t.peakRssA ?? NaN) && isFinite(t.peakRssB ?? NaN) ? /** @type {number} */ (t.peakRssB) - /** @type {number} */ (t.peakRssA) : null)),
        h("td", {}, flag(t.memoryRegression, "more memory than the spread of the earlier runs allows"))])));
}

/** @param {number} nRuns @param {boolean} judged */
export function verdictBasis(nRuns, judged) {
  if (!judged) {
    const runs = nRuns === 1 ? "1 earlier run" : `${nRuns} earlier runs`;
    return `Too little history to call anything a regression: ${runs} of this workflow, and its usual spread shows from ${MIN_JUDGED_RUNS} on. The changes below are differences, not verdicts.`;
  }
  return `Regressions are judged against the spread of ${nRuns} earlier runs of this workflow.`;
}

/** @param {Comparison["nodes"][number]} n */
function nodeRow(n) {
  const time = n.cachedA && n.cachedB ? "cached" : `${n.cachedA ? "cached" : formatSeconds(n.durationA)} → ${n.cachedB ? "cached" : formatSeconds(n.durationB)}`;
  const title = `${n.presence === "both" ? "" : `${n.presence}; `}${n.nRuns} earlier runs with this node`;
  return h("tr", { class: n.regression ? "pm-regressed" : "", dataset: { nodeId: n.nodeId, change: n.change.toFixed(6) }, title },
    h("td", {}, h("span", { class: "pm-muted", text: `#${n.nodeId} ` }), ...breakable(clip(n.label, 28)),
      n.regression ? badge("regression", "error", n.timeRegression ? "slower than its earlier runs' spread" : "more memory than its earlier runs' spread") : null,
      n.presence !== "both" ? badge(n.presence, "neutral") : null),
    cell("Time", h("span", { class: "pm-nowrap", text: time })),
    cell("Δ", formatDelta("duration_s", n.durationDelta)),
    cell("Memory +", pair(n.memoryA, n.memoryB, formatBytes)),
    cell("Δ", formatDelta("peak_bytes", n.memoryDelta)));
}

/** @param {Comparison} c */
function nodesSection(c) {
  const folded = c.nodes.filter((n) => n.cachedA && n.cachedB);
  const shown = c.nodes.filter((n) => !(n.cachedA && n.cachedB));
  return [
    shown.length
      ? h("table", { class: "pm-table pm-compare-nodes pm-stackable" },
        h("thead", {}, h("tr", {}, ["Node", "Time base → newer", "Δ", "Memory added", "Δ"].map((label, i) => h("th", { class: i ? "pm-num" : null, text: label,
          title: i === 3 ? "peak above the node's start (GPU allocated, else RSS)" : null })))),
        h("tbody", {}, shown.map(nodeRow)))
      : h("p", { class: "pm-muted", text: "No node ran in either run." }),
    folded.length
      ? h("details", { class: "pm-details pm-compare-folded" }, h("summary", { text: `${folded.length} nodes served from the cache in both runs` }),
        h("p", { class: "pm-muted", text: folded.map((n) => `#${n.nodeId} ${n.label}`).join(", ") }))
      : null,
  ];
}

/** @param {Comparison} c */
function stepsSection(c) {
  const changed = c.steps.filter((s) => s.figures.length);
  const same = c.steps.filter((s) => !s.figures.length);
  if (!c.steps.length) return [h("p", { class: "pm-muted", text: "Neither run has monitor steps." })];
  return [
    ...changed.map((s) => h("article", { class: `pm-step pm-compare-step${s.regression ? " pm-regressed" : ""}`, dataset: { kind: s.kind } },
      h("header", { class: "pm-step-head" }, h("span", { class: "pm-step-title", text: s.title }), h("span", { class: "pm-muted", text: `${s.nodeId != null ? ` #${s.nodeId}` : ""} ${s.presence === "both" ? "" : `(${s.presence})`}` }),
        s.regression ? badge("regression", "error") : null),
      h("table", { class: "pm-table pm-stackable" }, h("tbody", {}, s.figures.map((f) => h("tr", { class: f.regression ? "pm-regressed" : "" },
        h("td", { text: labelFromKey(f.key, s.kind), title: f.key }),
        typeof f.a === "number" || typeof f.b === "number"
          ? cell("", h("span", { class: "pm-nowrap", text: `${formatValue(f.key, f.a, s.kind)} → ${formatValue(f.key, f.b, s.kind)}` }))
          : h("td", { class: "pm-compare-text", text: `${formatValue(f.key, f.a, s.kind)} → ${formatValue(f.key, f.b, s.kind)}` }),
        cell("Δ", f.delta !== null ? formatDelta(f.key, f.delta, s.kind) : MISSING))))))),
    same.length ? h("p", { class: "pm-muted pm-compare-same", text: `No figure changed: ${same.map((s) => `${s.title}${s.nodeId != null ? ` #${s.nodeId}` : ""}`).join(", ")}` }) : null,
  ];
}

/**
 * @param {RunReport} x
 * @param {RunReport} y
 * @param {import("./run_views.mjs").Actions} actions
 * @param {RunReport[]} [history] earlier runs of the workflow, for the regression verdicts
 */
export function compareView(x, y, actions, history = []) {
  const [base, candidate] = orderForCompare(x, y);
  const c = withholdThinVerdicts(compareRuns(base, candidate, history));
  const side = (/** @type {string} */ role, /** @type {RunReport} */ r) => h("div", { class: "pm-compare-side", title: `prompt ${r.prompt_id}` },
    h("span", { class: "pm-muted", text: `${role} ` }), h("b", { text: runName(r) }), h("span", { class: "pm-muted pm-nowrap", text: ` ${formatTime(r.started_unix_s)} · ${formatSeconds(r.duration_s)}` }));
  return h("section", { class: "pm-compare" },
    h("div", { class: "pm-toolbar" },
      h("button", { class: "pm-button pm-back", text: "← Back", onclick: () => actions.back() }),
      !c.judged ? badge("too little history", "neutral", `regressions are judged from ${MIN_JUDGED_RUNS} runs of this workflow on`)
        : c.regression ? badge("regression", "error", "the newer run is slower or needs more memory than the earlier runs' spread") : badge("no regression", "ok")),
    h("div", { class: "pm-compare-head" }, side("base", base), side("newer", candidate)),
    deepCompareNote(base, candidate) ? h("p", { class: "pm-deep-note pm-level-warning", text: deepCompareNote(base, candidate) }) : null,
    totalsTable(c),
    h("p", { class: "pm-muted pm-compare-basis", text: verdictBasis(c.totals.nRuns, c.judged) }),
    h("h4", { text: "Nodes, largest change first" }),
    ...nodesSection(c),
    h("h4", { text: "Monitor steps: what changed" }),
    ...stepsSection(c));
}

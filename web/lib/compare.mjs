// Two runs compared, leading with the answer: the nodes that changed most first, regressions judged
// against the spread of each node's earlier runs of the workflow (the rule of
// monitors/cli/aggregate.py history_limit, so the panel and `python -m monitors compare` agree), and per
// step only the figures that changed. Pure functions, no DOM.
import { declaredField, isNumber, relativeChange } from "./format.mjs";
import { nodeGpuAdded, nodeRssAdded, orderedSummaryKeys } from "./report_view.mjs";
import { kindInfo } from "./step_kinds.mjs";

/**
 * @typedef {import("./report_view.mjs").RunReport} RunReport
 * @typedef {import("./report_view.mjs").NodeProfile} NodeProfile
 * @typedef {import("./report_view.mjs").StepReport} StepReport
 * @typedef {{limit: number | null, nRuns: number}} Verdict
 */

/** Regression thresholds: a difference counts only above both the relative and the absolute one. */
export const REGRESSION = { relative: 0.1, seconds: 0.05, bytes: 64 * 1024 * 1024 };

/**
 * The value above which a new run is a regression, from the same figure in earlier runs: beyond
 * their highest value by more than their spread (max - min), and above their median by more than
 * the absolute floor and the relative threshold. One earlier run: the plain threshold.
 * @param {unknown[]} earlier @param {"seconds" | "bytes"} unit
 * @returns {Verdict}
 */
export function historyLimit(earlier, unit) {
  const values = /** @type {number[]} */ (earlier.filter(isNumber));
  if (!values.length) return { limit: null, nRuns: 0 };
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  const median = sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  const max = sorted[sorted.length - 1];
  const spread = max - sorted[0];
  return { limit: Math.max(max + spread, median + REGRESSION[unit], median * (1 + REGRESSION.relative)), nRuns: values.length };
}

/**
 * Whether `after` is worse than `before` for a time or memory figure (one earlier run, no spread).
 * @param {"seconds" | "bytes"} unit
 * @param {number | null | undefined} before
 * @param {number | null | undefined} after
 */
export function isRegression(unit, before, after) {
  return beyond(historyLimit([before], unit), after);
}

/** @param {Verdict} verdict @param {unknown} value */
function beyond(verdict, value) {
  return verdict.limit !== null && isNumber(value) && value > verdict.limit;
}

/** @param {string} key */
function unitOfKey(key) {
  if (key.endsWith("_bytes")) return "bytes";
  if (key.endsWith("_s") && !key.endsWith("_per_s") && !key.endsWith("_at_s")) return "seconds";
  return null;
}

/** What the node itself needed (above its start), so a bigger process is no node regression. @param {NodeProfile} n */
export function nodeMemory(n) {
  return nodeGpuAdded(n) ?? nodeRssAdded(n);
}

const nodeKey = (/** @type {NodeProfile} */ n) => `${n.node_id}\u0000${n.class_type ?? ""}`;

/**
 * A node's time and memory in the base and in earlier runs where it ran (cached runs did no work).
 * @param {string} key @param {RunReport[]} earlier
 */
function nodeHistory(key, earlier) {
  const ran = earlier.flatMap((r) => (r.nodes ?? []).filter((n) => nodeKey(n) === key && !n.cached));
  return { durations: ran.map((n) => n.duration_s), memories: ran.map(nodeMemory) };
}

/**
 * One node in both runs: figures, deltas, the verdicts and the size of its change.
 * @param {NodeProfile | undefined} a @param {NodeProfile | undefined} b @param {RunReport[]} earlier
 */
function compareNode(a, b, earlier) {
  const any = /** @type {NodeProfile} */ (a ?? b);
  const durA = a && isNumber(a.duration_s) ? a.duration_s : null;
  const durB = b && isNumber(b.duration_s) ? b.duration_s : null;
  const memA = a ? nodeMemory(a) : null;
  const memB = b ? nodeMemory(b) : null;
  const past = nodeHistory(nodeKey(any), earlier);
  const timeVerdict = historyLimit(past.durations, "seconds");
  const memoryVerdict = historyLimit(past.memories, "bytes");
  const ranB = Boolean(b && !b.cached);
  const timeRegression = ranB && beyond(timeVerdict, durB);
  const memoryRegression = ranB && beyond(memoryVerdict, memB);
  return {
    nodeId: String(any.node_id),
    label: any.title || any.class_type || "",
    presence: a && b ? "both" : a ? "base only" : "candidate only",
    cachedA: a ? Boolean(a.cached) : null,
    cachedB: b ? Boolean(b.cached) : null,
    durationA: durA,
    durationB: durB,
    durationDelta: durA !== null && durB !== null ? durB - durA : null,
    durationPct: relativeChange(durA, durB),
    memoryA: memA,
    memoryB: memB,
    memoryDelta: memA !== null && memB !== null ? memB - memA : null,
    timeRegression,
    memoryRegression,
    regression: timeRegression || memoryRegression,
    nRuns: timeVerdict.nRuns,
    change: 0,
  };
}

/**
 * The size of each node's change, to sort by: its time change as a share of the longer run, or its
 * memory change as a share of the most memory any node added (at least the regression floor, so a
 * few KiB in a run that adds little memory do not outrank seconds), whichever is larger.
 * @param {ReturnType<typeof compareNode>[]} nodes @param {RunReport} base @param {RunReport} candidate
 */
function scoreChanges(nodes, base, candidate) {
  const timeScale = Math.max(base.duration_s ?? 0, candidate.duration_s ?? 0, ...nodes.map((n) => Math.max(n.durationA ?? 0, n.durationB ?? 0)), 1e-6);
  const memoryScale = Math.max(...nodes.map((n) => Math.max(Math.abs(n.memoryA ?? 0), Math.abs(n.memoryB ?? 0))), REGRESSION.bytes);
  for (const n of nodes) {
    const presence = n.presence === "both" ? 0 : 1; // a node in one run only is a change of its own
    n.change = Math.max(Math.abs(n.durationDelta ?? 0) / timeScale, Math.abs(n.memoryDelta ?? 0) / memoryScale, presence);
  }
}

/**
 * One step (by kind and node id) in both runs: only the figures that changed.
 * @param {StepReport | undefined} a @param {StepReport | undefined} b
 */
function compareStep(a, b) {
  const any = /** @type {StepReport} */ (a ?? b);
  const sa = a?.summary ?? {};
  const sb = b?.summary ?? {};
  const figures = [];
  for (const name of orderedSummaryKeys(any.kind, { ...sa, ...sb })) {
    const va = sa[name];
    const vb = sb[name];
    if (JSON.stringify(va) === JSON.stringify(vb)) continue; // unchanged figures add nothing
    const unit = declaredField(any.kind, name)?.processWide ? null : unitOfKey(name);
    const numeric = isNumber(va) && isNumber(vb);
    figures.push({
      key: name, a: va, b: vb, changed: true,
      delta: numeric ? /** @type {number} */ (vb) - /** @type {number} */ (va) : null,
      regression: unit !== null && isRegression(unit, /** @type {any} */ (va), /** @type {any} */ (vb)),
    });
  }
  return {
    kind: any.kind,
    title: kindInfo(any.kind).title,
    nodeId: any.node_id,
    presence: a && b ? "both" : a ? "base only" : "candidate only",
    figures,
    regression: figures.some((f) => f.regression),
  };
}

/**
 * Compare a base run with a candidate run, per node (by id and class) and per step (by kind and
 * node id). Nodes come sorted by the size of their change, largest first; `regression` marks a
 * candidate figure beyond the spread of the base and `history` (earlier runs of the workflow).
 * @param {RunReport} base
 * @param {RunReport} candidate
 * @param {RunReport[]} [history] earlier runs of the same workflow, the two compared left out
 */
export function compareRuns(base, candidate, history = []) {
  const earlier = [base, ...history.filter((r) => r.prompt_id !== base.prompt_id && r.prompt_id !== candidate.prompt_id)];
  const baseNodes = new Map((base.nodes ?? []).map((n) => [nodeKey(n), n]));
  const candNodes = new Map((candidate.nodes ?? []).map((n) => [nodeKey(n), n]));
  const nodes = [...new Set([...baseNodes.keys(), ...candNodes.keys()])].map((k) => compareNode(baseNodes.get(k), candNodes.get(k), earlier));
  scoreChanges(nodes, base, candidate);
  nodes.sort((x, y) => y.change - x.change || Number(x.nodeId) - Number(y.nodeId));
  const stepKey = (/** @type {StepReport} */ s) => `${s.kind}\u0000${s.node_id ?? ""}`;
  const baseSteps = new Map((base.steps ?? []).map((s) => [stepKey(s), s]));
  const candSteps = new Map((candidate.steps ?? []).map((s) => [stepKey(s), s]));
  const steps = [...new Set([...baseSteps.keys(), ...candSteps.keys()])].map((k) => compareStep(baseSteps.get(k), candSteps.get(k)));
  const peakA = base.span?.peak_rss_bytes ?? null;
  const peakB = candidate.span?.peak_rss_bytes ?? null;
  const durationVerdict = historyLimit(earlier.map((r) => r.duration_s), "seconds");
  const totals = {
    durationA: base.duration_s ?? null,
    durationB: candidate.duration_s ?? null,
    peakRssA: peakA,
    peakRssB: peakB,
    timeRegression: beyond(durationVerdict, candidate.duration_s),
    memoryRegression: beyond(historyLimit(earlier.map((r) => r.span?.peak_rss_bytes), "bytes"), peakB),
    nRuns: durationVerdict.nRuns,
  };
  const regression =
    totals.timeRegression || totals.memoryRegression || nodes.some((n) => n.regression) || steps.some((s) => s.regression);
  return { base: base.prompt_id, candidate: candidate.prompt_id, totals, nodes, steps, regression };
}

/**
 * Base (older) and candidate (newer) of two reports.
 * @param {RunReport} x
 * @param {RunReport} y
 */
export function orderForCompare(x, y) {
  return (x.started_unix_s ?? 0) <= (y.started_unix_s ?? 0) ? [x, y] : [y, x];
}

/**
 * Runs of the workflow (the base included) a regression verdict needs: with fewer, one noisy
 * earlier run made nodes red while the whole run was faster. `python -m monitors compare` still
 * judges from one run (it says so in its basis line; a CI gate asks for it explicitly).
 */
export const MIN_JUDGED_RUNS = 3;

/**
 * The comparison as the panel shows it: with fewer than MIN_JUDGED_RUNS earlier runs of the
 * workflow no figure is flagged and `judged` is false (the view says there is too little history);
 * with enough, a node that ran in fewer than that keeps no flag either.
 * @param {ReturnType<typeof compareRuns>} c
 */
export function withholdThinVerdicts(c) {
  const judged = c.totals.nRuns >= MIN_JUDGED_RUNS;
  const nodes = c.nodes.map((n) => (judged && n.nRuns >= MIN_JUDGED_RUNS ? n : { ...n, timeRegression: false, memoryRegression: false, regression: false }));
  const steps = judged ? c.steps : c.steps.map((s) => ({ ...s, regression: false, figures: s.figures.map((f) => ({ ...f, regression: false })) }));
  const totals = judged ? c.totals : { ...c.totals, timeRegression: false, memoryRegression: false };
  const regression = totals.timeRegression || totals.memoryRegression || nodes.some((n) => n.regression) || steps.some((s) => s.regression);
  return { ...c, nodes, steps, totals, regression, judged };
}

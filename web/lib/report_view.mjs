// Data shaping for the panel: run report JSON (schemas/run_report.schema.json) -> rows, cards and
// comparisons. Pure functions, no DOM, so Node's test runner covers them.
import { isNumber } from "./format.mjs";
import { modelFindings, weightsFields } from "./model_lane.mjs";
import { kindInfo } from "./step_kinds.mjs";

/**
 * @typedef {{level: string, message: string, code?: string | null}} Finding
 * @typedef {{device: string, peak_allocated_bytes: number | null, peak_reserved_bytes: number | null,
 *   peak_allocated_above_start_bytes?: number | null, peak_reserved_above_start_bytes?: number | null,
 *   peak_process_used_bytes?: number | null, process_used_unknown_reason?: string | null,
 *   peak_aimdo_used_bytes?: number | null, aimdo_used_unknown_reason?: string | null}} GpuPeak
 * @typedef {{node_id: string, class_type: string | null, title?: string | null, status: string, cached: boolean,
 *   start_offset_s?: number | null, duration_s?: number | null, peak_rss_bytes?: number | null,
 *   peak_rss_method?: string | null, rss_change_bytes?: number | null, gpu_peaks?: GpuPeak[],
 *   peak_rss_above_start_bytes?: number | null, gpu_time_s?: number | null, gpu_busy_s?: number | null,
 *   gpu_busy_unknown_reason?: string | null,
 *   gpu_time_unknown_reason?: string | null}} NodeProfile
 * @typedef {{kind: string, node_id: string | null, summary?: Record<string, unknown>, details?: Record<string, unknown>,
 *   findings?: Finding[], monitor_errors?: string[], created_unix_s?: number | null, cached?: boolean,
 *   pending?: boolean, unfinished_reason?: string | null}} StepReport
 * @typedef {{prompt_id: string, status: string, started_unix_s: number, finished_unix_s?: number | null,
 *   duration_s?: number | null, nodes?: NodeProfile[], steps?: StepReport[], span?: Record<string, any> | null,
 *   system?: Record<string, unknown>, error?: Record<string, any> | null, monitor_errors?: string[],
 *   profile_enabled?: boolean, schema_version?: number, workflow?: {name?: string | null, id?: string | null} | null,
 *   input_changes?: InputChanges | null, missing_seams?: string[],
 *   subgraphs?: import("./subgraph_view.mjs").SubgraphRollup[], complete?: boolean}} RunReport
 * @typedef {{node_id: string, node_type: string | null, input: string, before: string, after: string}} InputChange
 * @typedef {{compared_with_prompt_id?: string | null, first_run: boolean | null, changes: InputChange[] | null,
 *   n_changes: number | null, n_inputs_added?: number | null, n_inputs_removed?: number | null,
 *   unknown_reason: string | null}} InputChanges
 * @typedef {{prompt_id: string, status: string, started_unix_s: number, duration_s?: number | null,
 *   peak_rss_bytes?: number | null, peak_gpu_allocated_bytes?: number | null,
 *   peak_process_used_bytes?: number | null, peak_aimdo_used_bytes?: number | null, n_nodes?: number, n_cached?: number,
 *   step_kinds?: string[], workflow_name?: string | null, workflow_id?: string | null, n_errors?: number, n_warnings?: number,
 *   input_changes?: InputChanges | null, complete?: boolean}} RunSummary
 */


/** @param {string} status */
export function statusTone(status) {
  // A cancel is the user's choice, not a failure: neutral.
  return { success: "ok", running: "info", interrupted: "neutral", error: "error" }[status] ?? "info";
}

/**
 * The name a person knows a run by: its workflow's name, else "scripted" and a short prompt id.
 * @param {{workflow_name?: string | null, workflow?: {name?: string | null} | null, prompt_id: string}} run
 */
export function runName(run) {
  const name = run.workflow_name ?? run.workflow?.name;
  // without a name the prompt was queued by a script (the panel and scripts/queue_workflow.py name theirs)
  return name ? String(name).replace(/\.json$/i, "") : `scripted ${String(run.prompt_id).slice(0, 8)}`;
}

/**
 * Whether two runs come from the same workflow: the graph's id when both have one, else the name.
 * @param {RunSummary} a
 * @param {RunSummary} b
 */
export function sameWorkflow(a, b) {
  if (a.workflow_id && b.workflow_id) return a.workflow_id === b.workflow_id;
  return Boolean(a.workflow_name) && a.workflow_name === b.workflow_name;
}

/**
 * The run a comparison starts from: the last successful run of the same workflow before this one;
 * else the last successful run of the same workflow; else, for a run of a named workflow, none (its
 * first run is compared with nothing rather than with another workflow); for a scripted run (no
 * workflow), the last successful run of a named workflow, else the last successful run.
 * @param {RunSummary} run
 * @param {RunSummary[]} runs
 * @returns {string | null}
 */
export function defaultCompareTarget(run, runs) {
  const others = sortRunsNewestFirst(runs.filter((r) => r.prompt_id !== run.prompt_id && r.status === "success"));
  const same = others.filter((r) => sameWorkflow(run, r));
  const earlier = same.find((r) => (r.started_unix_s ?? 0) <= (run.started_unix_s ?? 0));
  if (earlier ?? same[0]) return /** @type {RunSummary} */ (earlier ?? same[0]).prompt_id;
  if (run.workflow_name || run.workflow_id) return null;
  const named = others.filter((r) => r.workflow_name || r.workflow_id); // a scripted run is a last resort
  return (named[0] ?? others[0])?.prompt_id ?? null;
}

/**
 * A run's status as a person reads it: "success", "success · 2 warnings", "failed · 1 error",
 * "interrupted"; the tone colours the badge (a success with warnings is no clean success).
 * @param {RunSummary} run
 */
export function runStatus(run) {
  const plural = (/** @type {number} */ n, /** @type {string} */ word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  const errors = run.n_errors ?? 0;
  const warnings = run.n_warnings ?? 0;
  const label = run.status === "error" ? "failed" : run.status;
  const counts = [errors ? plural(errors, "error") : "", warnings ? plural(warnings, "warning") : ""].filter(Boolean);
  let tone = statusTone(run.status);
  if (run.status === "success" && (errors || warnings)) tone = errors ? "error" : "warn";
  return { text: [label, ...counts].join(" · "), tone };
}

/**
 * What changed in the inputs since the last run of the same workflow, in one line:
 * "seed 1 → 2, steps 20 → 30", "first run", "no inputs changed", "+3 more" when the line lists
 * fewer than changed; null when there is nothing to say (no workflow name, older reports).
 * @param {InputChanges | null | undefined} changes
 * @param {number} [max] changes named in the line
 * @returns {{text: string, title: string | null} | null}
 */
export function inputChangesLine(changes, max = 4) {
  if (!changes || typeof changes !== "object") return null;
  if (changes.first_run === true) return { text: "first run", title: "the first run of this workflow since the server started" };
  if (!Array.isArray(changes.changes)) {
    return changes.compared_with_prompt_id ? { text: "changes unknown", title: changes.unknown_reason ?? null } : null;
  }
  const listed = changes.changes.slice(0, max);
  const total = isNumber(changes.n_changes) ? changes.n_changes : changes.changes.length;
  const structure = [
    changes.n_inputs_added ? `${changes.n_inputs_added} inputs added` : "",
    changes.n_inputs_removed ? `${changes.n_inputs_removed} removed` : "",
  ].filter(Boolean).join(", ");
  if (!total) return { text: structure ? `no values changed (${structure})` : "no inputs changed", title: null };
  // an input name that several nodes share (two prompts' "text") says which node changed
  const names = changes.changes.map((c) => c.input);
  const shared = new Set(names.filter((name, i) => names.indexOf(name) !== i));
  const parts = listed.map((c) => `${shared.has(c.input) ? `#${c.node_id} ` : ""}${c.input} ${c.before} → ${c.after}`);
  if (total > listed.length) parts.push(`+${total - listed.length} more`);
  const title = changes.changes.map((c) => `#${c.node_id} ${c.node_type ?? "?"} ${c.input}: ${c.before} → ${c.after}`).join("\n");
  return { text: parts.join(", "), title: structure ? `${title}\n${structure}` : title };
}

/**
 * Runs newest first; the list route already sorts, but events and fetches can interleave.
 * @param {RunSummary[]} runs
 */
export function sortRunsNewestFirst(runs) {
  return [...runs].sort((a, b) => (b.started_unix_s ?? 0) - (a.started_unix_s ?? 0));
}

/**
 * Insert or replace one run summary (from a `pipeline_monitor.run` event), newest first, bounded.
 * @param {RunSummary[]} runs
 * @param {RunSummary} run
 * @param {number} max
 */
export function upsertRun(runs, run, max = 200) {
  if (!run || typeof run.prompt_id !== "string") return runs;
  return sortRunsNewestFirst([run, ...runs.filter((r) => r.prompt_id !== run.prompt_id)]).slice(0, max);
}

/** @param {NodeProfile} node */
export function nodeGpuPeak(node) {
  const values = (node.gpu_peaks ?? []).map((p) => p.peak_allocated_bytes).filter(isNumber);
  return values.length ? Math.max(...values) : null;
}

/**
 * A node's highest reading of one of the process's device-memory figures over its devices
 * (peak_process_used_bytes: the driver's per-process count; peak_aimdo_used_bytes: dynamic VRAM's),
 * and why it is unknown where no device has it.
 * @param {NodeProfile} node @param {"process_used" | "aimdo_used"} figure
 * @returns {{bytes: number | null, reason: string | null}}
 */
export function nodeDeviceMemory(node, figure) {
  const peaks = node.gpu_peaks ?? [];
  const values = peaks.map((p) => p[`peak_${figure}_bytes`]).filter(isNumber);
  if (values.length) return { bytes: Math.max(...values), reason: null };
  const reason = peaks.map((p) => p[`${figure}_unknown_reason`]).find((r) => typeof r === "string");
  return { bytes: null, reason: reason ?? null };
}

/** The most GPU memory the node allocated above its own start, over its devices. @param {NodeProfile} node */
export function nodeGpuAdded(node) {
  const values = (node.gpu_peaks ?? []).map((p) => p.peak_allocated_above_start_bytes).filter(isNumber);
  return values.length ? Math.max(...values) : null;
}

/** @param {NodeProfile} node */
export function nodeRssAdded(node) {
  return isNumber(node.peak_rss_above_start_bytes) ? node.peak_rss_above_start_bytes : null;
}

/**
 * @typedef {{nodeId: string, label: string, classType: string, status: string, cached: boolean,
 *   durationS: number | null, gpuTimeS: number | null, gpuTimeUnknownReason: string | null,
 *   gpuBusyS: number | null, gpuBusyUnknownReason: string | null, peakRssBytes: number | null, peakGpuBytes: number | null,
 *   rssAddedBytes: number | null, gpuAddedBytes: number | null,
 *   deviceBytes: number | null, deviceUnknownReason: string | null, aimdoBytes: number | null, aimdoUnknownReason: string | null,
 *   weightsMovedBytes: number | null, weightsMovedS: number | null, weightsTitle: string | null,
 *   rssChangeBytes: number | null, slowest: boolean, hungriest: boolean}} NodeRow
 */

/** @param {NodeProfile} n */
function deviceMemoryFields(n) {
  const device = nodeDeviceMemory(n, "process_used");
  const aimdo = nodeDeviceMemory(n, "aimdo_used");
  return { deviceBytes: device.bytes, deviceUnknownReason: device.reason, aimdoBytes: aimdo.bytes, aimdoUnknownReason: aimdo.reason };
}

/** The least a node must add to be badged "most memory". */
export const MOST_MEMORY_MIN_BYTES = 16 * 1024 * 1024;

/**
 * Per-node rows with the slowest and the most memory-hungry executed node flagged. Memory is what
 * the node added above its own start (GPU allocated where any node has it, else RSS): the absolute
 * peaks include everything that ran before, so they would crown whichever node ran last.
 * @param {RunReport} report
 * @returns {NodeRow[]}
 */
export function nodeRows(report) {
  /** @type {NodeRow[]} */
  const rows = (report.nodes ?? []).map((n) => ({
    nodeId: String(n.node_id),
    label: n.title || n.class_type || "",
    classType: n.class_type ?? "",
    status: n.status,
    cached: Boolean(n.cached),
    durationS: isNumber(n.duration_s) ? n.duration_s : null,
    gpuTimeS: isNumber(n.gpu_time_s) ? n.gpu_time_s : null,
    gpuTimeUnknownReason: typeof n.gpu_time_unknown_reason === "string" ? n.gpu_time_unknown_reason : null,
    gpuBusyS: isNumber(n.gpu_busy_s) ? n.gpu_busy_s : null,
    gpuBusyUnknownReason: typeof n.gpu_busy_unknown_reason === "string" ? n.gpu_busy_unknown_reason : null,
    peakRssBytes: isNumber(n.peak_rss_bytes) ? n.peak_rss_bytes : null,
    peakGpuBytes: nodeGpuPeak(n),
    rssAddedBytes: nodeRssAdded(n),
    gpuAddedBytes: nodeGpuAdded(n),
    ...deviceMemoryFields(n),
    ...weightsFields(n),
    rssChangeBytes: isNumber(n.rss_change_bytes) ? n.rss_change_bytes : null,
    slowest: false,
    hungriest: false,
  }));
  // The top node among every node that ran, badged only when it ran to the end: in a failed or
  // interrupted run the node that stopped is often the slowest, and then a 0.6 ms node that
  // finished must not be called "slowest".
  const ran = rows.filter((r) => !r.cached);
  const top = (/** @type {(r: NodeRow) => number | null} */ get) => {
    let best = null;
    for (const row of ran) {
      const v = get(row);
      if (v !== null && (best === null || v > /** @type {number} */ (get(best)))) best = row;
    }
    return best?.status === "executed" ? best : null;
  };
  const slowest = top((r) => r.durationS);
  if (slowest) slowest.slowest = true;
  const useGpu = ran.some((r) => r.gpuAddedBytes !== null);
  const added = (/** @type {NodeRow} */ r) => (useGpu ? r.gpuAddedBytes : r.rssAddedBytes);
  const hungriest = top(added);
  // a badge only for memory worth a look: a few KiB is no node's "most memory"
  if (hungriest && /** @type {number} */ (added(hungriest)) >= MOST_MEMORY_MIN_BYTES) hungriest.hungriest = true;
  return rows;
}

/**
 * Sort rows by a key; unknown values always last, ties keep their order.
 * @template {Record<string, any>} T
 * @param {T[]} rows
 * @param {keyof T & string} key
 * @param {"asc" | "desc"} direction
 * @returns {T[]}
 */
export function sortRows(rows, key, direction = "desc") {
  const sign = direction === "asc" ? 1 : -1;
  return rows
    .map((row, index) => ({ row, index }))
    .sort((a, b) => {
      const x = a.row[key];
      const y = b.row[key];
      const xMissing = x === null || x === undefined;
      const yMissing = y === null || y === undefined;
      if (xMissing || yMissing) return xMissing === yMissing ? a.index - b.index : xMissing ? 1 : -1;
      if (typeof x === "number" && typeof y === "number") return sign * (x - y) || a.index - b.index;
      const byText = String(x).localeCompare(String(y), undefined, { numeric: true });
      return sign * byText || a.index - b.index;
    })
    .map((entry) => entry.row);
}

const LEVEL_ORDER = /** @type {Record<string, number>} */ ({ error: 0, warning: 1, info: 2 });

/**
 * Errors first, then warnings (suggestions), then notes: the run's error, every step's findings
 * and monitoring problems, the run's monitoring problems.
 * @param {RunReport} report
 * @returns {{level: string, where: string, message: string}[]}
 */
export function problems(report) {
  const items = [];
  const error = report.error;
  if (error && report.status === "interrupted") {
    const at = error.node_id ? ` while node #${error.node_id}${error.node_type ? ` (${error.node_type})` : ""} ran` : "";
    items.push({ level: "info", where: "run", message: `interrupted${at}: later nodes did not run` });
  } else if (error) {
    const where = error.node_id ? `node #${error.node_id}${error.node_type ? ` (${error.node_type})` : ""}: ` : "";
    let message = `${where}${error.exception_type ?? "error"}`;
    if (error.exception_message) message += `: ${error.exception_message}`;
    items.push({ level: "error", where: "run", message });
  }
  for (const step of report.steps ?? []) {
    const where = `${kindInfo(step.kind).title} #${step.node_id ?? "?"}`;
    for (const f of step.findings ?? []) {
      items.push({ level: f.level in LEVEL_ORDER ? f.level : "info", where, message: String(f.message) });
    }
    for (const m of step.monitor_errors ?? []) items.push({ level: "warning", where, message: `monitoring: ${m}` });
  }
  items.push(...modelFindings(report)); // why weights moved: a reload after an eviction, a LoRA change
  for (const m of report.monitor_errors ?? []) items.push({ level: "info", where: "monitor", message: String(m) });
  if (report.missing_seams?.length) items.push({ level: "warning", where: "monitor", message: missingSeamsMessage(report.missing_seams) });
  return items
    .map((item, index) => ({ item, index }))
    .sort((a, b) => LEVEL_ORDER[a.item.level] - LEVEL_ORDER[b.item.level] || a.index - b.index)
    .map((e) => e.item);
}

/**
 * What the pack's start-up self-check found missing in this ComfyUI (nodes/seams.py), said once per run.
 * @param {string[]} seams
 */
export function missingSeamsMessage(seams) {
  return `ComfyUI seams not found: ${seams.join(", ")}; the figures that read them are missing from this run`;
}

/**
 * Summary keys in display order: the kind's chosen keys first (those present), then the rest.
 * @param {string} kind
 * @param {Record<string, unknown>} summary
 */
export function orderedSummaryKeys(kind, summary) {
  const keys = Object.keys(summary ?? {});
  const first = kindInfo(kind).first.filter((k) => keys.includes(k));
  return [...first, ...keys.filter((k) => !first.includes(k))];
}

/**
 * What a step card shows.
 * @param {StepReport} step
 */
export function stepCard(step) {
  const info = kindInfo(step.kind);
  const summary = step.summary ?? {};
  const keys = orderedSummaryKeys(step.kind, summary);
  let badges = [];
  const monitorErrors = [...(step.monitor_errors ?? [])];
  try {
    badges = info.badges ? info.badges(summary) : [];
  } catch (err) {
    // A summary of an unexpected shape still renders, without badges, and the card says why.
    badges = [];
    const why = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    monitorErrors.push(`badges not shown: ${why}`);
  }
  if (step.cached) badges.push({ text: "cached", tone: "info", title: "the node was cached; this step is from the run that executed it" });
  // figures that come after the prompt (the card is drawn again when they do), or never came
  if (step.pending) badges.push({ text: "pending", tone: "info", title: "figures come after the prompt: this card updates when they do" });
  if (step.unfinished_reason) monitorErrors.push(`figures after the prompt not finished: ${step.unfinished_reason}`);
  const levels = (step.findings ?? []).map((f) => f.level);
  return {
    kind: step.kind,
    title: info.title,
    nodeId: step.node_id,
    badges,
    keyFigures: keys.slice(0, Math.max(info.first.length, 6)),
    moreFigures: keys.slice(Math.max(info.first.length, 6)),
    summary,
    details: step.details ?? {},
    findings: step.findings ?? [],
    monitorErrors,
    pending: Boolean(step.pending),
    worst: levels.includes("error") ? "error" : levels.includes("warning") ? "warning" : monitorErrors.length ? "warning" : "info",
  };
}

// The panel's views of runs: the list, one run (problems, per-node table, step cards) and the
// comparison of two runs. Each returns a fresh element; `actions` carries what the user can do.
import { h } from "./dom.mjs";
import { MISSING, clip, formatBytes, formatDelta, formatSeconds, formatTime, formatValue, labelFromKey, safeFileName } from "./format.mjs";
import { defaultCompareTarget, inputChangesLine, nodeRows, problems, runName, runStatus, sortRows } from "./report_view.mjs";
import { isDeepProfiled } from "./deep_profile_card.mjs";
import { designedCard, gpuNoteOfRun } from "./step_cards.mjs";

/**
 * @typedef {import("./report_view.mjs").RunReport} RunReport
 * @typedef {import("./report_view.mjs").RunSummary} RunSummary
 * @typedef {{openRun: (id: string) => void, back: () => void, compare: (a: string, b: string) => void,
 *   download: (id: string, format: "json" | "html") => void, sort: (key: string) => void, refresh: () => void,
 *   focusNode?: (nodeId: string) => void, toggleColumns?: () => void, downloadCsv?: (id: string, csv: string) => void}} Actions
 */

/**
 * A class name with line-break chances between its words ("Pipeline<wbr>Monitor<wbr>VAE<wbr>Encode"),
 * so a narrow column wraps it there rather than mid-word.
 * @param {string} text
 * @returns {(string | HTMLElement)[]}
 */
export function breakable(text) {
  /** @type {string[]} */
  const parts = [];
  for (const part of String(text).split(/(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])/)) {
    // a one-letter word stays with its neighbour: "KSampler", not "K" then "Sampler"
    if (parts.length && (part.length < 2 || parts[parts.length - 1].length < 2)) parts[parts.length - 1] += part;
    else parts.push(part);
  }
  return parts.flatMap((part, i) => (i ? [h("wbr"), part] : [part]));
}

/** @param {string} text @param {string} tone @param {string} [title] */
export function badge(text, tone, title) {
  return h("span", { class: `pm-badge pm-tone-${tone}`, text, title });
}

/**
 * The prompt running now, as the first row of the runs list: its name, how long it has run, the
 * node it is on, and progress estimated from the last run of the same workflow.
 * @param {import("./running.mjs").Running} running
 * @param {import("./running.mjs").Progress} progress
 */
export function runningRowView(running, progress) {
  const name = runName({ prompt_id: running.promptId, workflow_name: running.workflow?.name });
  const elapsed = formatSeconds(Math.max(0, running.latestS - running.startS));
  const node = running.node ? `node #${running.node.id} ${running.node.label}` : "starting";
  const estimate = progress
    ? `~${Math.round(100 * progress.fraction)} % of the last run (${formatSeconds(progress.basisS)})`
    : "no earlier run of this workflow to estimate from";
  return h("div", { class: "pm-run-row pm-running-row", dataset: { promptId: running.promptId, status: "running" }, title: `prompt ${running.promptId}` },
    h("div", { class: "pm-run-line" }, h("span", { class: "pm-run-name", text: name }), badge("running", "info")),
    h("div", { class: "pm-run-figures pm-muted" }, h("span", { class: "pm-running-elapsed pm-nowrap", text: elapsed }), " · ",
      h("span", { class: "pm-running-node", text: node })),
    h("div", { class: "pm-progress", title: progress ? `estimated from prompt ${progress.basisPromptId}` : "" },
      h("span", { class: "pm-progress-track" }, h("span", { class: "pm-progress-bar", style: `width:${progress ? Math.round(100 * progress.fraction) : 0}%` })),
      h("span", { class: "pm-muted pm-progress-text", text: estimate })));
}

/**
 * @param {RunSummary[]} runs
 * @param {Actions} actions
 * @param {HTMLElement | null} [runningSlot] where the running prompt's row goes (first in the list)
 */
export function runsListView(runs, actions, runningSlot = null) {
  const head = h("div", { class: "pm-section-head" },
    h("span", { class: "pm-section-title", text: "Runs" }),
    h("button", { class: "pm-button pm-refresh", text: "Refresh", title: "Reload the list of runs", onclick: () => actions.refresh() }));
  if (!runs.length) {
    return h("section", { class: "pm-runs" }, head, runningSlot,
      h("p", { class: "pm-muted", text: "No runs yet: queue a prompt and its report appears here." }));
  }
  // One entry per run, two lines: the workflow's name and how it ended, then when, how long and
  // how much memory; reads at a glance in the narrow sidebar.
  const rows = runs.map((r) => {
    const status = runStatus(r);
    const figures = [formatTime(r.started_unix_s), formatSeconds(r.duration_s), `peak ${formatBytes(r.peak_rss_bytes)}`];
    if (r.peak_gpu_allocated_bytes != null) figures.push(`GPU ${formatBytes(r.peak_gpu_allocated_bytes)}`);
    const changed = inputChangesLine(r.input_changes);
    return h("div", { class: "pm-run-row", role: "button", tabindex: "0", dataset: { promptId: r.prompt_id, status: r.status },
      title: `prompt ${r.prompt_id}${r.step_kinds?.length ? `\nmonitors: ${r.step_kinds.join(", ")}` : ""}`,
      onclick: () => actions.openRun(r.prompt_id),
      onkeydown: (/** @type {KeyboardEvent} */ e) => { if (e.key === "Enter") actions.openRun(r.prompt_id); } },
      h("div", { class: "pm-run-line" }, h("span", { class: "pm-run-name", text: runName(r) }), badge(status.text, status.tone),
        isDeepProfiled(r) ? badge("deep", "info", "deep-profiled: its timings include the profiler's overhead") : null),
      h("div", { class: "pm-run-figures pm-muted", text: figures.join(" · ") }),
      changed ? h("div", { class: "pm-run-changes pm-muted", text: changed.text, title: changed.title }) : null);
  });
  return h("section", { class: "pm-runs" }, head, h("div", { class: "pm-run-list" }, runningSlot, rows));
}

/**
 * A report as a run-list row (its listed summary when there is one: it has the counts).
 * @param {RunReport} report
 * @param {RunSummary[]} [runs]
 * @returns {RunSummary}
 */
function summaryOf(report, runs = []) {
  const listed = runs.find((r) => r.prompt_id === report.prompt_id);
  const levels = (report.steps ?? []).flatMap((s) => (s.findings ?? []).map((f) => f.level));
  return listed ?? {
    prompt_id: report.prompt_id, status: report.status, started_unix_s: report.started_unix_s,
    workflow_name: report.workflow?.name ?? null, workflow_id: report.workflow?.id ?? null,
    n_errors: levels.filter((l) => l === "error").length,
    n_warnings: levels.filter((l) => l === "warning").length + (report.steps ?? []).reduce((n, s) => n + (s.monitor_errors?.length ?? 0), 0),
  };
}

/** @param {RunReport} report */
function runHead(report) {
  const nodes = report.nodes ?? [];
  const status = runStatus(summaryOf(report));
  return h("div", { class: "pm-run-head" },
    h("div", { class: "pm-run-title", text: runName(report) }),
    badge(status.text, status.tone),
    h("span", { text: ` ${formatTime(report.started_unix_s)} · ${formatSeconds(report.duration_s)} · peak RSS ${formatBytes(report.span?.peak_rss_bytes)} · ${nodes.length} nodes (${nodes.filter((n) => n.cached).length} cached)` }),
    report.profile_enabled === false ? badge("profile off", "warn") : null);
}

/**
 * The inputs that changed since the last run of this workflow: one line, then a row per change.
 * @param {RunReport} report
 */
function inputChangesSection(report) {
  const changes = report.input_changes;
  const line = inputChangesLine(changes);
  if (!line || !changes) return null;
  const rows = changes.changes ?? [];
  // With rows to show, the heading only counts them: the values are in the table.
  const more = [changes.n_inputs_added ? `${changes.n_inputs_added} inputs added` : "", changes.n_inputs_removed ? `${changes.n_inputs_removed} removed` : ""].filter(Boolean);
  const heading = rows.length ? `${changes.n_changes ?? rows.length} changed${more.length ? `, ${more.join(", ")}` : ""}` : line.text;
  return h("div", { class: "pm-input-changes" },
    h("div", {}, h("span", { class: "pm-muted", text: "Inputs since the last run: " }), h("span", { class: "pm-changes-line", text: heading, title: line.title })),
    rows.length
      ? h("div", { class: "pm-table-wrap" }, h("table", { class: "pm-table pm-changes" },
        h("thead", {}, h("tr", {}, h("th", { text: "Node" }), h("th", { text: "Input" }), h("th", { text: "Before → now" }))),
        h("tbody", {}, rows.map((c) => h("tr", {},
          h("td", { title: c.node_type ?? "" }, h("span", { class: "pm-muted", text: `#${c.node_id} ` }), c.node_type ?? ""),
          h("td", { text: c.input }),
          h("td", { class: "pm-change-values", text: `${c.before} → ${c.after}` }))))))
      : null,
    rows.length && (changes.n_changes ?? 0) > rows.length
      ? h("div", { class: "pm-muted", text: `${(changes.n_changes ?? 0) - rows.length} more changes not listed` })
      : null);
}

/** @param {RunReport} report */
function problemsSection(report) {
  const items = problems(report);
  if (!items.length) return h("p", { class: "pm-muted pm-problems-none", text: "No errors or suggestions." });
  return h("ul", { class: "pm-problems" }, items.map((p) =>
    h("li", { class: `pm-level-${p.level}` }, badge(p.level, p.level === "warning" ? "warn" : p.level === "error" ? "error" : "info"),
      h("span", { class: "pm-muted", text: ` ${p.where}: ` }), h("span", { text: p.message }))));
}

// The stream caveat of GPU_TIME_CAVEAT in monitors/report.py, shortened for a column title.
const GPU_TIME_CAVEAT = "Between CUDA events on the current stream at the node's start and end: it includes "
  + "earlier nodes' queued work still running and misses the node's kernels on other streams or devices. "
  + "Wall time is when the host ran the node; with asynchronous CUDA the node that waits pays for earlier kernels.";

// Short labels so the table fits the default sidebar width (312 px); each title says it whole.
// "cached" is a mark in the node's cell, not a column of its own. `few`: shown by default; the
// others (the process-wide peaks, the same on most rows) are behind the "more columns" toggle.
const NODE_COLUMNS = [
  { key: "nodeId", label: "Node", few: true },
  { key: "durationS", label: "Time", num: true, few: true, title: "wall time: when the host ran the node" },
  { key: "gpuTimeS", label: "GPU time", num: true, gpuTime: true, few: true, title: `GPU time. ${GPU_TIME_CAVEAT}` },
  { key: "rssAddedBytes", label: "RSS +", num: true, few: "noGpu", title: "RSS added: peak RSS above the node's start, what the node itself added" },
  { key: "gpuAddedBytes", label: "GPU +", num: true, gpu: true, few: true, title: "GPU added: peak GPU allocated above the node's start" },
  { key: "peakRssBytes", label: "Peak RSS", num: true, title: "the process's peak RSS while the node ran, everything before included" },
  { key: "peakGpuBytes", label: "Peak GPU", num: true, gpu: true, title: "peak GPU allocated while the node ran" },
];

/** @param {any} r @param {string} key */
function nodeCellText(r, key) {
  return key === "durationS" || key === "gpuTimeS" ? formatSeconds(r[key]) : formatBytes(r[key]);
}

/**
 * The node table's columns: those that have figures in this run, the few by default, all when the
 * user asked; `hidden` names the others for the toggle.
 * @param {any[]} rows @param {boolean} all
 */
export function nodeColumns(rows, all) {
  const hasGpu = rows.some((r) => r.peakGpuBytes !== null);
  const hasGpuTime = rows.some((r) => r.gpuTimeS !== null);
  const present = NODE_COLUMNS.filter((c) => (!c.gpu || hasGpu) && (!c.gpuTime || hasGpuTime));
  const few = present.filter((c) => c.few === true || (c.few === "noGpu" && !hasGpu));
  return { shown: all ? present : few, hidden: all ? [] : present.filter((c) => !few.includes(c)) };
}

/**
 * @param {RunReport} report
 * @param {{key: string, dir: "asc" | "desc", allColumns?: boolean}} sort
 * @param {Actions} actions
 */
function nodesTable(report, sort, actions) {
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
      h("tbody", {}, rows.map((r) => h("tr", {
        class: [r.slowest ? "pm-slowest" : "", r.hungriest ? "pm-hungriest" : "", r.cached ? "pm-cached" : ""].join(" ").trim(),
        dataset: { nodeId: r.nodeId }, title: `Click to centre this node on the canvas\npeak RSS ${formatBytes(r.peakRssBytes)}${r.peakGpuBytes !== null ? ` · peak GPU ${formatBytes(r.peakGpuBytes)}` : ""}`,
        onclick: () => actions.focusNode?.(r.nodeId) },
        shown.map((c) => c.key === "nodeId"
          ? h("td", { title: `${r.classType} (${r.status})` }, h("span", { class: "pm-muted", text: `#${r.nodeId} ` }), ...breakable(clip(r.label, 32)),
            r.slowest ? badge("slowest", "warn") : null, r.hungriest ? badge("most memory", "warn") : null,
            r.status === "error" ? badge("failed", "error") : r.status === "interrupted" ? badge("interrupted", "neutral") : null,
            r.cached ? badge("cached", "neutral", "served from ComfyUI's cache: it did not run") : null)
          : h("td", { class: "pm-num", text: nodeCellText(r, c.key), title: c.key === "gpuTimeS" ? r.gpuTimeUnknownReason : null }))))))));
}

/**
 * The node table as CSV, every column, figures in seconds and bytes (not the panel's rounding).
 * @param {any[]} rows
 */
export function nodeTableCsv(rows) {
  const keys = ["nodeId", "classType", "label", "status", "cached", "durationS", "gpuTimeS", "rssAddedBytes", "peakRssBytes", "gpuAddedBytes", "peakGpuBytes"];
  const heads = ["node_id", "class_type", "title", "status", "cached", "duration_s", "gpu_time_s", "rss_added_bytes", "peak_rss_bytes", "gpu_added_bytes", "peak_gpu_bytes"];
  const quote = (/** @type {unknown} */ v) => {
    if (v === null || v === undefined) return "";
    const text = String(v);
    // a leading = + - @ would be a formula in a spreadsheet: quoted and prefixed
    const safe = /^[=+\-@]/.test(text) && !/^-?[0-9.]+(e-?[0-9]+)?$/.test(text) ? `'${text}` : text;
    return /[",\n']/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
  };
  return [heads.join(","), ...rows.map((r) => keys.map((k) => quote(r[k])).join(","))].join("\n") + "\n";
}

/** Card tables with this many columns or more reflow to labelled rows in a narrow card (panel.css). */
export const STACK_FROM_COLUMNS = 4;

/** @param {import("./step_cards.mjs").Figure[]} items */
function figureList(items) {
  return h("dl", { class: "pm-figures" }, items.map((f) => h("div", { class: f.value.length > 16 ? "pm-figure pm-figure-wide" : "pm-figure" },
    h("dt", { text: f.label, title: f.title ?? null }), h("dd", { text: f.value, title: f.value.length > 24 ? f.value : null }))));
}

/**
 * One designed block of a card, as elements (text only, never markup).
 * @param {import("./step_cards.mjs").Block} block
 */
export function blockView(block) {
  const title = "title" in block && block.title ? h("div", { class: "pm-block-title", text: block.title }) : null;
  const note = "note" in block && block.note ? h("div", { class: "pm-muted pm-block-note", text: block.note }) : null;
  if (block.type === "figures") return h("div", { class: "pm-block" }, title, figureList(block.items));
  if (block.type === "text") return h("div", { class: "pm-block" }, title, h("p", { class: "pm-text", text: block.text }), note);
  if (block.type === "sides") {
    return h("div", { class: "pm-block pm-sides" }, block.sides.map((side) => h("div", { class: "pm-side" },
      h("div", { class: "pm-block-title", text: side.title }),
      side.text !== null ? h("p", { class: "pm-text pm-prompt-text", text: side.text }) : h("p", { class: "pm-muted", text: side.note ?? "–" }),
      side.text !== null && side.note ? h("div", { class: "pm-muted pm-block-note", text: side.note }) : null)));
  }
  if (block.type === "groups") {
    return h("div", { class: "pm-block" }, title, h("ul", { class: "pm-groups" }, block.groups.map((g) =>
      h("li", {}, g.label ? h("span", { class: "pm-group-label", text: `${g.label}: ` }) : null, h("span", { class: "pm-mono", text: g.items.join("; ") })))), note);
  }
  if (block.type === "bars") {
    return h("div", { class: "pm-block" }, title, h("div", { class: "pm-bars" }, block.items.map((b) => h("div", { class: "pm-bar-row", title: `${b.label}: ${b.text}` },
      h("span", { class: "pm-bar-label", text: b.label }),
      h("span", { class: "pm-bar-track" }, h("span", { class: "pm-bar", style: `width:${Math.max(2, Math.round(100 * b.fraction))}%` })),
      h("span", { class: "pm-num pm-bar-value", text: b.text })))), note);
  }
  if (block.type === "memory") return memoryView(block, title, note);
  const heads = block.columns.some((c) => c.label);
  // Four columns or more reflow in a narrow card: one row per entry, each figure with its label.
  const stack = block.columns.length >= STACK_FROM_COLUMNS ? " pm-stackable" : "";
  return h("div", { class: "pm-block pm-table-wrap" }, title,
    h("table", { class: `pm-table ${block.cls ?? ""}${stack}`.trim() },
      heads ? h("thead", {}, h("tr", {}, block.columns.map((c) => h("th", { class: c.num ? "pm-num" : null, text: c.label, title: c.title ?? null })))) : null,
      h("tbody", {}, block.rows.map((r) => h("tr", { class: r.tone ? `pm-row-${r.tone}` : null, title: r.title ?? null },
        r.cells.map((cell, i) => h("td", { class: block.columns[i]?.num ? "pm-num" : null, text: cell, dataset: stack && block.columns[i]?.label ? { label: block.columns[i].label } : null })))))), note);
}

/**
 * The shared memory section: a compact table that fits the default sidebar width (the peak's
 * time on a second line, a thin bar under each label from the start to the peak) and the scope.
 * @param {import("./step_cards.mjs").MemoryBlock} block @param {HTMLElement | null} title @param {HTMLElement | null} note
 */
function memoryView(block, title, note) {
  const scope = block.scope ? h("div", { class: "pm-muted pm-memory-scope", text: block.scope }) : null;
  if (block.unknown !== null) {
    return h("div", { class: "pm-block pm-memory" }, title,
      h("div", {}, h("span", { class: "pm-memory-na", text: "n/a", title: block.unknown }), h("span", { class: "pm-muted", text: ` ${block.unknown}` })), scope);
  }
  const labels = ["", "Start", "End", "Change", "Peak"];
  const cell = (/** @type {import("./step_cards.mjs").MemoryCell} */ c, /** @type {number} */ i) => h("td", { class: `pm-num${c.text === "n/a" ? " pm-memory-na" : ""}`, title: c.title ?? null, dataset: { label: labels[i + 1] } },
    c.text, c.sub ? h("span", { class: "pm-muted pm-memory-at", text: c.sub }) : null);
  return h("div", { class: "pm-block pm-memory" }, title,
    h("table", { class: "pm-table pm-memory-table pm-stackable" },
      h("thead", {}, h("tr", {}, labels.map((label, i) => h("th", { class: i ? "pm-num" : null, text: label,
        title: i === 4 ? "the highest value during the step and when (from the step's start); for RAM available, the lowest" : null })))),
      h("tbody", {}, block.rows.map((r) => h("tr", {},
        h("td", { class: "pm-memory-label", title: r.title }, r.label,
          r.bar ? h("div", { class: "pm-memory-track", title: "start → peak" }, h("span", { class: "pm-memory-bar", style: `left:${Math.round(100 * r.bar.from)}%;width:${Math.max(2, Math.round(100 * (r.bar.to - r.bar.from)))}%` })) : null),
        r.cells.map(cell))))),
    note, scope);
}

/** Save one step's JSON as a file (the card itself never shows JSON). @param {import("./report_view.mjs").StepReport} step */
function downloadStepJson(step) {
  const url = URL.createObjectURL(new Blob([JSON.stringify(step, null, 1)], { type: "application/json" }));
  const link = h("a", { href: url, download: safeFileName(`pipeline_monitor_${step.kind}_${step.node_id ?? "step"}.json`) });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/**
 * A step card: headline figures, the kind's designed blocks, one readable "details".
 * @param {import("./report_view.mjs").StepReport} step
 * @param {{stale?: string | null, nodeClass?: (id: string) => string | null | undefined}} [options] stale: how the run
 *   ended when not in success ("failed", "interrupted"): later nodes did not run; nodeClass: a node id's class
 */
export function stepCardView(step, options = {}) {
  const card = designedCard(step, { nodeClass: options.nodeClass });
  const more = card.more.length
    ? h("details", { class: "pm-details" }, h("summary", { text: "Details" }), card.more.map(blockView))
    : null;
  return h("article", { class: `pm-step pm-worst-${card.worst}`, dataset: { kind: card.kind, nodeId: card.nodeId ?? "" } },
    h("header", { class: "pm-step-head" }, h("span", { class: "pm-step-title", text: card.title }),
      h("span", { class: "pm-muted", text: ` #${card.nodeId ?? "?"}` }),
      card.badges.map((b) => badge(b.text, b.tone, b.title)),
      options.stale ? badge(`run ${options.stale}`, "neutral", `the run ${options.stale} after this step: what came after it did not run`) : null,
      h("button", { class: "pm-button pm-step-json", text: "JSON", title: "Download this step's JSON", onclick: () => downloadStepJson(step) })),
    card.findings.length || card.monitorErrors.length
      ? h("ul", { class: "pm-findings" },
        card.findings.map((f) => h("li", { class: `pm-level-${f.level}`, text: f.message })),
        card.monitorErrors.map((m) => h("li", { class: "pm-level-warning", text: `monitoring: ${m}` })))
      : null,
    card.headline.length ? figureList(card.headline) : null,
    card.sections.map(blockView),
    more);
}

/**
 * @param {RunReport} report
 * @param {RunSummary[]} runs for the compare choice
 * @param {{key: string, dir: "asc" | "desc"}} sort
 * @param {Actions} actions
 */
export function runView(report, runs, sort, actions) {
  const others = runs.filter((r) => r.prompt_id !== report.prompt_id);
  // first choice among runs profiled the same way: a deep profile's timings carry its overhead
  const alike = others.filter((r) => isDeepProfiled(r) === isDeepProfiled(report));
  const chosen = defaultCompareTarget(summaryOf(report, runs), alike) ?? defaultCompareTarget(summaryOf(report, runs), others);
  const select = h("select", { class: "pm-compare-select", title: "Run to compare with (first choice: the last successful run of this workflow)" },
    others.map((r) => h("option", { value: r.prompt_id, selected: r.prompt_id === chosen,
      text: `${runName(r)} · ${formatTime(r.started_unix_s)} · ${formatSeconds(r.duration_s)} · ${runStatus(r).text}` })));
  const steps = report.steps ?? [];
  const classes = new Map((report.nodes ?? []).map((n) => [String(n.node_id), n.class_type]));
  const nodeClass = (/** @type {string} */ id) => classes.get(id);
  const gpuNote = gpuNoteOfRun(report); // said once here, not on every card
  return h("section", { class: "pm-run", dataset: { promptId: report.prompt_id } },
    h("div", { class: "pm-toolbar" },
      h("button", { class: "pm-button pm-back", text: "← Runs", onclick: () => actions.back() }),
      h("button", { class: "pm-button pm-export-json", text: "JSON", title: "Download the JSON report", onclick: () => actions.download(report.prompt_id, "json") }),
      h("button", { class: "pm-button pm-export-html", text: "HTML", title: "Download the HTML report", onclick: () => actions.download(report.prompt_id, "html") })),
    h("div", { class: "pm-mono pm-muted pm-prompt-id", text: `prompt ${report.prompt_id}` }),
    runHead(report),
    gpuNote ? h("div", { class: "pm-muted pm-gpu-note", text: `GPU: ${gpuNote} (no GPU rows in the memory sections)` }) : null,
    inputChangesSection(report),
    others.length
      ? h("div", { class: "pm-toolbar" }, h("span", { class: "pm-muted", text: "Compare with " }), select,
        h("button", { class: "pm-button pm-compare", text: "Compare", onclick: () => actions.compare(report.prompt_id, select.value) }))
      : null,
    h("h4", { text: "Errors and suggestions" }), problemsSection(report),
    h("h4", { text: "Nodes" }), nodesTable(report, sort, actions),
    h("h4", { text: `Monitor steps (${steps.length})` }),
    steps.length ? h("div", { class: "pm-steps" }, steps.map((step) => stepCardView(step, { stale: report.status === "error" ? "failed" : report.status === "interrupted" ? "interrupted" : null, nodeClass })))
      : h("p", { class: "pm-muted pm-no-steps", text: report.status === "success"
        ? "No monitor nodes in this prompt."
        : `No monitor step recorded: the run ${report.status === "interrupted" ? "was interrupted" : "failed"} before any monitor node finished.` }));
}

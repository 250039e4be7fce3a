// The panel's views of runs: the list, one run (problems, per-node table, step cards) and the
// comparison of two runs. Each returns a fresh element; `actions` carries what the user can do.
import { h } from "./dom.mjs";
import { formatBytes, formatSeconds, formatTime, safeFileName } from "./format.mjs";
import { defaultCompareTarget, inputChangesLine, problems, runName, runStatus } from "./report_view.mjs";
import { isDeepProfiled } from "./deep_profile_card.mjs";
import { designedCard, gpuNoteOfRun } from "./step_cards.mjs";
import { nodeTrends } from "./sparkline.mjs";
import { badge } from "./widgets.mjs";
import { nodesTable } from "./node_table.mjs";

export { badge, breakable } from "./widgets.mjs";
export { nodeColumns, nodeTableCsv } from "./node_table.mjs";

/**
 * @typedef {import("./report_view.mjs").RunReport} RunReport
 * @typedef {import("./report_view.mjs").RunSummary} RunSummary
 * @typedef {{openRun: (id: string) => void, back: () => void, compare: (a: string, b: string) => void,
 *   download: (id: string, format: "json" | "html") => void, sort: (key: string) => void, refresh: () => void,
 *   focusNode?: (nodeId: string) => void, toggleColumns?: () => void, downloadCsv?: (id: string, csv: string) => void,
 *   toggleSubgraph?: (id: string) => void}} Actions
 */

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
    if (r.peak_process_used_bytes != null) figures.push(`device ${formatBytes(r.peak_process_used_bytes)}`);
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
  return h("article", { class: `pm-step pm-worst-${card.worst}`, dataset: { kind: card.kind, nodeId: card.nodeId ?? "", pending: String(card.pending) } },
    h("header", { class: "pm-step-head" }, h("span", { class: "pm-step-title", text: card.title }),
      card.nodeId != null ? h("span", { class: "pm-muted", text: ` #${card.nodeId}` }) : null, // a run-wide step (deep profile) has none
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
 * @param {RunReport[]} [history] earlier runs of the workflow, for the per-node sparklines
 */
export function runView(report, runs, sort, actions, history = []) {
  const others = runs.filter((r) => r.prompt_id !== report.prompt_id);
  // first choice among runs profiled the same way: a deep profile's timings carry its overhead
  const alike = others.filter((r) => isDeepProfiled(r) === isDeepProfiled(report));
  const chosen = defaultCompareTarget(summaryOf(report, runs), alike) ?? defaultCompareTarget(summaryOf(report, runs), others);
  const select = h("select", { class: "pm-compare-select", title: "Run to compare with (first choice: the last successful run of this workflow)" },
    chosen ? null : h("option", { value: "", selected: true, text: "compare with… (no earlier run of this workflow)" }),
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
    h("h4", { text: "Nodes" }), nodesTable(report, sort, actions, nodeTrends(report, history)),
    h("h4", { text: `Monitor steps (${steps.length})` }),
    steps.length ? h("div", { class: "pm-steps" }, steps.map((step) => stepCardView(step, { stale: report.status === "error" ? "failed" : report.status === "interrupted" ? "interrupted" : null, nodeClass })))
      : h("p", { class: "pm-muted pm-no-steps", text: report.status === "success"
        ? "No monitor nodes in this prompt."
        : `No monitor step recorded: the run ${report.status === "interrupted" ? "was interrupted" : "failed"} before any monitor node finished.` }));
}

import assert from "node:assert/strict";
import { test } from "node:test";
import {
  nodeRows, orderedSummaryKeys, problems, sortRows, stepCard, upsertRun,
} from "../../web/lib/report_view.mjs";
import { REGRESSION, compareRuns, historyLimit, isRegression, orderForCompare } from "../../web/lib/compare.mjs";

const MiB = 1024 ** 2;

/** A report as the server writes it (schemas/run_report.schema.json). */
export function makeReport(overrides = {}) {
  return {
    schema_version: 1,
    prompt_id: "p1",
    status: "success",
    started_unix_s: 1000,
    finished_unix_s: 1003,
    duration_s: 3,
    nodes: [
      { node_id: "1", class_type: "UNETLoader", title: null, status: "executed", cached: false, start_offset_s: 0, duration_s: 1.0,
        peak_rss_bytes: 900 * MiB, peak_rss_method: "kernel_hwm", rss_change_bytes: 100 * MiB, gpu_peaks: [],
        peak_rss_above_start_bytes: 100 * MiB },
      { node_id: "2", class_type: "KSampler", title: "<img src=x onerror=alert(1)>", status: "executed", cached: false,
        start_offset_s: 1, duration_s: 1.5, peak_rss_bytes: 1000 * MiB, peak_rss_method: "kernel_hwm", rss_change_bytes: 0, gpu_peaks: [],
        peak_rss_above_start_bytes: 20 * MiB },
      { node_id: "3", class_type: "VAELoader", title: null, status: "cached", cached: true, start_offset_s: null, duration_s: null,
        peak_rss_bytes: null, peak_rss_method: null, rss_change_bytes: null, gpu_peaks: [] },
    ],
    steps: [],
    span: { peak_rss_bytes: 1000 * MiB },
    system: {},
    error: null,
    monitor_errors: [],
    profile_enabled: true,
    ...overrides,
  };
}

test("node rows flag the slowest and the most memory-hungry executed node", () => {
  const rows = nodeRows(makeReport());
  // Node 2's absolute peak is higher (it ran after the loader); node 1 added more itself.
  assert.deepEqual(rows.map((r) => [r.nodeId, r.slowest, r.hungriest]), [["1", false, true], ["2", true, false], ["3", false, false]]);
  assert.deepEqual(rows.map((r) => r.rssAddedBytes), [100 * MiB, 20 * MiB, null]);
  assert.equal(rows[1].label, "<img src=x onerror=alert(1)>", "titles are data; the DOM layer renders them as text");
});

test("a failed or interrupted node that was the slowest leaves no badge to a quick node that finished", () => {
  const report = makeReport({ status: "interrupted" });
  report.nodes[1] = { ...report.nodes[1], status: "interrupted", duration_s: 30, peak_rss_above_start_bytes: 500 * MiB };
  const rows = nodeRows(report);
  assert.deepEqual(rows.map((r) => [r.nodeId, r.slowest, r.hungriest]), [["1", false, false], ["2", false, false], ["3", false, false]]);
  report.nodes[1] = { ...report.nodes[1], status: "error", duration_s: 0.013, peak_rss_above_start_bytes: 1 * MiB };
  assert.deepEqual(nodeRows(report).map((r) => [r.nodeId, r.slowest, r.hungriest]), [["1", true, true], ["2", false, false], ["3", false, false]],
    "a quick failing node is never badged; the finished node that was the top is");
});

test("GPU peaks decide memory-hungry when any node has one", () => {
  const report = makeReport();
  report.nodes[1].gpu_peaks = [{ device: "cuda:0", peak_allocated_bytes: 50 * MiB, peak_reserved_bytes: 60 * MiB,
    peak_allocated_above_start_bytes: 40 * MiB, peak_reserved_above_start_bytes: 40 * MiB }];
  const rows = nodeRows(report);
  assert.equal(rows.find((r) => r.hungriest)?.nodeId, "2");
  assert.equal(rows[1].peakGpuBytes, 50 * MiB);
  assert.equal(rows[1].gpuAddedBytes, 40 * MiB);
  report.nodes[1].gpu_peaks[0].peak_allocated_above_start_bytes = 44 * 1024;
  assert.equal(nodeRows(report).some((r) => r.hungriest), false, "44 KiB earns no 'most memory'");
});

test("a node row carries the process's device memory over its devices, or why it is unknown", () => {
  const report = makeReport();
  report.nodes[1].gpu_peaks = [
    { device: "cuda:0", peak_allocated_bytes: 5, peak_reserved_bytes: 6, peak_process_used_bytes: 700 * MiB,
      peak_aimdo_used_bytes: null, aimdo_used_unknown_reason: "comfy-aimdo is loaded but not initialised (dynamic VRAM is off)" },
    { device: "cuda:1", peak_allocated_bytes: 5, peak_reserved_bytes: 6, peak_process_used_bytes: 900 * MiB,
      peak_aimdo_used_bytes: null, aimdo_used_unknown_reason: null },
  ];
  const row = nodeRows(report)[1];
  assert.equal(row.deviceBytes, 900 * MiB);
  assert.equal(row.deviceUnknownReason, null);
  assert.equal(row.aimdoBytes, null);
  assert.match(String(row.aimdoUnknownReason), /dynamic VRAM is off/);
  assert.equal(nodeRows(report)[0].deviceBytes, null, "a node without GPU peaks has no device figure");
});

test("reports without the figures a node added flag no memory-hungry node", () => {
  const report = makeReport();
  for (const n of report.nodes) delete n.peak_rss_above_start_bytes;
  assert.equal(nodeRows(report).some((r) => r.hungriest), false, "the process's peak is no node's own figure");
});

test("the same work on a bigger process is no memory regression", () => {
  const base = makeReport();
  const later = makeReport({ prompt_id: "p2", started_unix_s: 2000 });
  // The process grew by 300 MiB between the runs (caches, loaded models): every absolute peak rises.
  later.nodes = later.nodes.map((n) => (isFinite(n.peak_rss_bytes ?? NaN) ? { ...n, peak_rss_bytes: n.peak_rss_bytes + 300 * MiB } : n));
  const c = compareRuns(base, later);
  assert.deepEqual(c.nodes.map((n) => n.memoryRegression), [false, false, false]);
  assert.equal(c.nodes[0].memoryDelta, 0);
  const hungrier = makeReport({ prompt_id: "p3", started_unix_s: 3000 });
  hungrier.nodes = hungrier.nodes.map((n) => (n.node_id === "2" ? { ...n, peak_rss_above_start_bytes: 200 * MiB } : n));
  assert.equal(compareRuns(base, hungrier).nodes.find((n) => n.nodeId === "2")?.memoryRegression, true);
});

test("sorting keeps unknown values last in both directions and is stable", () => {
  const rows = [{ k: 2, id: "a" }, { k: null, id: "b" }, { k: 5, id: "c" }, { k: 2, id: "d" }];
  assert.deepEqual(sortRows(rows, "k", "desc").map((r) => r.id), ["c", "a", "d", "b"]);
  assert.deepEqual(sortRows(rows, "k", "asc").map((r) => r.id), ["a", "d", "c", "b"]);
  const text = [{ k: "node 10" }, { k: "node 9" }];
  assert.deepEqual(sortRows(text, "k", "asc").map((r) => r.k), ["node 9", "node 10"]);
});

test("problems: errors first, then warnings, then notes", () => {
  const report = makeReport({
    error: { node_id: "2", node_type: "KSampler", exception_type: "RuntimeError", exception_message: "boom" },
    monitor_errors: ["reading nvml unavailable"],
    steps: [
      { kind: "lora", node_id: "5", summary: {}, details: {}, findings: [{ level: "info", message: "fine", code: null },
        { level: "warning", message: "unmatched keys", code: null }], monitor_errors: [], cached: false },
      { kind: "vae_encode", node_id: "6", summary: {}, details: {}, findings: [{ level: "error", message: "dummy", code: null }],
        monitor_errors: ["span failed"], cached: false },
    ],
  });
  const items = problems(report);
  assert.deepEqual(items.map((p) => p.level), ["error", "error", "warning", "warning", "info", "info"]);
  assert.match(items[0].message, /node #2 \(KSampler\): RuntimeError: boom/);
  assert.equal(items[1].where, "VAE encode #6");
});

test("step cards: chosen keys first, unknown kinds and keys still render", () => {
  const card = stepCard({ kind: "vae_encode", node_id: "6", summary: { zzz: 1, duration_s: 2, strategy_used: "dummy", dummy_used: true },
    details: { attempts: [] }, findings: [{ level: "error", message: "zeros", code: "dummy_latent" }], monitor_errors: [], cached: true });
  assert.deepEqual(card.keyFigures.slice(0, 2), ["strategy_used", "duration_s"]);
  assert.ok([...card.keyFigures, ...card.moreFigures].includes("zzz"));
  assert.deepEqual(card.badges.map((b) => [b.text, b.tone]), [["dummy latent (zeros)", "error"], ["cached", "info"]]);
  assert.equal(card.worst, "error");
  const tiled = stepCard({ kind: "vae_encode", node_id: "6", summary: { strategy_used: "tiled", strategy_requested: "auto" } });
  assert.deepEqual(tiled.badges.map((b) => [b.text, b.tone]), [["tiled", "info"]]);
  const unknown = stepCard({ kind: "future_kind", node_id: null, summary: { a_bytes: 1, b: "x" } });
  assert.equal(unknown.title, "future kind");
  assert.deepEqual(unknown.keyFigures, ["a_bytes", "b"]);
  assert.deepEqual(unknown.findings, []);
  const broken = stepCard({ kind: "lora", node_id: "1", summary: /** @type {any} */ (null) });
  assert.deepEqual(broken.keyFigures, []);
  assert.deepEqual(orderedSummaryKeys("models", { x: 1, n_objects: 2 }), ["n_objects", "x"]);
});

test("regression needs both the relative and the absolute threshold", () => {
  assert.equal(isRegression("seconds", 1, 1.2), true);
  assert.equal(isRegression("seconds", 1, 1.05), false, "5 % is noise");
  assert.equal(isRegression("seconds", 0.01, 0.05), false, "40 ms is below the absolute threshold");
  assert.equal(isRegression("bytes", 1024 * MiB, 1024 * MiB + REGRESSION.bytes + 1), false, "6 % of 1 GiB");
  assert.equal(isRegression("bytes", 100 * MiB, 200 * MiB), true);
  assert.equal(isRegression("seconds", null, 5), false);
  assert.equal(isRegression("seconds", 2, 1), false, "faster is no regression");
});

test("compare two runs per node and per step, flagging the regression", () => {
  const base = makeReport({ steps: [{ kind: "vae_encode", node_id: "6", summary: { strategy_used: "direct", duration_s: 1, latent_bytes: 10 } }] });
  const slower = makeReport({ prompt_id: "p2", started_unix_s: 2000, duration_s: 4 });
  slower.nodes = slower.nodes.map((n) => (n.node_id === "2" ? { ...n, duration_s: 3 } : n));
  slower.steps = [{ kind: "vae_encode", node_id: "6", summary: { strategy_used: "tiled", duration_s: 1.01, latent_bytes: 10 } }];
  const [a, b] = orderForCompare(slower, base);
  assert.equal(a.prompt_id, "p1", "the older run is the base");
  const c = compareRuns(a, b);
  assert.equal(c.regression, true);
  const node2 = c.nodes.find((n) => n.nodeId === "2");
  assert.equal(node2?.durationDelta, 1.5);
  assert.equal(node2?.timeRegression, true);
  assert.equal(c.nodes.find((n) => n.nodeId === "1")?.regression, false);
  assert.equal(c.totals.timeRegression, true);
  const step = c.steps[0];
  assert.deepEqual(step.figures.map((f) => f.key), ["strategy_used", "duration_s"], "only the figures that changed (latent_bytes did not)");
  assert.equal(step.figures[0].changed, true);
  assert.equal(step.regression, false);
  const same = compareRuns(base, makeReport({ prompt_id: "p3", steps: base.steps }));
  assert.equal(same.regression, false);
});

test("nodes or steps in one run only are kept", () => {
  const base = makeReport();
  const other = makeReport({ prompt_id: "p2", nodes: [base.nodes[0]], steps: [{ kind: "latent", node_id: "9", summary: { size_bytes: 5 } }] });
  const c = compareRuns(base, other);
  assert.equal(c.nodes.find((n) => n.nodeId === "2")?.presence, "base only");
  assert.equal(c.steps[0].presence, "candidate only");
});

test("runs are kept newest first, replaced by id, bounded", () => {
  let runs = [];
  runs = upsertRun(runs, { prompt_id: "a", status: "success", started_unix_s: 1 });
  runs = upsertRun(runs, { prompt_id: "b", status: "success", started_unix_s: 3 });
  runs = upsertRun(runs, { prompt_id: "c", status: "error", started_unix_s: 2 });
  runs = upsertRun(runs, { prompt_id: "a", status: "error", started_unix_s: 1 });
  assert.deepEqual(runs.map((r) => r.prompt_id), ["b", "c", "a"]);
  assert.equal(runs[2].status, "error");
  assert.equal(upsertRun(runs, /** @type {any} */ ({})).length, 3, "malformed events are ignored");
  assert.equal(upsertRun(runs, { prompt_id: "d", status: "success", started_unix_s: 9 }, 2).length, 2);
});

test("a step card whose badges fail says why among its monitoring errors instead of hiding it", () => {
  const summary = { get success() { throw new TypeError("summary.success is unreadable"); }, n_keys: 3 };
  const card = stepCard({ kind: "lora", node_id: "4", summary, monitor_errors: ["earlier problem"] });
  assert.deepEqual(card.badges, []);
  assert.deepEqual(card.monitorErrors, ["earlier problem", "badges not shown: TypeError: summary.success is unreadable"]);
  assert.equal(card.worst, "warning");
  const fine = stepCard({ kind: "lora", node_id: "4", summary: { success: true } });
  assert.deepEqual(fine.monitorErrors, []);
  assert.equal(fine.worst, "info");
});

test("process and system readings in step figures are shown but never the step's regression", () => {
  const step = (/** @type {number} */ rss) => ({ kind: "models", node_id: "3", summary: { process_rss_bytes: rss, total_size_bytes: 10 } });
  const base = makeReport({ steps: [step(900 * MiB)] });
  const later = makeReport({ prompt_id: "p2", started_unix_s: 2000, steps: [step(1200 * MiB)] });
  const c = compareRuns(base, later);
  const figure = c.steps[0].figures.find((f) => f.key === "process_rss_bytes");
  assert.equal(figure?.changed, true);
  assert.equal(figure?.regression, false);
  assert.equal(c.steps[0].regression, false);
  const vae = (/** @type {number} */ own) => ({ kind: "vae_encode", node_id: "6", summary: { peak_rss_bytes: 2000 * MiB, rss_peak_increase_bytes: own } });
  const grown = compareRuns(makeReport({ steps: [vae(10 * MiB)] }), makeReport({ prompt_id: "p3", steps: [vae(300 * MiB)] }));
  assert.equal(grown.steps[0].regression, true, "what the encode itself added still counts");
});

test("problems: seams the start-up self-check did not find are one warning of the run, none when all were found", () => {
  const items = problems(makeReport({ missing_seams: ["comfy.model_management.get_free_memory", "execution.reset_progress_state"] }));
  assert.deepEqual(items.map((p) => [p.level, p.where]), [["warning", "monitor"]]);
  assert.match(items[0].message, /comfy\.model_management\.get_free_memory, execution\.reset_progress_state/);
  assert.deepEqual(problems(makeReport({ missing_seams: [] })), []);
});

test("compare sorts nodes by the size of their change and judges them against their history's spread", () => {
  const node = (/** @type {string} */ id, /** @type {number} */ s, cached = false) => ({ node_id: id, class_type: `C${id}`, status: "success", cached, duration_s: s, peak_rss_above_start_bytes: MiB });
  const run = (/** @type {string} */ id, /** @type {number} */ loader, t = 1) =>
    makeReport({ prompt_id: id, started_unix_s: t, duration_s: 2 + loader, nodes: [node("1", loader), node("2", 2), node("3", 0, true)] });
  const noisy = [0.101, 0.164, 0.098, 0.187, 0.122, 0.143].map((s, i) => run(`h${i}`, s, i));
  const base = run("a", 0.1, 10);
  const newer = run("b", 0.195, 11);
  newer.nodes = [...(newer.nodes ?? []).slice(0, 1), node("2", 2.5), node("3", 0, true)];
  const c = compareRuns(base, newer, noisy);
  assert.deepEqual(c.nodes.map((n) => n.nodeId), ["2", "1", "3"], "largest change first: +0.5 s, then +0.095 s, then nothing");
  const loader = c.nodes.find((n) => n.nodeId === "1");
  assert.equal(loader?.regression, false, "0.195 s is within the loader's recorded spread");
  assert.equal(loader?.nRuns, 7);
  assert.equal(compareRuns(base, newer).nodes.find((n) => n.nodeId === "1")?.regression, true, "without history: the plain threshold");
  assert.equal(c.nodes.find((n) => n.nodeId === "2")?.regression, true, "+0.5 s on a steady 2 s node is real");
  assert.equal(c.totals.nRuns, 7);
});

test("the history rule matches monitors/cli/aggregate.py history_limit", () => {
  assert.deepEqual(historyLimit([], "seconds"), { limit: null, nRuns: 0 });
  assert.ok(Math.abs(/** @type {number} */ (historyLimit([1.0], "seconds").limit) - 1.1) < 1e-9);
  assert.ok(Math.abs(/** @type {number} */ (historyLimit([1.0, 1.4, 1.2], "seconds").limit) - 1.8) < 1e-9);
});

test("compare: a few KiB added by a node in a run that adds little memory never outrank seconds", () => {
  const KiB = 1024;
  const node = (/** @type {string} */ id, /** @type {number} */ s, /** @type {number} */ added) => ({ node_id: id, class_type: `C${id}`, status: "success", cached: false, duration_s: s, peak_rss_above_start_bytes: added });
  const base = makeReport({ prompt_id: "a", duration_s: 1.2, nodes: [node("2", 1.0, 0), node("8", 0.01, 0)] });
  const newer = makeReport({ prompt_id: "b", duration_s: 4.2, nodes: [node("2", 4.0, 0), node("8", 0.01, 100 * KiB)] });
  const c = compareRuns(base, newer);
  assert.deepEqual(c.nodes.map((n) => n.nodeId), ["2", "8"], "+3 s leads; +100 KiB is measured against the 64 MiB floor");
  const hungry = makeReport({ prompt_id: "c", duration_s: 1.2, nodes: [node("2", 1.1, 0), node("8", 0.01, 512 * MiB)] });
  assert.deepEqual(compareRuns(base, hungry).nodes.map((n) => n.nodeId), ["8", "2"], "+512 MiB leads a +0.1 s change");
});

test("the panel's compare flags nothing with too little history, and says so", async () => {
  const { MIN_JUDGED_RUNS, withholdThinVerdicts } = await import("../../web/lib/compare.mjs");
  const { verdictBasis } = await import("../../web/lib/compare_view.mjs");
  const node = (/** @type {string} */ id, /** @type {number} */ s) => ({ node_id: id, class_type: `C${id}`, status: "success", cached: false, duration_s: s, peak_rss_above_start_bytes: MiB });
  const run = (/** @type {string} */ id, /** @type {number} */ slow, t = 1) =>
    makeReport({ prompt_id: id, started_unix_s: t, duration_s: 3 + slow, nodes: [node("1", slow), node("2", 2)] });
  // one earlier run: a noisy +0.25 s node is beyond the plain threshold, but the panel withholds it
  const thin = compareRuns(run("a", 0.1, 10), run("b", 0.35, 11));
  assert.equal(thin.nodes.find((n) => n.nodeId === "1")?.regression, true, "the rule alone flags it");
  const shown = withholdThinVerdicts(thin);
  assert.equal(shown.judged, false);
  assert.equal(shown.regression, false);
  assert.ok(shown.nodes.every((n) => !n.regression) && shown.steps.every((s) => !s.regression));
  assert.match(verdictBasis(1, false), /Too little history.*1 earlier run.*from 3 on/);
  // enough history: the same rule as before, verdicts kept
  const history = [0.1, 0.11, 0.1].map((s, i) => run(`h${i}`, s, i));
  const judged = withholdThinVerdicts(compareRuns(run("a", 0.1, 10), run("b", 0.35, 11), history));
  assert.equal(MIN_JUDGED_RUNS, 3);
  assert.equal(judged.judged, true);
  assert.equal(judged.nodes.find((n) => n.nodeId === "1")?.regression, true);
  assert.match(verdictBasis(4, true), /spread of 4 earlier runs/);
});

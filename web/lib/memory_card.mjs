// The shared "Memory" section of every step that carries `details.memory`: start, end, change and
// peak of each declared memory row (MEMORY_ROWS), which nodes were measured, and why a run has no
// GPU rows, said once. Pure functions (no DOM).
import { formatBytes, formatSeconds, isNumber } from "./format.mjs";
import { arr, obj } from "./card_parts.mjs";
import { MEMORY_NOT_READ_REASON, MEMORY_ROWS } from "./vocabulary.generated.mjs";

/**
 * @typedef {import("./card_parts.mjs").MemoryBlock} MemoryBlock
 * @typedef {import("./card_parts.mjs").MemoryRowView} MemoryRowView
 * @typedef {import("./card_parts.mjs").StepReport} StepReport
 */


/**
 * "measured: LoraLoader #10, #11 · not run: #12" from a step's memory_scope; node ids grouped by
 * their class when `nodeClass` knows it.
 * @param {any} scope @param {(id: string) => string | null | undefined} [nodeClass]
 */
export function memoryScopeLine(scope, nodeClass) {
  const s = obj(scope);
  const named = (/** @type {unknown[]} */ ids) => {
    /** @type {Map<string, string[]>} */
    const byClass = new Map();
    for (const id of ids.map(String)) {
      const cls = nodeClass?.(id) ?? "";
      if (!byClass.has(cls)) byClass.set(cls, []);
      /** @type {string[]} */ (byClass.get(cls)).push(`#${id}`);
    }
    return [...byClass.entries()].map(([cls, list]) => `${cls ? `${cls} ` : ""}${list.join(", ")}`).join("; ");
  };
  const parts = [];
  if (arr(s.measured_node_ids).length) parts.push(`measured: ${named(arr(s.measured_node_ids))}`);
  if (arr(s.not_run_node_ids).length) parts.push(`not run (cached): ${named(arr(s.not_run_node_ids))}`);
  return parts.length ? parts.join(" · ") : null;
}

/**
 * Bytes in binary units, without the decimal from 100 of a unit up ("920 MiB", "20.8 GiB"), so four
 * figures fit in a row of the 312 px sidebar.
 * @param {number} v
 */
export function compactBytes(v) {
  return formatBytes(v).replace(/^(-?\d{3,})\.\d /, "$1 ");
}

/**
 * One row of the memory table: start, end, change, peak (or low) with its time, and a bar from
 * the start to the extreme on a scale of the extreme. Unknowns are "n/a" with the reason as title.
 * @param {any} fig @param {string} reason
 */
function memoryCells(fig, reason) {
  const f = obj(fig);
  const low = "low" in f;
  const extreme = low ? f.low : f.peak;
  const at = low ? f.low_at_s : f.peak_at_s;
  const na = { text: "n/a", title: reason };
  const bytes = (/** @type {unknown} */ v) => (isNumber(v) ? { text: compactBytes(v), title: `${v.toLocaleString("en")} bytes` } : na);
  const change = isNumber(f.change) ? { text: f.change === 0 ? "±0" : `${f.change > 0 ? "+" : "-"}${compactBytes(Math.abs(f.change))}` } : na;
  // a low or peak at the step's very start says nothing: no time under it
  const top = isNumber(extreme) ? { text: compactBytes(extreme), sub: isNumber(at) && at >= 0.0005 ? `${low ? "low " : ""}@ ${formatSeconds(at)}` : undefined, title: low ? "lowest during the step" : "highest during the step" } : na;
  const bar = !low && isNumber(extreme) && isNumber(f.baseline) && extreme > 0 ? { from: Math.max(0, Math.min(1, f.baseline / extreme)), to: 1 } : null;
  return { cells: [bytes(f.baseline), bytes(f.end), change, top], bar };
}

/**
 * The shared "Memory" section of a step that carries `details.memory` (monitors.engine.span.memory_picture):
 * process RSS, system RAM used/available and per GPU allocated/reserved/NVML used, each as start,
 * end, change and peak @ time; or, when there is no picture, why. Null for steps without one.
 * @param {StepReport} step @param {(id: string) => string | null | undefined} [nodeClass]
 * @returns {MemoryBlock | null}
 */
export function memoryBlock(step, nodeClass) {
  const d = obj(step.details);
  if (!("memory" in d)) return null;
  const scope = memoryScopeLine(d.memory_scope, nodeClass);
  const m = d.memory;
  if (!m || typeof m !== "object") {
    return { type: "memory", title: "Memory", rows: [], unknown: String(d.memory_unknown_reason ?? "not measured"), scope };
  }
  const reasons = obj(m.unknown_reasons);
  /** @type {MemoryRowView[]} */
  const rows = [];
  const add = (/** @type {any} */ decl, /** @type {any} */ fig, /** @type {string} */ label) => {
    const reason = (decl.reason && reasons[decl.reason]) || MEMORY_NOT_READ_REASON;
    rows.push({ label, title: decl.description, ...memoryCells(fig, reason) });
  };
  for (const decl of MEMORY_ROWS) {
    if (decl.group === null) add(decl, m[decl.field], decl.label);
    else if (decl.group === "system_ram") add(decl, obj(m.system_ram)[decl.field], decl.label);
  }
  for (const gpu of arr(m.gpus)) {
    for (const decl of MEMORY_ROWS.filter((r) => r.group === "gpu")) add(decl, gpu[decl.field], `${gpu.device ?? "GPU"} ${decl.label}`);
  }
  // why there is no GPU row is said once per run (gpuNoteOfRun), not on every card
  return { type: "memory", title: `Memory${isNumber(m.duration_s) ? ` over ${formatSeconds(m.duration_s)}` : ""}`, rows, unknown: null, scope };
}

/**
 * Why a run's memory sections have no GPU rows, once for the run: the first step's reason.
 * @param {{steps?: StepReport[]}} report
 * @returns {string | null}
 */
export function gpuNoteOfRun(report) {
  for (const step of report.steps ?? []) {
    const reason = obj(obj(obj(step.details).memory).unknown_reasons).gpus;
    if (typeof reason === "string" && reason) return reason;
  }
  return null;
}

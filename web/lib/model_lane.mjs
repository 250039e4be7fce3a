// The model manager's work in the panel (a run's `model_residency`, from ComfyUI's loads, unloads
// and LoRA patches): a lane of the chart at the foot of the plot, one mark per event at its time
// (green a load, red an unload, violet a LoRA patch or unpatch), and each node row's weights moved.
import { formatBytes, formatSeconds, isNumber } from "./format.mjs";

/** @typedef {{t: number, dur: number, kind: string, group: "load" | "unload" | "patch", label: string}} LaneEvent */

export const LANE_COLORS = { load: "#4ade80", unload: "#f87171", patch: "#a78bfa" };
export const LANE_HEIGHT = 5;

/** @param {string} kind @returns {LaneEvent["group"]} */
export function laneGroup(kind) {
  return kind.startsWith("load") ? "load" : kind.startsWith("unload") ? "unload" : "patch";
}

/**
 * The chart lane of a run: its model events at their wall-clock time (seconds, as the samples).
 * @param {any} report @returns {LaneEvent[]}
 */
export function modelLane(report) {
  const events = report?.model_residency?.events;
  const start = report?.started_unix_s;
  if (!Array.isArray(events) || !isNumber(start)) return [];
  return events
    .filter((e) => e && isNumber(e.offset_s))
    .map((e) => {
      const kind = String(e.kind);
      const bytes = isNumber(e.bytes_moved) && e.bytes_moved > 0 ? ` ${formatBytes(e.bytes_moved)}` : "";
      const node = e.node_id !== null && e.node_id !== undefined ? ` (node #${e.node_id})` : "";
      return { t: start + e.offset_s, dur: isNumber(e.duration_s) ? e.duration_s : 0, kind, group: laneGroup(kind),
        label: `${kind} ${e.model_class ?? "model"}${bytes}${node}` };
    });
}

/**
 * Paint the lane: a mark per event, at least 3 px wide, in the plot's last rows.
 * @param {{ctx: CanvasRenderingContext2D, top: number, h: number, x: (t: number) => number}} f
 * @param {LaneEvent[] | undefined} lane
 */
export function drawModelLane(f, lane) {
  if (!lane || !lane.length) return;
  const { ctx, top, h, x } = f;
  const y = top + h - LANE_HEIGHT - 1;
  for (const e of lane) {
    const x0 = x(e.t);
    ctx.fillStyle = LANE_COLORS[e.group];
    ctx.fillRect(x0, y, Math.max(3, x(e.t + e.dur) - x0), LANE_HEIGHT);
  }
}

/**
 * A node row's weights moved: loaded plus unloaded bytes, the seconds, and a title saying both.
 * @param {any} n a node row of the report
 */
export function weightsFields(n) {
  const loaded = isNumber(n.weights_loaded_bytes) ? n.weights_loaded_bytes : null;
  const unloaded = isNumber(n.weights_unloaded_bytes) ? n.weights_unloaded_bytes : null;
  const seconds = isNumber(n.weights_moved_s) ? n.weights_moved_s : null;
  const none = loaded === null && unloaded === null && seconds === null;
  return {
    weightsMovedBytes: none ? null : (loaded ?? 0) + (unloaded ?? 0),
    weightsMovedS: seconds,
    weightsTitle: none ? null : `loaded ${formatBytes(loaded ?? 0)}, unloaded ${formatBytes(unloaded ?? 0)} in ${formatSeconds(seconds)}`,
  };
}

/**
 * The run's findings on model weights (a model reloaded after an eviction, a LoRA change, a
 * partial load), for the run's problem list.
 * @param {any} report @returns {{level: string, where: string, message: string}[]}
 */
export function modelFindings(report) {
  const findings = report?.model_residency?.findings;
  if (!Array.isArray(findings)) return [];
  return findings
    .filter((f) => f && typeof f.message === "string")
    .map((f) => ({ level: ["error", "warning", "info"].includes(f.level) ? f.level : "info", where: "models", message: f.message }));
}

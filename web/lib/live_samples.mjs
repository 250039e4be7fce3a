// The live chart's data: a bounded buffer of sampler ticks normalised to points (process RSS,
// system RAM, GPU allocated/reserved/utilisation, the executing node, the prompt), and what the
// chart reads from them: runs as bands cut at gaps, node segments, the series present, the point
// under the pointer, the range that shows one run. Pure (no DOM); live_chart.mjs draws them.
import { isNumber } from "./format.mjs";

/**
 * @typedef {{device: string, allocated: number | null, reserved: number | null, util: number | null, total: number | null,
 *   process: number | null, dynamic: number | null}} GpuPoint
 * @typedef {{t: number, ramUsed: number | null, ramTotal: number | null, rss: number | null, cpu: number | null,
 *   gpus: GpuPoint[], node: {id: string, label: string} | null, promptId: string | null}} Point
 */

export const WINDOW_S = 300;
/** The window shown: fixed, so the scale does not jump while a prompt runs. */
export const CHART_WINDOW_S = 120;
/** Samples further apart than this (or 4 sampling intervals) are not joined by a line. */
export const GAP_S = 5;

/**
 * The time span to show: always CHART_WINDOW_S (a window that grew with the data made the time
 * axis jump from 30 s to 5 min while one watched).
 * @param {Point[]} _points
 */
export function chartWindow(_points) {
  return CHART_WINDOW_S;
}

/** The narrowest zoom: a short run still gets a readable time axis. */
export const ZOOM_MIN_S = 1;

/**
 * @typedef {{from: number, to: number, promptId: string, runStart: number}} ZoomRange
 * The chart zoomed to one run: from/to in unix seconds, runStart is the run's own start (time
 * labels count from it).
 */

/**
 * The time range that shows one run: its start and end (from its report summary when known, else
 * from the samples that carry its id): from its start (the axis starts at 0 s, not half a second
 * before a 7 ms run) to its end padded by 5 %, at least ZOOM_MIN_S wide; null when neither says
 * when it ran.
 * @param {string} promptId
 * @param {{started_unix_s?: number | null, duration_s?: number | null} | null | undefined} run
 * @param {Point[]} points
 * @returns {ZoomRange | null}
 */
export function runRange(promptId, run, points) {
  const own = points.filter((p) => p.promptId === promptId);
  let start = isNumber(run?.started_unix_s) ? run.started_unix_s : own[0]?.t;
  let end = isNumber(run?.started_unix_s) && isNumber(run?.duration_s) ? run.started_unix_s + run.duration_s : own[own.length - 1]?.t;
  if (!isNumber(start)) return null;
  if (!isNumber(end) || end < start) end = start;
  const pad = Math.max(0.02, (end - start) * 0.05);
  return { from: start, to: Math.max(end + pad, start + ZOOM_MIN_S), promptId, runStart: start };
}

/**
 * The run band under time `t`, if any (clicking a band zooms to its run).
 * @param {Point[]} points @param {number} t
 */
export function bandAt(points, t) {
  return runBands(points).find((b) => t >= b.start - 0.5 && t <= b.end + 0.5) ?? null;
}


/**
 * Whether there is a gap (no samples: tab closed, server down) between two consecutive points.
 * @param {Point} a @param {Point} b @param {number} [intervalS] the sampling interval
 */
export function isGap(a, b, intervalS = 0.5) {
  return b.t - a.t > Math.max(GAP_S, 4 * intervalS);
}

/**
 * Runs of consecutive points of the same prompt, cut at gaps: [{start, end, promptId}].
 * @param {Point[]} points
 */
export function runBands(points) {
  /** @type {{start: number, end: number, promptId: string}[]} */
  const bands = [];
  /** @type {{start: number, end: number, promptId: string} | null} */
  let open = null;
  let prev = null;
  for (const p of points) {
    if (open && p.promptId === open.promptId && prev && !isGap(prev, p)) open.end = p.t;
    else {
      open = p.promptId ? { start: p.t, end: p.t, promptId: p.promptId } : null;
      if (open) bands.push(open);
    }
    prev = p;
  }
  return bands;
}

/**
 * The point nearest to time `t` (within `maxDistanceS`), for the hover readout.
 * @param {Point[]} points @param {number} t @param {number} maxDistanceS
 * @returns {Point | null}
 */
export function pointNear(points, t, maxDistanceS) {
  let best = null;
  for (const p of points) if (!best || Math.abs(p.t - t) < Math.abs(best.t - t)) best = p;
  return best && Math.abs(best.t - t) <= maxDistanceS ? best : null;
}


export const MAX_POINTS = 3000;

/**
 * A `pipeline_monitor.sample` payload (or a backfilled snapshot) -> a compact point.
 * @param {any} raw
 * @returns {Point | null}
 */
export function normalizeSample(raw) {
  if (!raw || !isNumber(raw.unix_time_s)) return null;
  const num = (/** @type {unknown} */ v) => (isNumber(v) ? v : null);
  const gpus = Array.isArray(raw.gpus)
    ? raw.gpus.map((/** @type {any} */ g, /** @type {number} */ i) => ({
        device: typeof g?.device === "string" ? g.device : `cuda:${i}`,
        allocated: num(g?.allocated_bytes),
        reserved: num(g?.reserved_bytes),
        util: num(g?.utilization_pct),
        total: num(g?.nvml_total_bytes),
        // this process's device memory as the driver counts it, and dynamic VRAM's own figure:
        // what torch's counters miss (null where not measured)
        process: num(g?.process_used_bytes),
        dynamic: num(g?.aimdo_used_bytes),
      }))
    : [];
  const node = raw.node && raw.node.node_id != null
    ? { id: String(raw.node.node_id), label: String(raw.node.title || raw.node.class_type || "") }
    : null;
  return {
    t: raw.unix_time_s,
    ramUsed: num(raw.ram_used_bytes),
    ramTotal: num(raw.ram_total_bytes),
    rss: num(raw.process_rss_bytes),
    cpu: num(raw.cpu_pct),
    gpus,
    node,
    promptId: typeof raw.prompt_id === "string" ? raw.prompt_id : null,
  };
}

export class SampleBuffer {
  /** @param {number} max */
  constructor(max = MAX_POINTS) {
    this.max = max;
    /** @type {Point[]} */
    this.points = [];
  }

  /** Append in time order; out-of-order or duplicate ticks (backfill overlapping live) are dropped.
   * @param {any} raw @returns {boolean} */
  push(raw) {
    const point = normalizeSample(raw);
    const last = this.points[this.points.length - 1];
    if (!point || (last && point.t <= last.t)) return false;
    this.points.push(point);
    if (this.points.length > this.max) this.points.splice(0, this.points.length - this.max);
    return true;
  }

  /** @param {any[]} raws */
  extend(raws) {
    let added = 0;
    for (const raw of raws ?? []) if (this.push(raw)) added += 1;
    return added;
  }

  latest() {
    return this.points[this.points.length - 1] ?? null;
  }

  /** Points within `seconds` of the newest one. @param {number} seconds */
  window(seconds = WINDOW_S) {
    const last = this.latest();
    if (!last) return [];
    const from = last.t - seconds;
    let i = this.points.length - 1;
    while (i > 0 && this.points[i - 1].t >= from) i -= 1;
    return this.points.slice(i);
  }
}

/**
 * Runs of consecutive points executing the same node in the same prompt: [{start, end, id, label,
 * promptId}] (a node of an earlier run with the same id is a segment of its own).
 * @param {Point[]} points
 */
export function nodeSegments(points) {
  /** @typedef {{start: number, end: number, id: string, label: string, promptId: string | null}} Segment */
  /** @type {Segment[]} */
  const segments = [];
  /** @type {Segment | null} */
  let open = null;
  for (const p of points) {
    if (p.node && open && open.id === p.node.id && open.promptId === (p.promptId ?? null)) {
      open.end = p.t;
      continue;
    }
    if (open) open.end = p.t; // the node ran until this tick at most
    open = p.node ? { start: p.t, end: p.t, id: p.node.id, label: p.node.label, promptId: p.promptId ?? null } : null;
    if (open) segments.push(open);
  }
  return segments;
}

/**
 * A node segment's label on the strip: "#9:6 VAE Decode", with the run it belongs to when the chart
 * is zoomed to another run ("#6 VAE Decode · earlier run").
 * @param {{start: number, id: string, label: string, promptId: string | null}} seg
 * @param {ZoomRange | null} zoom
 */
export function segmentLabel(seg, zoom) {
  const text = `#${seg.id} ${seg.label}`;
  if (!zoom || seg.promptId === zoom.promptId) return text;
  return `${text} · ${seg.start < zoom.runStart ? "earlier" : "later"} run`;
}

/** The series present in the points, with their colours; GPU series only where a GPU reports.
 * System RAM is a chip, not a line (`plot: false`): its scale would flatten the process's line. */
export const SERIES = [
  { key: "ramUsed", name: "RAM used", color: "#94a3b8", unit: "bytes", plot: false },
  { key: "rss", name: "process RSS", color: "#4ade80", unit: "bytes" },
  { key: "gpuAllocated", name: "GPU allocated", color: "#60a5fa", unit: "bytes" },
  { key: "gpuReserved", name: "GPU reserved", color: "#c084fc", unit: "bytes" },
  { key: "gpuUtil", name: "GPU utilisation", color: "#fbbf24", unit: "pct" },
];

/**
 * Value of a series at a point (first GPU for the GPU series).
 * @param {Point} p @param {string} key @returns {number | null}
 */
export function seriesValue(p, key) {
  const gpu = p.gpus[0];
  switch (key) {
    case "ramUsed": return p.ramUsed;
    case "rss": return p.rss;
    case "gpuAllocated": return gpu ? gpu.allocated : null;
    case "gpuReserved": return gpu ? gpu.reserved : null;
    case "gpuUtil": return gpu ? gpu.util : null;
    default: return null;
  }
}

/** @param {Point[]} points */
export function presentSeries(points) {
  return SERIES.filter((s) => points.some((p) => seriesValue(p, s.key) !== null));
}


// The live chart: a bounded buffer of sampler ticks and a hand-rolled canvas drawing of RAM,
// process RSS, GPU allocated/reserved (bytes, left axis) and GPU utilisation (%, right axis) over
// the last minutes, with the executing node marked on the time axis. Drawing happens only when
// asked (one requestAnimationFrame per new sample while the panel is open), never on a timer.
import { formatBytes, isNumber } from "./format.mjs";

/**
 * @typedef {{device: string, allocated: number | null, reserved: number | null, util: number | null, total: number | null}} GpuPoint
 * @typedef {{t: number, ramUsed: number | null, ramTotal: number | null, rss: number | null, cpu: number | null,
 *   gpus: GpuPoint[], node: {id: string, label: string} | null, promptId: string | null}} Point
 */

export const WINDOW_S = 300;
const WINDOW_STEPS_S = [30, 60, 120, 300];

/**
 * The time span to show: the smallest step that covers the data (at most WINDOW_S), so a chart
 * opened a few seconds ago is not a sliver at the right edge.
 * @param {Point[]} points
 */
export function chartWindow(points) {
  const span = points.length > 1 ? points[points.length - 1].t - points[0].t : 0;
  return WINDOW_STEPS_S.find((s) => s >= span) ?? WINDOW_S;
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
 * Runs of consecutive points executing the same node: [{start, end, id, label}].
 * @param {Point[]} points
 */
export function nodeSegments(points) {
  /** @type {{start: number, end: number, id: string, label: string}[]} */
  const segments = [];
  /** @type {{start: number, end: number, id: string, label: string} | null} */
  let open = null;
  for (const p of points) {
    if (p.node && open && open.id === p.node.id) {
      open.end = p.t;
      continue;
    }
    if (open) open.end = p.t; // the node ran until this tick at most
    open = p.node ? { start: p.t, end: p.t, id: p.node.id, label: p.node.label } : null;
    if (open) segments.push(open);
  }
  return segments;
}

/** The series present in the points, with their colours; GPU series only where a GPU reports. */
export const SERIES = [
  { key: "ramUsed", name: "RAM used", color: "#94a3b8", unit: "bytes" },
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

/** A "nice" upper bound for the byte axis: 1, 2 or 5 times a power of 1024-ish steps. @param {number} max */
export function niceBytesMax(max) {
  if (!(max > 0)) return 1024 ** 3;
  const step = 1024 ** Math.max(0, Math.floor(Math.log(max) / Math.log(1024)));
  for (const m of [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]) if (m * step >= max * 1.05) return m * step;
  return max * 1.1;
}

/**
 * Paint the chart. `colors` come from the page's theme (CSS variables).
 * @param {HTMLCanvasElement} canvas
 * @param {Point[]} points
 * @param {{fg: string, muted: string, grid: string, windowS?: number}} colors
 */
export function drawChart(canvas, points, colors) {
  const dpr = globalThis.devicePixelRatio || 1;
  const cssW = canvas.clientWidth || 300;
  const cssH = canvas.clientHeight || 160;
  if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
  }
  const ctx = canvas.getContext("2d");
  if (!ctx) return;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, cssW, cssH);
  ctx.font = "10px sans-serif";
  const windowS = colors.windowS ?? WINDOW_S;
  const left = 48;
  const right = 30;
  const top = 6;
  const strip = 14; // executing-node strip under the plot
  const bottom = 16 + strip;
  const w = Math.max(10, cssW - left - right);
  const h = Math.max(10, cssH - top - bottom);
  const last = points[points.length - 1];
  const now = last ? last.t : Date.now() / 1000;
  const x = (/** @type {number} */ t) => left + w * (1 - (now - t) / windowS);

  const series = presentSeries(points);
  let maxBytes = 0;
  for (const p of points) {
    for (const s of series) {
      const v = seriesValue(p, s.key);
      if (s.unit === "bytes" && v !== null && v > maxBytes) maxBytes = v;
    }
  }
  const yMax = niceBytesMax(maxBytes);
  const yBytes = (/** @type {number} */ v) => top + h * (1 - v / yMax);
  const yPct = (/** @type {number} */ v) => top + h * (1 - v / 100);

  // grid and axes
  ctx.strokeStyle = colors.grid;
  ctx.fillStyle = colors.muted;
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let i = 0; i <= 4; i++) {
    const y = Math.round(top + (h * i) / 4) + 0.5;
    ctx.beginPath();
    ctx.moveTo(left, y);
    ctx.lineTo(left + w, y);
    ctx.stroke();
    ctx.fillText(formatBytes(yMax * (1 - i / 4)).replace(".0 ", " "), left - 4, y);
  }
  if (series.some((s) => s.unit === "pct")) {
    ctx.textAlign = "left";
    for (let i = 0; i <= 4; i += 2) ctx.fillText(`${100 - i * 25}%`, left + w + 4, top + (h * i) / 4);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const axisY = top + h + strip + 3;
  for (let i = 0; i <= 5; i++) {
    const secondsAgo = (windowS * (5 - i)) / 5;
    const label = secondsAgo === 0 ? "now" : secondsAgo >= 60 ? `-${(secondsAgo / 60).toFixed(secondsAgo % 60 ? 1 : 0)} min` : `-${secondsAgo} s`;
    ctx.fillText(label, left + (w * i) / 5, axisY);
  }

  // executing node: a strip on the time axis, one segment per node, with dashed start lines
  ctx.save();
  ctx.beginPath();
  ctx.rect(left, 0, w, cssH);
  ctx.clip();
  const segs = nodeSegments(points);
  const palette = ["#f97316", "#22d3ee", "#e879f9", "#a3e635"];
  segs.forEach((seg, i) => {
    const x0 = x(seg.start);
    const x1 = Math.max(x(seg.end), x0 + 3);
    ctx.fillStyle = palette[i % palette.length];
    ctx.fillRect(x0, top + h + 2, x1 - x0, strip - 4);
    ctx.strokeStyle = palette[i % palette.length];
    ctx.setLineDash([3, 3]);
    ctx.beginPath();
    ctx.moveTo(Math.round(x0) + 0.5, top);
    ctx.lineTo(Math.round(x0) + 0.5, top + h);
    ctx.stroke();
    ctx.setLineDash([]);
    const text = `#${seg.id} ${seg.label}`;
    ctx.fillStyle = colors.fg;
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    const room = (segs[i + 1] ? x(segs[i + 1].start) : left + w) - x0 - 4;
    if (room > 24) ctx.fillText(fitText(ctx, text, room), x0 + 3, top + 2);
  });

  // lines
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = s.key === "rss" ? 2 : 1.5;
    ctx.setLineDash(s.unit === "pct" ? [4, 3] : []);
    ctx.beginPath();
    let drawing = false;
    for (const p of points) {
      const v = seriesValue(p, s.key);
      if (v === null) {
        drawing = false;
        continue;
      }
      const y = s.unit === "pct" ? yPct(v) : yBytes(v);
      if (drawing) ctx.lineTo(x(p.t), y);
      else ctx.moveTo(x(p.t), y);
      drawing = true;
    }
    ctx.stroke();
  }
  ctx.setLineDash([]);
  ctx.restore();
  if (!points.length) {
    ctx.fillStyle = colors.muted;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    ctx.fillText("waiting for samples…", left + w / 2, top + h / 2);
  }
}

/** @param {CanvasRenderingContext2D} ctx @param {string} text @param {number} room */
function fitText(ctx, text, room) {
  if (ctx.measureText(text).width <= room) return text;
  let t = text;
  while (t.length > 1 && ctx.measureText(`${t}…`).width > room) t = t.slice(0, -1);
  return `${t}…`;
}

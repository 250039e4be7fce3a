// The live chart: a bounded buffer of sampler ticks and a hand-rolled canvas drawing of process
// RSS and GPU allocated/reserved (bytes, left axis scaled to them, not to system RAM, which is
// only a chip) and GPU utilisation (%, right axis) over a fixed window, with each run as a band,
// the executing node on the time axis, breaks where samples stopped (tab closed, server down),
// and a hover readout. Drawing happens only when asked (one requestAnimationFrame per new sample
// or pointer move while the panel is open), never on a timer.
import { isNumber } from "./format.mjs";

/**
 * @typedef {{device: string, allocated: number | null, reserved: number | null, util: number | null, total: number | null}} GpuPoint
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
 * Labels of the time axis: seconds before now in the live window; seconds since the run's start
 * when zoomed to a run.
 * @param {{from: number, to: number}} span @param {ZoomRange | null} zoom @param {number} [n]
 */
export function timeLabels(span, zoom, n = 5) {
  const labels = [];
  const width = span.to - span.from;
  for (let i = 0; i <= n; i++) {
    const t = span.from + (width * i) / n;
    if (zoom) {
      const since = t - zoom.runStart;
      const digits = width < 10 ? 1 : 0;
      const text = Math.abs(since).toFixed(digits);
      labels.push(`${since < 0 && Number(text) !== 0 ? "-" : ""}${text} s`); // never "-0.0 s"
    } else {
      const secondsAgo = (width * (n - i)) / n;
      labels.push(secondsAgo === 0 ? "now" : secondsAgo >= 60 ? `-${(secondsAgo / 60).toFixed(secondsAgo % 60 ? 1 : 0)} min` : `-${secondsAgo} s`);
    }
  }
  return labels;
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

/**
 * A byte axis fitted to the plotted series: round steps, 4 intervals, from below the lowest to
 * above the highest value, so a process RSS of 978 MiB that moves by 30 MiB is not a flat line.
 * @param {number} min @param {number} max
 */
export function byteAxis(min, max) {
  if (!(max > 0)) return { lo: 0, hi: 1024 ** 3, step: 256 * 1024 ** 2 };
  const span = Math.max(max - min, max * 0.05, 1024 ** 2);
  const raw = span / 4;
  const unit = 1024 ** Math.max(0, Math.floor(Math.log(raw) / Math.log(1024)));
  const step = ([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024].map((m) => m * unit).find((v) => v >= raw * 1.1)) ?? raw * 1.1;
  const lo = Math.max(0, Math.floor(min / step) * step);
  let hi = Math.ceil(max / step) * step;
  if (hi <= lo) hi = lo + step;
  if (hi - max < step * 0.1) hi += step;
  return { lo, hi, step };
}
/**
 * A byte axis label with as many decimals as its step needs, so two lines never read the same
 * ("1.00 GiB" and "1.02 GiB", not "1 GiB" twice).
 * @param {number} v @param {{hi: number, step: number}} axis
 */
export function byteAxisLabel(v, axis) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  const power = Math.min(units.length - 1, Math.max(0, Math.floor(Math.log(Math.max(axis.hi, 1)) / Math.log(1024))));
  const unit = 1024 ** power;
  // the fewest decimals that write the step exactly (0.25 GiB: 2), at most 2
  const steps = axis.step / unit;
  const digits = [0, 1, 2].find((d) => Math.abs(Math.round(steps * 10 ** d) - steps * 10 ** d) < 1e-6) ?? 2;
  return `${(v / unit).toFixed(digits)} ${units[power]}`;
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
 * @param {{fg: string, muted: string, grid: string, windowS?: number, hoverT?: number | null, zoom?: ZoomRange | null}} colors
 * `zoom`: show that run's time range instead of the live window.
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
  const zoom = colors.zoom ?? null;
  const span = zoom ? { from: zoom.from, to: zoom.to } : { from: now - windowS, to: now };
  const x = (/** @type {number} */ t) => left + (w * (t - span.from)) / Math.max(1e-3, span.to - span.from);

  const series = presentSeries(points).filter((s) => s.plot !== false);
  let maxBytes = 0;
  let minBytes = Infinity;
  let shown = 0;
  for (const p of points) {
    if (p.t < span.from || p.t > span.to) continue;
    shown += 1;
    for (const s of series) {
      const v = seriesValue(p, s.key);
      if (s.unit !== "bytes" || v === null) continue;
      if (v > maxBytes) maxBytes = v;
      if (v < minBytes) minBytes = v;
    }
  }
  const axis = byteAxis(Number.isFinite(minBytes) ? minBytes : 0, maxBytes);
  const yBytes = (/** @type {number} */ v) => top + h * (1 - (v - axis.lo) / (axis.hi - axis.lo));
  const yPct = (/** @type {number} */ v) => top + h * (1 - v / 100);

  // grid and axes
  ctx.strokeStyle = colors.grid;
  ctx.fillStyle = colors.muted;
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (let v = axis.lo; v <= axis.hi + 1; v += axis.step) {
    const y = Math.round(yBytes(v)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(left, y);
    ctx.lineTo(left + w, y);
    ctx.stroke();
    ctx.fillText(byteAxisLabel(v, axis), left - 4, y);
  }
  if (series.some((s) => s.unit === "pct")) {
    ctx.textAlign = "left";
    for (let i = 0; i <= 4; i += 2) ctx.fillText(`${100 - i * 25}%`, left + w + 4, top + (h * i) / 4);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const axisY = top + h + strip + 3;
  timeLabels(span, zoom).forEach((label, i) => ctx.fillText(label, left + (w * i) / 5, axisY));

  // runs as bands behind the lines; the executing node as a strip on the time axis
  ctx.save();
  ctx.beginPath();
  ctx.rect(left, 0, w, cssH);
  ctx.clip();
  for (const band of runBands(points)) {
    ctx.fillStyle = zoom && band.promptId !== zoom.promptId ? "rgba(148, 163, 184, 0.08)" : "rgba(96, 165, 250, 0.10)";
    const x0 = x(band.start);
    ctx.fillRect(x0, top, Math.max(2, x(band.end) - x0), h);
  }
  if (colors.hoverT !== undefined && colors.hoverT !== null) {
    ctx.strokeStyle = colors.fg;
    ctx.beginPath();
    ctx.moveTo(Math.round(x(colors.hoverT)) + 0.5, top);
    ctx.lineTo(Math.round(x(colors.hoverT)) + 0.5, top + h + strip);
    ctx.stroke();
  }
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
    // A label only where the whole of it fits: clipped names ("#6 VA…") said nothing; the hover
    // readout names every node.
    const text = `#${seg.id} ${seg.label}`;
    ctx.fillStyle = colors.fg;
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    // a segment that began before the shown range is labelled from the plot's left edge
    const lx = Math.max(x0, left);
    const room = (segs[i + 1] ? x(segs[i + 1].start) : left + w) - lx - 4;
    if (ctx.measureText(text).width <= room) ctx.fillText(text, lx + 3, top + 2);
  });

  // lines
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = s.key === "rss" ? 2 : 1.5;
    ctx.setLineDash(s.unit === "pct" ? [4, 3] : []);
    ctx.beginPath();
    let drawing = false;
    /** @type {Point | null} */
    let prev = null;
    for (const p of points) {
      const v = seriesValue(p, s.key);
      if (prev && isGap(prev, p)) drawing = false; // no line across a time without samples
      prev = p;
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
  if (!shown) {
    ctx.fillStyle = colors.muted;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    const empty = zoom ? "no samples kept for this run's time" : "waiting for samples…";
    ctx.fillText(empty, left + w / 2, top + h / 2);
  }
}

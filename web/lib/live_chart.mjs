// The live chart: a hand-rolled canvas drawing of process
// RSS and GPU allocated/reserved (bytes, left axis scaled to them, not to system RAM, which is
// only a chip) and GPU utilisation (%, right axis) over a fixed window, with each run as a band,
// the executing node on the time axis, breaks where samples stopped (tab closed, server down),
// and a hover readout. Drawing happens only when asked (one requestAnimationFrame per new sample
// or pointer move while the panel is open), never on a timer. The samples it draws (the buffer,
// bands, node segments, series) are in live_samples.mjs.
import { drawModelLane } from "./model_lane.mjs";

export { modelLane } from "./model_lane.mjs";
import { WINDOW_S, isGap, nodeSegments, presentSeries, runBands, segmentLabel, seriesValue } from "./live_samples.mjs";

// The samples' side, for the panel and the tests that read it through the chart.
export {
  CHART_WINDOW_S, GAP_S, MAX_POINTS, SERIES, SampleBuffer, WINDOW_S, ZOOM_MIN_S, bandAt, chartWindow, isGap,
  nodeSegments, normalizeSample, pointNear, presentSeries, runBands, runRange, seriesValue,
} from "./live_samples.mjs";

/**
 * @typedef {import("./live_samples.mjs").Point} Point
 * @typedef {import("./live_samples.mjs").ZoomRange} ZoomRange
 * @typedef {{fg: string, muted: string, grid: string, windowS?: number, hoverT?: number | null, zoom?: ZoomRange | null,
 *   modelLane?: import("./model_lane.mjs").LaneEvent[]}} ChartColors
 */

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


/** A "nice" upper bound for the byte axis: 1, 2 or 5 times a power of 1024-ish steps. @param {number} max */
export function niceBytesMax(max) {
  if (!(max > 0)) return 1024 ** 3;
  const step = 1024 ** Math.max(0, Math.floor(Math.log(max) / Math.log(1024)));
  for (const m of [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]) if (m * step >= max * 1.05) return m * step;
  return max * 1.1;
}


/**
 * @typedef {{ctx: CanvasRenderingContext2D, cssW: number, cssH: number, left: number, top: number, w: number,
 *   h: number, strip: number, span: {from: number, to: number}, zoom: ZoomRange | null, x: (t: number) => number}} Frame
 * the canvas sized to its box, the plot area, the time span shown and its time-to-pixel scale
 */

/**
 * Size the canvas to its box and lay out the plot: left axis, right axis, the executing-node strip
 * under the plot, the time span (the live window or the zoomed run).
 * @param {HTMLCanvasElement} canvas @param {Point[]} points @param {ChartColors} colors
 * @returns {Frame | null}
 */
function chartFrame(canvas, points, colors) {
  const dpr = globalThis.devicePixelRatio || 1;
  const cssW = canvas.clientWidth || 300;
  const cssH = canvas.clientHeight || 160;
  if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
  }
  const ctx = canvas.getContext("2d");
  if (!ctx) return null;
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
  return { ctx, cssW, cssH, left, top, w, h, strip, span, zoom, x };
}

/**
 * The byte range of the plotted series within the span, and how many points fall in it.
 * @param {Point[]} points @param {{from: number, to: number}} span @param {{key: string, unit: string}[]} series
 */
function bytesInSpan(points, span, series) {
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
  return { axis: byteAxis(Number.isFinite(minBytes) ? minBytes : 0, maxBytes), shown };
}

/**
 * Grid lines with the byte labels (left), the percent labels (right) when a percent series is
 * plotted, and the time labels under the node strip.
 * @param {Frame} f @param {{lo: number, hi: number, step: number}} axis @param {(v: number) => number} yBytes
 * @param {boolean} hasPct @param {ChartColors} colors
 */
function drawAxes(f, axis, yBytes, hasPct, colors) {
  const { ctx, left, top, w, h, strip } = f;
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
  if (hasPct) {
    ctx.textAlign = "left";
    for (let i = 0; i <= 4; i += 2) ctx.fillText(`${100 - i * 25}%`, left + w + 4, top + (h * i) / 4);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const axisY = top + h + strip + 3;
  timeLabels(f.span, f.zoom).forEach((label, i) => ctx.fillText(label, left + (w * i) / 5, axisY));
}

/**
 * Runs as bands behind the lines (other runs faded when zoomed to one), and the hover line.
 * @param {Frame} f @param {Point[]} points @param {ChartColors} colors
 */
function drawBandsAndHover(f, points, colors) {
  const { ctx, top, h, strip, x, zoom } = f;
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
}

/**
 * The executing node as a strip on the time axis, a dashed line where each node starts, and its
 * name where the whole of it fits.
 * @param {Frame} f @param {Point[]} points @param {ChartColors} colors
 */
function drawNodeStrip(f, points, colors) {
  const { ctx, left, top, w, h, strip, x } = f;
  const segs = nodeSegments(points);
  const palette = ["#f97316", "#22d3ee", "#e879f9", "#a3e635"];
  segs.forEach((seg, i) => {
    const x0 = x(seg.start);
    const x1 = Math.max(x(seg.end), x0 + 3);
    const ownRun = !f.zoom || seg.promptId === f.zoom.promptId;
    ctx.globalAlpha = ownRun ? 1 : 0.35; // another run's nodes, faded like its band
    ctx.fillStyle = palette[i % palette.length];
    ctx.fillRect(x0, top + h + 2, x1 - x0, strip - 4);
    ctx.globalAlpha = 1;
    ctx.strokeStyle = palette[i % palette.length];
    ctx.setLineDash([3, 3]);
    ctx.beginPath();
    ctx.moveTo(Math.round(x0) + 0.5, top);
    ctx.lineTo(Math.round(x0) + 0.5, top + h);
    ctx.stroke();
    ctx.setLineDash([]);
    // A label only where the whole of it fits: clipped names ("#6 VA…") said nothing; the hover
    // readout names every node.
    const text = segmentLabel(seg, f.zoom);
    ctx.fillStyle = colors.fg;
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    // a segment that began before the shown range is labelled from the plot's left edge
    const lx = Math.max(x0, left);
    const room = (segs[i + 1] ? x(segs[i + 1].start) : left + w) - lx - 4;
    if (ctx.measureText(text).width <= room) ctx.fillText(text, lx + 3, top + 2);
  });
}

/**
 * One line per series, broken where a value is unknown or where samples stopped.
 * @param {Frame} f @param {Point[]} points @param {{key: string, unit: string, color: string}[]} series
 * @param {(v: number) => number} yBytes @param {(v: number) => number} yPct
 */
function drawLines(f, points, series, yBytes, yPct) {
  const { ctx, x } = f;
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
}

/**
 * Paint the chart. `colors` come from the page's theme (CSS variables).
 * @param {HTMLCanvasElement} canvas
 * @param {Point[]} points
 * @param {ChartColors} colors
 * `zoom`: show that run's time range instead of the live window.
 */
export function drawChart(canvas, points, colors) {
  const f = chartFrame(canvas, points, colors);
  if (!f) return;
  const { ctx, left, top, w, h, cssH } = f;
  const series = presentSeries(points).filter((s) => s.plot !== false);
  const { axis, shown } = bytesInSpan(points, f.span, series);
  const yBytes = (/** @type {number} */ v) => top + h * (1 - (v - axis.lo) / (axis.hi - axis.lo));
  const yPct = (/** @type {number} */ v) => top + h * (1 - v / 100);
  drawAxes(f, axis, yBytes, series.some((s) => s.unit === "pct"), colors);
  ctx.save();
  ctx.beginPath();
  ctx.rect(left, 0, w, cssH);
  ctx.clip();
  drawBandsAndHover(f, points, colors);
  drawNodeStrip(f, points, colors);
  drawLines(f, points, series, yBytes, yPct);
  drawModelLane(f, colors.modelLane); // the opened run's model loads and unloads
  ctx.restore();
  if (!shown) {
    ctx.fillStyle = colors.muted;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    const empty = f.zoom ? "no samples kept for this run's time" : "waiting for samples…";
    ctx.fillText(empty, left + w / 2, top + h / 2);
  }
}

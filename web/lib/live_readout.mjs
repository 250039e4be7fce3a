// The panel's small pieces around the live chart and its files: the chips above the chart, the
// hover readout's text, and saving a report or table as a file.
import { h } from "./dom.mjs";
import { formatBytes, formatPercent, formatTime, safeFileName } from "./format.mjs";
import { pointNear, presentSeries, seriesValue } from "./live_samples.mjs";

export const READOUT_HINT = "Point at the chart for the values at that time; click a run's band to zoom to it.";

/**
 * The readout under the chart for the time under the pointer: time, RSS, GPU, node and run.
 * @param {import("./live_samples.mjs").Point[]} points the points shown
 * @param {number | null} hoverT @param {import("./live_samples.mjs").ZoomRange | null} zoom
 */
export function readoutText(points, hoverT, zoom) {
  const p = hoverT === null ? null : pointNear(points, hoverT, zoom ? Math.max(0.5, (zoom.to - zoom.from) / 20) : 3);
  if (!p) return hoverT === null ? READOUT_HINT : "no samples at that time";
  const parts = [formatTime(p.t), `RSS ${formatBytes(p.rss)}`];
  if (p.gpus[0]) parts.push(`GPU ${formatBytes(p.gpus[0].allocated)}`);
  parts.push(p.node ? `node #${p.node.id} ${p.node.label}` : "idle");
  if (p.promptId) parts.push(`run ${p.promptId.slice(0, 8)}`);
  return parts.join(" · ");
}

/**
 * The figures above the chart: one chip per series with its latest value, then the running node.
 * @param {import("./live_samples.mjs").Point | null} last @param {import("./live_samples.mjs").Point[]} points
 */
export function liveChips(last, points) {
  const chips = presentSeries(points).map((s) => {
    const v = last ? seriesValue(last, s.key) : null;
    let text = s.unit === "pct" ? formatPercent(v) : formatBytes(v);
    if (s.key === "ramUsed" && last?.ramTotal) text += ` / ${formatBytes(last.ramTotal)}`;
    return h("span", { class: "pm-chip", dataset: { series: s.key } },
      h("i", { class: "pm-swatch", style: `background:${s.color}` }), `${s.name} `, h("b", { text }));
  });
  const node = last?.node;
  chips.push(h("span", { class: `pm-chip ${node ? "pm-executing" : "pm-idle"}`, title: node ? `node ${node.id}` : "" },
    node ? "running " : "", h("b", { text: node ? `#${node.id} ${node.label}` : "idle" })));
  return chips;
}

/** Save a blob as a file through a temporary link. @param {Blob} blob @param {string} name */
export function saveBlob(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = h("a", { href: url, download: name });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/**
 * Fetch a run's JSON or HTML report through the app's API (same auth and base path) and save it.
 * @param {(route: string) => Promise<Response>} fetchApi @param {string} id @param {"json" | "html"} format
 */
export async function downloadRun(fetchApi, id, format) {
  const response = await fetchApi(`/pipeline_monitor/runs/${encodeURIComponent(id)}${format === "html" ? "/report.html" : ""}`);
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  saveBlob(await response.blob(), `pipeline_monitor_${safeFileName(id)}.${format}`);
}

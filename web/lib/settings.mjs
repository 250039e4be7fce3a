// The pack's entries in ComfyUI's settings dialog and how their values reach the server.
// The frontend stores each user's choices and calls onChange once when the page loads (old value
// undefined) and on every change. On load only values that differ from the default are sent, so
// a server configured through environment variables keeps that configuration until a user
// actually chooses something else.

/**
 * @typedef {{id: string, key: string, name: string, tooltip: string, category: string[], type: "number" | "boolean",
 *   defaultValue: number | boolean, attrs?: {min: number, max: number, step: number}}} SettingDef
 */

/** @type {SettingDef[]} */
export const SETTINGS = [
  {
    id: "PipelineMonitor.SampleIntervalMs",
    key: "sample_interval_ms",
    name: "Sampling interval (ms)",
    tooltip: "How often the background sampler reads memory and GPU figures (live chart, sampled peaks).",
    category: ["Pipeline Monitor", "Sampling", "Interval"],
    type: "number",
    defaultValue: 500,
    attrs: { min: 50, max: 60000, step: 50 },
  },
  {
    id: "PipelineMonitor.HistoryLength",
    key: "max_runs",
    name: "History length (runs kept in memory)",
    tooltip: "How many recent run reports the server keeps in memory for the panel.",
    category: ["Pipeline Monitor", "Reports", "History"],
    type: "number",
    defaultValue: 50,
    attrs: { min: 1, max: 1000, step: 1 },
  },
  {
    id: "PipelineMonitor.ReportRetention",
    key: "max_report_files",
    name: "Report retention (files kept on disk)",
    tooltip: "How many JSON report files are kept in the output folder; the oldest are removed first.",
    category: ["Pipeline Monitor", "Reports", "Retention"],
    type: "number",
    defaultValue: 500,
    attrs: { min: 1, max: 100000, step: 1 },
  },
  {
    id: "PipelineMonitor.ProfileEnabled",
    key: "profile_enabled",
    name: "Per-node profile",
    tooltip: "Time and peak memory of every node of every prompt (from the next prompt on).",
    category: ["Pipeline Monitor", "Profile", "Enabled"],
    type: "boolean",
    defaultValue: true,
  },
];

/**
 * A setting value as the server wants it, or null when it cannot be one.
 * @param {SettingDef} def
 * @param {unknown} value
 * @returns {number | boolean | null}
 */
export function settingValue(def, value) {
  if (def.type === "boolean") return typeof value === "boolean" ? value : null;
  const n = typeof value === "string" ? Number(value) : value;
  if (typeof n !== "number" || !Number.isFinite(n) || !def.attrs) return null;
  return Math.min(def.attrs.max, Math.max(def.attrs.min, Math.round(n)));
}

/**
 * Which values to send: everything on change, only non-defaults on page load.
 * @param {SettingDef} def
 * @param {unknown} value
 * @param {unknown} old
 */
export function shouldPush(def, value, old) {
  if (old !== undefined) return value !== old;
  return value !== undefined && value !== def.defaultValue;
}

/**
 * Returns onChange(def, value, old): collects changes for a moment and POSTs them as one object.
 * @param {(route: string, init?: RequestInit) => Promise<Response>} fetchApi
 * @param {(message: string) => void} warn
 * @param {number} delayMs
 */
export function settingsPusher(fetchApi, warn, delayMs = 300) {
  /** @type {Record<string, number | boolean>} */
  let pending = {};
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;
  const flush = async () => {
    timer = null;
    const body = pending;
    pending = {};
    try {
      const response = await fetchApi("/pipeline_monitor/settings", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      if (!response.ok) warn(`not applied: ${(await response.json()).error ?? response.status}`);
    } catch (error) {
      warn(`not applied: ${error}`);
    }
  };
  return (/** @type {SettingDef} */ def, /** @type {unknown} */ value, /** @type {unknown} */ old) => {
    if (!shouldPush(def, value, old)) return;
    const v = settingValue(def, value);
    if (v === null) return;
    pending[def.key] = v;
    if (timer === null) timer = setTimeout(() => void flush(), delayMs);
  };
}

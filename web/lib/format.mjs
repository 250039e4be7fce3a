// Formatting of report values for people. A summary key declared by its step kind (the generated
// vocabulary) is formatted by its declared unit and labelled with its declared label, as the HTML
// report and the node text do (monitors/vocabulary/formatting.py); other keys by the unit in their name:
// `_bytes` -> KiB/MiB/GiB, `_s` -> ms/s/min, `_pct` -> %, `_ratio` -> ×, `n_...` counts.
// Pure functions (no DOM).
import { VOCABULARY } from "./vocabulary.generated.mjs";

const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
export const MISSING = "–";

/** @param {unknown} value @returns {value is number} */
export function isNumber(value) {
  return typeof value === "number" && Number.isFinite(value);
}

/** @param {number | null | undefined} n */
export function formatBytes(n) {
  if (!isNumber(n)) return MISSING;
  const sign = n < 0 ? "-" : "";
  let v = Math.abs(n);
  let unit = 0;
  while (v >= 1024 && unit < BYTE_UNITS.length - 1) {
    v /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${sign}${v.toFixed(0)} B` : `${sign}${v.toFixed(1)} ${BYTE_UNITS[unit]}`;
}

/** @param {number | null | undefined} s */
export function formatSeconds(s) {
  if (!isNumber(s)) return MISSING;
  const a = Math.abs(s);
  if (a < 1) return `${(s * 1000).toFixed(a < 0.01 ? 1 : 0)} ms`;
  if (a < 120) return `${s.toFixed(2)} s`;
  return `${(s / 60).toFixed(1)} min`;
}

/** @param {number | null | undefined} p */
export function formatPercent(p) {
  return isNumber(p) ? `${p.toFixed(1)} %` : MISSING;
}

/** @param {number} n */
function formatPlainNumber(n) {
  if (Number.isInteger(n)) return n.toLocaleString("en-US");
  const a = Math.abs(n);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return n.toExponential(3);
  return String(Number(n.toPrecision(4)));
}

/**
 * The declared field of a kind's summary key, if any.
 * @param {string | undefined} kind
 * @param {string} key
 */
export function declaredField(kind, key) {
  if (!kind || !Object.hasOwn(VOCABULARY, kind)) return undefined;
  const fields = VOCABULARY[kind].fields;
  return Object.hasOwn(fields, key) ? fields[key] : undefined;
}

/**
 * The unit a key's name implies, for keys no kind declares.
 * @param {string} key
 * @returns {string | null}
 */
export function unitOfName(key) {
  if (key.endsWith("_per_s")) return "per_s"; // a rate, not a time
  if (key.endsWith("_bytes")) return "bytes";
  if (key.endsWith("_s")) return "s";
  if (key.endsWith("_pct")) return "pct";
  if (key.endsWith("_ratio")) return "ratio";
  return null;
}

/**
 * A summary value as text, chosen by the key's declared unit (when `kind` declares it) or the unit
 * in its name.
 * @param {string} key
 * @param {unknown} value
 * @param {string} [kind] the step kind whose summary holds the key
 * @returns {string}
 */
export function formatValue(key, value, kind) {
  if (value === null || value === undefined) return MISSING;
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "number") {
    if (!Number.isFinite(value)) return MISSING;
    const field = declaredField(kind, key);
    const unit = field ? field.unit : unitOfName(key);
    // "frames per second" already names what the rate counts; an undeclared key's "/s" does not
    // the same four significant digits as every plain number (and the node's text, made in Python)
    if (unit === "per_s") return /per second/.test(field?.label ?? "") ? formatPlainNumber(value) : `${formatPlainNumber(value)}/s`;
    if (unit === "bytes") return formatBytes(value);
    if (unit === "s") return formatSeconds(value);
    if (unit === "pct") return formatPercent(value);
    if (unit === "fraction") return `${(100 * value).toFixed(2)} %`;
    if (unit === "ratio") return `${formatPlainNumber(value)}×`;
    return formatPlainNumber(value);
  }
  if (typeof value === "string") return value;
  if (Array.isArray(value) && value.length <= 8 && value.every((v) => typeof v !== "object" || v === null)) {
    return `[${value.map((v) => (v === null ? "null" : typeof v === "number" && !Number.isInteger(v) ? formatPlainNumber(v) : String(v))).join(", ")}]`;
  }
  const text = JSON.stringify(value);
  return text.length <= 160 ? text : `${text.slice(0, 159)}…`;
}

/**
 * The declared label of a kind's key; else from the name: "peak_rss_bytes" -> "peak rss",
 * "n_tensors" -> "tensors (count)".
 * @param {string} key
 * @param {string} [kind] the step kind whose summary holds the key
 */
export function labelFromKey(key, kind) {
  const field = declaredField(kind, key);
  if (field) return field.label;
  let k = key;
  // "latent_bytes" -> "latent size"; names that already say what they measure stay as they are
  if (key.endsWith("_bytes") && !/size|peak|rss|memory|free|used|change|increase|needed|reclaimed|total/.test(key)) {
    k = `${key.slice(0, -"_bytes".length)}_size_bytes`;
  }
  for (const suffix of ["_bytes", "_pct", "_ratio", "_s"]) {
    if (suffix === "_s" && k.endsWith("_per_s")) break;
    if (k.endsWith(suffix) && k.length > suffix.length) {
      k = k.slice(0, -suffix.length);
      break;
    }
  }
  if (k.startsWith("n_") && k.length > 2) return `${k.slice(2).replaceAll("_", " ")} (count)`;
  return k.replaceAll("_", " ");
}

/**
 * A signed difference with its unit: "+1.2 s", "-300 MiB"; "±0" for none.
 * @param {string} key chooses the unit like formatValue
 * @param {number | null | undefined} delta
 * @param {string} [kind] the step kind whose summary holds the key
 */
export function formatDelta(key, delta, kind) {
  if (!isNumber(delta)) return MISSING;
  if (delta === 0) return "±0";
  const text = formatValue(key, Math.abs(delta), kind);
  return `${delta > 0 ? "+" : "-"}${text}`;
}

/**
 * Relative change in percent, or null when the base is 0 or unknown.
 * @param {number | null | undefined} before
 * @param {number | null | undefined} after
 */
export function relativeChange(before, after) {
  if (!isNumber(before) || !isNumber(after) || before === 0) return null;
  return (100 * (after - before)) / Math.abs(before);
}

/**
 * Local date and time of a unix time in seconds; `now` decides whether the date is needed.
 * @param {number | null | undefined} unixS
 * @param {number} [nowMs]
 */
export function formatTime(unixS, nowMs = Date.now()) {
  if (!isNumber(unixS)) return MISSING;
  const d = new Date(unixS * 1000);
  const pad = (/** @type {number} */ n) => String(n).padStart(2, "0");
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  const today = new Date(nowMs);
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

/**
 * Shorten text for a table cell; the full text goes in a tooltip.
 * @param {unknown} text
 * @param {number} max
 */
export function clip(text, max) {
  const s = text === null || text === undefined ? "" : String(text);
  return s.length <= max ? s : `${s.slice(0, Math.max(0, max - 1))}…`;
}

/**
 * A file name made only of safe characters (downloads are named after prompt ids, which the
 * server validates, but a name is never trusted).
 * @param {unknown} text
 */
export function safeFileName(text) {
  const name = String(text ?? "").replace(/[^A-Za-z0-9_.-]+/g, "_").replace(/^\.+/, "");
  return name.slice(0, 120) || "report";
}

// The VAE encode step's card: its attempts (strategy, outcome, time, peak) and its compression as
// people say it; the predictions made before running under "details".
import { MISSING, formatBytes, formatSeconds, formatValue, isNumber } from "./format.mjs";
import { arr, detailColumn, detailLabel, figure, known, num, obj, yesNo } from "./card_parts.mjs";

/** A column of a VAE encode detail, labelled by its declaration. @param {string} path @param {boolean} [isNum] */
const column = (path, isNum = false) => detailColumn("vae_encode", path, isNum ? { num: true } : {});
import { KEYS } from "./vocabulary.generated.mjs";

/**
 * @typedef {import("./card_parts.mjs").Block} Block
 * @typedef {import("./card_parts.mjs").Design} Design
 * @typedef {import("./card_parts.mjs").Figure} Figure
 * @typedef {import("./card_parts.mjs").StepReport} StepReport
 */

/** The highest peak of an attempt (GPU allocated when present, else RSS). @param {any} attempt */
function attemptPeak(attempt) {
  const peaks = obj(attempt.peaks);
  let best = null;
  for (const [name, p] of Object.entries(peaks)) {
    const v = obj(p).value;
    if (!isNumber(v)) continue;
    const gpu = name !== "rss";
    if (!best || (gpu && !best.gpu) || (gpu === best.gpu && v > best.v)) best = { v, gpu, name };
  }
  return best ? `${formatBytes(best.v)}${best.gpu ? " GPU" : " RSS"}` : MISSING;
}

/** @param {StepReport} step @returns {Design} */
export function vaeBlocks(step) {
  const d = obj(step.details);
  const s = step.summary ?? {};
  const attempts = arr(d.attempts);
  /** @type {Block[]} */
  const sections = [];
  if (attempts.length) {
    sections.push({
      type: "table",
      title: detailLabel("vae_encode", "attempts"),
      cls: "pm-attempts",
      columns: [column("attempts.strategy"), column("attempts.outcome"), column("attempts.duration_s", true), column("attempts.peaks", true)],
      rows: attempts.map((a) => ({
        cells: [String(a.strategy ?? "?"), String(a.outcome ?? "?") + (a.error_type ? `: ${a.error_type}` : a.reason ? `: ${a.reason}` : ""), formatSeconds(a.duration_s), attemptPeak(a)],
        tone: a.outcome === "ok" ? "ok" : a.outcome === "skipped" ? "info" : "warn",
        title: a.error_message ?? a.reason ?? undefined,
      })),
    });
  }
  const items = compressionFigures(s);
  if (items.length) sections.push({ type: "figures", title: "Compression", items });
  /** @type {Block[]} */
  const more = [];
  const predictions = Object.values(obj(d.predictions));
  if (predictions.length) {
    more.push({
      type: "table",
      title: `${detailLabel("vae_encode", "predictions")} (before running)`,
      columns: [column("predictions.strategy"), column("predictions.needed_bytes", true), column("predictions.free_bytes", true), column("predictions.fits")],
      rows: predictions.map((p) => ({ cells: [String(p.strategy ?? "?"), formatBytes(p.needed_bytes), formatBytes(p.free_bytes), yesNo(p.fits)], title: p.free_bytes_unknown_reason ?? undefined })),
    });
  }
  return { sections, more };
}

/**
 * The VAE's compression as people say it: per side of the image (8x), the area ratio (64x) in the
 * tooltip; frames in -> out with the temporal ratio in the tooltip; the input's size.
 * @param {Record<string, unknown>} s a vae_encode summary
 * @returns {Figure[]}
 */
export function compressionFigures(s) {
  const V = KEYS.vae_encode;
  /** @type {Figure[]} */
  const items = [];
  const area = s[V.spatial_compression_ratio];
  if (isNumber(area) && area > 0) {
    const side = Math.sqrt(area);
    const sideText = Number.isInteger(Math.round(side * 100) / 100) ? String(Math.round(side)) : side.toFixed(1);
    items.push({ label: "per side", value: `${sideText}x`, title: `spatial compression per side of the image; area ratio ${formatValue(V.spatial_compression_ratio, area, "vae_encode")}` });
  }
  const inFrames = s[V.input_frames];
  const outFrames = s[V.latent_frames];
  if (isNumber(inFrames) && isNumber(outFrames)) {
    const temporal = s[V.temporal_compression_ratio];
    items.push({ label: "frames in → out", value: `${num(inFrames)} → ${num(outFrames)}`,
      title: isNumber(temporal) ? `temporal compression ${formatValue(V.temporal_compression_ratio, temporal, "vae_encode")}` : "input frames and latent frames" });
  }
  if (known(s[V.input_bytes])) items.push(figure("vae_encode", s, V.input_bytes));
  return items;
}

// Step cards designed per kind: what a person reads at a glance. Each kind turns its summary and
// details into a few blocks (figures, tables, bars, text); a card shows the headline figures (the
// vocabulary's headline, known values only), its designed blocks, and one "details" with the
// remaining figures and tables in plain labels and units. The raw JSON is only a download.
// Pure functions (no DOM): Node's test runner covers them; run_views.mjs renders the blocks.
// Detail fields are read by property access (they are not summary keys); summary figures go
// through the generated KEYS.
import { MISSING, clip, formatBytes, formatSeconds, formatValue, isNumber, labelFromKey } from "./format.mjs";
import { deepProfileBlocks } from "./deep_profile_card.mjs";
import { stepCard } from "./report_view.mjs";
import { KEYS, MEMORY_NOT_READ_REASON, MEMORY_ROWS, VOCABULARY } from "./vocabulary.generated.mjs";

/**
 * @typedef {{label: string, value: string, title?: string, tone?: string}} Figure
 * @typedef {{type: "figures", title?: string, items: Figure[]}} FiguresBlock
 * @typedef {{type: "table", title?: string, columns: {label: string, num?: boolean, title?: string}[],
 *   rows: {cells: string[], tone?: string, title?: string}[], note?: string, cls?: string}} TableBlock
 * @typedef {{type: "bars", title: string, items: {label: string, fraction: number, text: string}[], note?: string}} BarsBlock
 * @typedef {{type: "text", title: string, text: string, note?: string}} TextBlock
 * @typedef {{type: "sides", title?: string, sides: {title: string, text: string | null, note?: string}[]}} SidesBlock
 * @typedef {{type: "groups", title: string, groups: {label: string, items: string[]}[], note?: string}} GroupsBlock
 * @typedef {{text: string, title?: string, sub?: string}} MemoryCell
 * @typedef {{label: string, title: string, cells: MemoryCell[], bar: {from: number, to: number} | null}} MemoryRowView
 * @typedef {{type: "memory", title: string, rows: MemoryRowView[], unknown: string | null, scope: string | null, note?: string}} MemoryBlock
 * @typedef {FiguresBlock | TableBlock | BarsBlock | TextBlock | SidesBlock | GroupsBlock | MemoryBlock} Block
 * @typedef {import("./report_view.mjs").StepReport} StepReport
 */

/** @param {unknown} v @returns {any} */
const obj = (v) => (v && typeof v === "object" && !Array.isArray(v) ? v : {});
/** @param {unknown} v @returns {any[]} */
const arr = (v) => (Array.isArray(v) ? v : []);
/** @param {unknown} v */
const shape = (v) => (Array.isArray(v) ? v.join("×") : MISSING);
/** @param {unknown} v */
const yesNo = (v) => (v === true ? "yes" : v === false ? "no" : MISSING);
/** @param {unknown} v */
const num = (v) => (isNumber(v) ? formatValue("", v) : MISSING);
/** @param {unknown} v fraction 0..1 -> "66.1 %" */
const pct = (v) => (isNumber(v) ? `${(100 * v).toFixed(v < 0.001 ? 3 : 1)} %` : MISSING);
/** @param {unknown} v a statistic: 4 significant digits */
const stat = (v) => (isNumber(v) ? (Math.abs(v) !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5) ? v.toExponential(2) : String(Number(v.toPrecision(4)))) : MISSING);

/**
 * A summary figure through the vocabulary: label and value with its unit.
 * @param {string} kind @param {Record<string, unknown>} summary @param {string} key
 * @returns {Figure}
 */
function figure(kind, summary, key) {
  const field = VOCABULARY[kind]?.fields?.[key];
  return { label: labelFromKey(key, kind), value: formatValue(key, summary[key], kind), title: field?.description ?? key };
}

/** A tensor_compare figure as its headline shows it. @param {string | undefined} key @param {unknown} v */
const figureText = (key, v) => (key && isNumber(v) ? formatValue(key, v, "tensor_compare") : stat(v));

/** @param {unknown} v */
const known = (v) => v !== null && v !== undefined && !(typeof v === "number" && !Number.isFinite(v));

// -- LoRA ----------------------------------------------------------------------------------------

const BLOCK_PATTERN = /((?:double_|single_|input_|output_|middle_|transformer_)?(?:blocks?|layers?))[._](\d+)/;

/**
 * File keys grouped by the model block they name ("blocks 9"), each module once with its parts:
 * "lora_unet_blocks_9_self_attn_q.lora_down.weight" -> block "blocks 9", "self_attn_q (lora_down.weight, ...)".
 * @param {string[]} keys
 */
export function groupKeysByBlock(keys) {
  /** @type {Map<string, Map<string, string[]>>} */
  const blocks = new Map();
  for (const key of keys) {
    const dot = key.indexOf(".");
    const module = dot < 0 ? key : key.slice(0, dot);
    const part = dot < 0 ? "" : key.slice(dot + 1);
    const match = BLOCK_PATTERN.exec(module);
    const block = match ? `${match[1]} ${match[2]}` : "other";
    const rest = match ? module.slice(match.index + match[0].length).replace(/^[._]/, "") || module : module;
    if (!blocks.has(block)) blocks.set(block, new Map());
    const modules = /** @type {Map<string, string[]>} */ (blocks.get(block));
    if (!modules.has(rest)) modules.set(rest, []);
    if (part) /** @type {string[]} */ (modules.get(rest)).push(part);
  }
  return [...blocks.entries()]
    .sort((a, b) => a[0].localeCompare(b[0], undefined, { numeric: true }))
    .map(([label, modules]) => ({
      label,
      items: [...modules.entries()].map(([m, parts]) => (parts.length ? `${m} (${parts.join(", ")})` : m)),
    }));
}

/**
 * Per-block change as bars, largest first, scaled to the largest.
 * @param {Record<string, any>} byBlock
 * @param {number} max rows
 */
export function blockBars(byBlock, max = 12) {
  const rows = Object.entries(obj(byBlock))
    .map(([block, v]) => ({ block, rel: isNumber(v?.relative_change) ? v.relative_change : null, norm: isNumber(v?.delta_norm) ? v.delta_norm : null }))
    .filter((r) => r.rel !== null || r.norm !== null);
  const useRel = rows.some((r) => r.rel !== null);
  const value = (/** @type {{rel: number | null, norm: number | null}} */ r) => (useRel ? r.rel : r.norm) ?? 0;
  rows.sort((a, b) => value(b) - value(a));
  const top = Math.max(...rows.map(value), 0);
  return {
    items: rows.slice(0, max).map((r) => ({
      label: r.block.replace(/^diffusion_model\./, "").replace(/^transformer\./, ""),
      fraction: top > 0 ? value(r) / top : 0,
      text: useRel ? pct(r.rel) : stat(r.norm),
    })),
    hidden: Math.max(0, rows.length - max),
    measure: useRel ? "change of |W|" : "change norm",
  };
}

/** @param {StepReport} step @returns {{sections: Block[], more: Block[]}} */
function loraBlocks(step) {
  const d = obj(step.details);
  /** @type {Block[]} */
  const sections = [];
  /** @type {Block[]} */
  const more = [];
  for (const loader of arr(d.loaders)) {
    const file = obj(loader.file);
    const cov = obj(loader.coverage);
    const hopOf = (/** @type {string} */ side) => {
      const index = loader[`${side}_hop_index`];
      return isNumber(index) ? obj(arr(obj(d[side]).hops)[index]) : null;
    };
    const hop = hopOf("model") ?? hopOf("clip");
    const totals = obj(hop?.totals);
    const list = (/** @type {unknown} */ v) => (arr(v).length ? [...new Set(arr(v))].map((x) => stat(x)).join(", ") : MISSING);
    const applied = hop ? (totals.n_not_applied ? `partly (${totals.n_not_applied} not applied)` : "yes") : loader.skipped ? "skipped" : "no";
    const name = loader.lora_name ?? file.name ?? "(no file)";
    const lone = arr(d.loaders).length === 1; // the card's headline already has its totals
    const rows = [
      lone ? null : { cells: ["Applied", applied], tone: applied === "yes" ? "ok" : applied === "skipped" ? "info" : "warn" },
      { cells: ["Strength model / clip", `${stat(loader.strength_model)} / ${loader.has_clip_input ? stat(loader.strength_clip) : "–"}`] },
      { cells: ["Rank", list(totals.ranks)] },
      { cells: ["Alpha", list(totals.alphas)] },
    ];
    if (cov.computed && !lone) {
      rows.push({ cells: ["Matched keys", `${num(cov.n_matched_keys)} of ${num(cov.n_file_keys)}${isNumber(cov.matched_pct) ? ` (${cov.matched_pct.toFixed(0)} %)` : ""}`] });
      rows.push({ cells: ["Unmatched keys", num(cov.n_unmatched_keys)], tone: cov.n_unmatched_keys ? "warn" : undefined });
    } else if (file.exists === false) {
      rows.push({ cells: ["File", "not found"], tone: "error" });
    }
    if (isNumber(totals.relative_change) && !lone) rows.push({ cells: ["Change of |W|", pct(totals.relative_change)] });
    if (isNumber(totals.n_keys) && !lone) rows.push({ cells: ["Patched weights", num(totals.n_keys)] });
    sections.push({ type: "table", cls: "pm-kv pm-lora-table", title: `${clip(name, 60)} · node #${loader.node_id ?? "?"}`, columns: [{ label: "" }, { label: "" }],
      rows: /** @type {any[]} */ (rows.filter(Boolean)) });
    const unmatched = arr(cov.unmatched_keys).map(String);
    if (unmatched.length) {
      sections.push({
        type: "groups",
        title: `Unmatched keys (${num(cov.n_unmatched_keys)}) by block`,
        groups: groupKeysByBlock(unmatched),
        note: cov.unmatched_truncated ? `first ${unmatched.length} shown` : undefined,
      });
    }
    const bars = blockBars(obj(hop?.by_block));
    if (bars.items.length) {
      sections.push({ type: "bars", title: `Change per block (${bars.measure})`, items: bars.items, note: bars.hidden ? `${bars.hidden} smaller blocks not shown` : undefined });
    }
    const net = obj(file.network);
    const fileRows = [
      ["File size", formatBytes(file.size_bytes)],
      ["Tensors", num(file.n_tensors)],
      ["Format", file.format ?? MISSING],
      ["Trained for", net.base_model_name ?? net.base_model ?? MISSING],
      ["Network", net.module ?? MISSING],
      ["Loader time", formatSeconds(obj(loader.profile).duration_s)],
    ].filter((r) => r[1] !== MISSING);
    if (fileRows.length) more.push({ type: "table", cls: "pm-kv", title: `File ${clip(name, 40)}`, columns: [{ label: "" }, { label: "" }], rows: fileRows.map((cells) => ({ cells })) });
  }
  for (const side of ["model", "clip"]) {
    const s = obj(d[side]);
    const weights = arr(obj(s.overall).weights);
    if (!weights.length) continue;
    more.push({
      type: "table",
      title: `Patched ${side} weights`,
      columns: [{ label: "Weight" }, { label: "Change", num: true }, { label: "Applied" }],
      rows: weights.slice(0, 40).map((w) => ({ cells: [String(w.key ?? "").replace(/^diffusion_model\./, ""), isNumber(w.relative_change) ? pct(w.relative_change) : stat(w.delta_norm), yesNo(w.applied)] })),
      note: weights.length > 40 ? `first 40 of ${weights.length}` : undefined,
    });
  }
  return { sections, more };
}

// -- conditioning --------------------------------------------------------------------------------

/** The prompt text(s) of one side, found through the graph. @param {any} side */
function sideText(side) {
  const texts = arr(obj(side).encoders).flatMap((e) => arr(e.texts)).filter((t) => typeof t.text === "string");
  if (!texts.length) return { text: null, note: obj(side).connected === false ? "not connected" : "no prompt text found" };
  const truncated = texts.some((t) => t.text_truncated);
  return { text: texts.map((t) => t.text).join("\n"), note: truncated ? "first 2,000 characters" : undefined };
}

/** @param {StepReport} step @returns {{sections: Block[], more: Block[]}} */
function conditioningBlocks(step) {
  const d = obj(step.details);
  const s = step.summary ?? {};
  const C = KEYS.conditioning;
  const pos = sideText(d.positive);
  const neg = sideText(d.negative);
  /** @type {Block[]} */
  const sections = [{ type: "sides", sides: [{ title: "Positive", ...pos }, { title: "Negative", ...neg }] }];
  const row = (/** @type {string} */ label, /** @type {string} */ a, /** @type {string} */ b) => ({ cells: [label, formatValue(a, s[a], "conditioning"), formatValue(b, s[b], "conditioning")] });
  sections.push({
    type: "table",
    cls: "pm-sides-table",
    columns: [{ label: "" }, { label: "Positive", num: true }, { label: "Negative", num: true }],
    rows: [
      row("Family", C.positive_family, C.negative_family),
      row("Tokens", C.positive_n_tokens, C.negative_n_tokens),
      row("Hidden size", C.positive_hidden_size, C.negative_hidden_size),
      row("Pooled size", C.positive_pooled_size, C.negative_pooled_size),
      row("Words", C.positive_n_words, C.negative_n_words),
      row("Encode time", C.positive_encode_s, C.negative_encode_s),
      row("NaN values", C.positive_n_nan, C.negative_n_nan),
    ].filter((r) => r.cells[1] !== MISSING || r.cells[2] !== MISSING),
  });
  /** @type {Block[]} */
  const more = [];
  for (const name of ["positive", "negative"]) {
    const entries = arr(obj(d[name]).entries);
    if (!entries.length) continue;
    more.push({
      type: "table",
      title: `${name} entries: statistics`,
      columns: [{ label: "#" }, { label: "Shape" }, { label: "Min", num: true }, { label: "Max", num: true }, { label: "Mean", num: true }, { label: "Std", num: true }, { label: "NaN/Inf", num: true }],
      rows: entries.map((e) => ({ cells: [String(e.index ?? ""), shape(e.shape), stat(e.min), stat(e.max), stat(e.mean), stat(e.std), `${num(e.n_nan)}/${num(e.n_inf)}`], tone: e.n_nan || e.n_inf ? "error" : undefined })),
    });
  }
  return { sections, more };
}

// -- VAE encode ----------------------------------------------------------------------------------

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

/** @param {StepReport} step @returns {{sections: Block[], more: Block[]}} */
function vaeBlocks(step) {
  const d = obj(step.details);
  const s = step.summary ?? {};
  const attempts = arr(d.attempts);
  /** @type {Block[]} */
  const sections = [];
  if (attempts.length) {
    sections.push({
      type: "table",
      title: "Attempts",
      cls: "pm-attempts",
      columns: [{ label: "Strategy" }, { label: "Outcome" }, { label: "Time", num: true }, { label: "Peak", num: true }],
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
      title: "Predictions (before running)",
      columns: [{ label: "Strategy" }, { label: "Needs", num: true }, { label: "Free", num: true }, { label: "Fits" }],
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

// -- models --------------------------------------------------------------------------------------

/** @param {StepReport} step @returns {{sections: Block[], more: Block[]}} */
function modelsBlocks(step) {
  const d = obj(step.details);
  const objects = Object.entries(obj(d.objects));
  const loaders = obj(d.loaders);
  if (!objects.length) return { sections: [], more: [] };
  return {
    sections: [{
      type: "table",
      title: "Objects",
      cls: "pm-models",
      // Four columns, two lines each (input over its class, device over dtype), so the table fits
      // the default sidebar width (312 px) instead of scrolling inside its card; the rest is in
      // the row's title and under "Details".
      columns: [{ label: "Object", title: "the monitor's input and the model's class" }, { label: "Device", title: "device and dtype" }, { label: "Size", num: true }, { label: "Load", num: true, title: "the loader node's time (from the profile)" }],
      rows: objects.map(([role, o]) => ({
        cells: [`${role}\n${String(o.module_class ?? o.class ?? MISSING)}`, `${String(o.device ?? MISSING)}\n${String(o.dtype ?? MISSING)}`, formatBytes(o.size_bytes), formatSeconds(obj(loaders[role]).duration_s)],
        title: `patcher ${o.patcher_class ?? "?"}, load ${o.load_device ?? "?"}, offload ${o.offload_device ?? "?"}, resident ${formatBytes(o.resident_bytes)}${o.memory_manager ? ` (${o.memory_manager} memory manager)` : ""}, ${o.n_patches ?? 0} patches${o.patch_application ? ` (${String(o.patch_application).replaceAll("_", " ")})` : ""}`,
      })),
    }],
    more: [{
      type: "table",
      title: "Placement and patches",
      // Resident bytes over the memory manager that counted them (dynamic VRAM or estimate-based), the
      // patch count over how ComfyUI applies them (written in place, or on the fly under dynamic VRAM).
      columns: [{ label: "Input" }, { label: "Load → offload" }, { label: "Resident", num: true, title: "resident bytes, and the memory manager that counted them" }, { label: "Patches", num: true, title: "patch count, and how ComfyUI applies them" }],
      rows: objects.map(([role, o]) => ({ cells: [role, `${o.load_device ?? "?"} → ${o.offload_device ?? "?"}`, [formatBytes(o.resident_bytes), o.memory_manager].filter(Boolean).join("\n"), [num(o.n_patches), o.patch_application ? String(o.patch_application).replaceAll("_", " ") : ""].filter(Boolean).join("\n")] })),
    }],
  };
}

// -- latent, dumps, compare ----------------------------------------------------------------------

/** @param {Record<string, any>} tensors */
function tensorStatsTable(tensors, title = "Tensors") {
  const rows = Object.entries(obj(tensors));
  return {
    type: /** @type {const} */ ("table"),
    title,
    columns: [{ label: "Tensor" }, { label: "Shape" }, { label: "Dtype" }, { label: "Size", num: true }, { label: "Mean", num: true }, { label: "Std", num: true }],
    rows: rows.map(([name, t]) => ({ cells: [name, shape(t.shape), String(t.dtype ?? MISSING), formatBytes(t.bytes), stat(t.mean), stat(t.std)], tone: t.n_nan || t.n_inf ? "error" : undefined })),
  };
}

/** @param {StepReport} step @returns {{sections: Block[], more: Block[]}} */
function latentBlocks(step) {
  const samples = obj(obj(step.details).samples);
  const decoded = obj(samples.decoded_size);
  /** @type {Figure[]} */
  const items = [];
  if (isNumber(decoded.width)) items.push({ label: "Decodes to", value: `${decoded.width}×${decoded.height}${isNumber(decoded.frames) && decoded.frames > 1 ? ` × ${decoded.frames} frames` : ""}` });
  if (arr(samples.family_alternatives).length) items.push({ label: "Or", value: arr(samples.family_alternatives).join(", ") });
  return {
    sections: items.length ? [{ type: "figures", items }] : [],
    more: isNumber(samples.min) ? [{ type: "table", cls: "pm-kv", title: "Statistics", columns: [{ label: "" }, { label: "" }],
      rows: [["Min", stat(samples.min)], ["Max", stat(samples.max)], ["Mean", stat(samples.mean)], ["Std", stat(samples.std)]].map((cells) => ({ cells })) }] : [],
  };
}

/** @param {StepReport} step @returns {{sections: Block[], more: Block[]}} */
function dumpBlocks(step) {
  const d = obj(step.details);
  return { sections: Object.keys(obj(d.tensors)).length ? [tensorStatsTable(d.tensors)] : [], more: [] };
}

/** @param {StepReport} step @returns {{sections: Block[], more: Block[]}} */
function compareBlocks(step) {
  const d = obj(step.details);
  const s = step.summary ?? {};
  const T = KEYS.tensor_compare;
  /** @type {Block[]} */
  const sections = [];
  if (typeof s[T.verdict] === "string") sections.push({ type: "text", title: "Verdict", text: String(s[T.verdict]) });
  const rows = Object.entries(obj(d.tensors));
  if (rows.length) {
    sections.push({
      type: "table",
      title: "Per tensor",
      cls: "pm-compare-tensors",
      columns: [{ label: "Tensor" }, { label: "Max |Δ|", num: true }, { label: "Rel. error", num: true }, { label: "Cosine", num: true }, { label: "Close" }],
      rows: rows.map(([name, r]) => ({
        // the headline's formatting for the same figures: one precision per figure on the card
        cells: [name, figureText(T.max_abs_diff, r.max_abs_diff), figureText(T.max_relative_error_ratio, r.relative_error), figureText(T.min_cosine_similarity, r.cosine_similarity),
          r.equal ? "identical" : r.allclose ? "yes" : r.shape_match === false ? "shapes differ" : "no"],
        tone: r.allclose ? "ok" : "warn",
        title: r.reason ?? `${shape(r.shape_a)} ${r.dtype_a ?? ""} vs ${shape(r.shape_b)} ${r.dtype_b ?? ""}`,
      })),
    });
  }
  const only = [...arr(d.only_in_a).map((n) => `${n} (only in a)`), ...arr(d.only_in_b).map((n) => `${n} (only in b)`)];
  /** @type {Block[]} */
  const more = only.length ? [{ type: "groups", title: "Not compared", groups: [{ label: "", items: only }] }] : [];
  return { sections, more };
}

// -- memory (every step with `details.memory`) ---------------------------------------------------

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

/** @type {Record<string, (step: StepReport) => {sections: Block[], more: Block[]}>} */
const DESIGNS = {
  lora: loraBlocks,
  conditioning: conditioningBlocks,
  vae_encode: vaeBlocks,
  models: modelsBlocks,
  latent: latentBlocks,
  tensor_dump: dumpBlocks,
  tensor_compare: compareBlocks,
  deep_profile: deepProfileBlocks,
};

/** Summary keys a kind's designed blocks already show, so the headline and details skip them. */
const SHOWN_IN_BLOCKS = /** @type {Record<string, string[]>} */ ({
  // each object's class and size are in the Objects table
  models: [KEYS.models.model_class, KEYS.models.model_size_bytes, KEYS.models.clip_class, KEYS.models.clip_size_bytes, KEYS.models.vae_class, KEYS.models.vae_size_bytes],
  conditioning: Object.entries(KEYS.conditioning).filter(([k]) => /^(positive|negative)_/.test(k)).map(([, v]) => v),
  tensor_compare: [KEYS.tensor_compare.verdict],
  vae_encode: [KEYS.vae_encode.spatial_compression_ratio, KEYS.vae_encode.temporal_compression_ratio, KEYS.vae_encode.input_frames, KEYS.vae_encode.latent_frames, KEYS.vae_encode.input_bytes],
});

/**
 * Everything a designed card shows: the base card (title, badges, findings), the headline figures
 * (declared headline order, known values), the kind's blocks, and the details blocks.
 * @param {StepReport} step
 * @param {{nodeClass?: (id: string) => string | null | undefined}} [context] nodeClass: a node id's class, for the memory scope line
 */
export function designedCard(step, context = {}) {
  const base = stepCard(step);
  const summary = base.summary;
  const skip = new Set(SHOWN_IN_BLOCKS[step.kind] ?? []);
  const all = [...base.keyFigures, ...base.moreFigures];
  const declaredHeadline = VOCABULARY[step.kind]?.headline;
  const isHeadline = declaredHeadline ? (/** @type {string} */ k) => declaredHeadline.includes(k) : (/** @type {string} */ k) => base.keyFigures.includes(k);
  const headlineKeys = all.filter((k) => isHeadline(k) && !skip.has(k) && known(summary[k]));
  const restKeys = all.filter((k) => !headlineKeys.includes(k) && !skip.has(k) && known(summary[k]));
  let designed = { sections: /** @type {Block[]} */ ([]), more: /** @type {Block[]} */ ([]) };
  const monitorErrors = [...base.monitorErrors];
  try {
    designed = (DESIGNS[step.kind] ?? (() => designed))(step);
  } catch (err) {
    // Details of an unexpected shape still give a card with its figures, and the card says why.
    monitorErrors.push(`card layout not shown: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
  }
  let memory = null;
  try {
    memory = memoryBlock(step, context.nodeClass);
  } catch (err) {
    monitorErrors.push(`memory section not shown: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
  }
  const verdict = step.kind === "tensor_compare" ? summary[KEYS.tensor_compare.verdict] : undefined;
  /** @type {Block[]} */
  const more = [];
  if (restKeys.length) more.push({ type: "figures", title: "Other figures", items: restKeys.map((k) => figure(step.kind, summary, k)) });
  more.push(...designed.more);
  // A finding pointing to the key names the card lists right below says so no more.
  const listsKeys = designed.sections.some((b) => b.type === "groups");
  const findings = base.findings
    .filter((f) => verdict === undefined || f.message !== verdict) // the verdict is the card's headline text
    .map((f) => (listsKeys ? { ...f, message: f.message.replace(/ \(their names are in the report, by block\)/, " (listed below, by block)") } : f));
  return {
    ...base,
    monitorErrors,
    findings,
    headline: headlineKeys.map((k) => figure(step.kind, summary, k)),
    sections: [...designed.sections, ...(memory ? [memory] : [])],
    more,
  };
}

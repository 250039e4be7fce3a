// The LoRA step's card: one table per loader (strength, rank, alpha, matched keys), unmatched keys
// grouped by model block, the change per block as bars; file facts and patched weights under "details".
import { MISSING, clip, formatBytes, formatSeconds, isNumber } from "./format.mjs";
import { arr, detailColumn, detailLabel, num, obj, pct, stat, yesNo } from "./card_parts.mjs";

/** A LoRA detail's declared label. @param {string} path */
const label = (path) => detailLabel("lora", path);

/**
 * @typedef {import("./card_parts.mjs").Block} Block
 * @typedef {import("./card_parts.mjs").Design} Design
 * @typedef {import("./card_parts.mjs").StepReport} StepReport
 */

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
    measure: useRel ? "weight change" : "change norm",
  };
}


/** @param {StepReport} step @returns {Design} */
export function loraBlocks(step) {
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
      { cells: [label("model.hops.totals.ranks"), list(totals.ranks)] },
      { cells: [label("model.hops.totals.alphas"), list(totals.alphas)] },
    ];
    if (cov.computed && !lone) {
      rows.push({ cells: [label("loaders.coverage.n_matched_keys"), `${num(cov.n_matched_keys)} of ${num(cov.n_file_keys)}${isNumber(cov.matched_pct) ? ` (${cov.matched_pct.toFixed(0)} %)` : ""}`] });
      rows.push({ cells: [label("loaders.coverage.n_unmatched_keys"), num(cov.n_unmatched_keys)], tone: cov.n_unmatched_keys ? "warn" : undefined });
    } else if (file.exists === false) {
      rows.push({ cells: ["File", "not found"], tone: "error" });
    }
    if (isNumber(totals.relative_change) && !lone) rows.push({ cells: [label("model.hops.totals.relative_change"), pct(totals.relative_change)] });
    if (isNumber(totals.n_keys) && !lone) rows.push({ cells: [label("model.hops.totals.n_keys"), num(totals.n_keys)] });
    sections.push({ type: "table", cls: "pm-kv pm-lora-table", title: `${clip(name, 60)} · node #${loader.node_id ?? "?"}`, columns: [{ label: "" }, { label: "" }],
      rows: /** @type {any[]} */ (rows.filter(Boolean)) });
    const unmatched = arr(cov.unmatched_keys).map(String);
    if (unmatched.length) {
      sections.push({
        type: "groups",
        title: `${label("loaders.coverage.n_unmatched_keys")} (${num(cov.n_unmatched_keys)}) by block`,
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
      [label("loaders.file.size_bytes"), formatBytes(file.size_bytes)],
      [label("loaders.file.n_tensors"), num(file.n_tensors)],
      [label("loaders.file.format"), file.format ?? MISSING],
      [label("loaders.file.network.base_model_name"), net.base_model_name ?? net.base_model ?? MISSING],
      [label("loaders.file.network.module"), net.module ?? MISSING],
      [label("loaders.profile.duration_s"), formatSeconds(obj(loader.profile).duration_s)],
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
      columns: [detailColumn("lora", "model.overall.weights.key"), detailColumn("lora", "model.overall.weights.relative_change", { num: true }), detailColumn("lora", "model.overall.weights.applied")],
      rows: weights.slice(0, 40).map((w) => ({ cells: [String(w.key ?? "").replace(/^diffusion_model\./, ""), isNumber(w.relative_change) ? pct(w.relative_change) : stat(w.delta_norm), yesNo(w.applied)] })),
      note: weights.length > 40 ? `first 40 of ${weights.length}` : undefined,
    });
  }
  return { sections, more };
}

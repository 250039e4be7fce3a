// The cards of the steps that show objects and tensors: models (each object's class, device, size
// and load time), latent (what it decodes to), tensor dumps and tensor comparisons.
import { MISSING, formatBytes, formatSeconds, isNumber } from "./format.mjs";
import { arr, figureText, num, obj, shape, stat } from "./card_parts.mjs";
import { KEYS } from "./vocabulary.generated.mjs";

/**
 * @typedef {import("./card_parts.mjs").Block} Block
 * @typedef {import("./card_parts.mjs").Design} Design
 * @typedef {import("./card_parts.mjs").Figure} Figure
 * @typedef {import("./card_parts.mjs").StepReport} StepReport
 */

/** @param {StepReport} step @returns {Design} */
export function modelsBlocks(step) {
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

/** @param {StepReport} step @returns {Design} */
export function latentBlocks(step) {
  const samples = obj(obj(step.details).samples);
  const decoded = obj(samples.decoded_size);
  /** @type {Figure[]} */
  const items = [];
  if (isNumber(decoded.width)) items.push({ label: "Decodes to", value: `${decoded.width}×${decoded.height}${isNumber(decoded.frames) && decoded.frames > 1 ? ` × ${decoded.frames} frames` : ""}` });
  if (arr(samples.family_alternatives).length) items.push({ label: "Could also be", value: arr(samples.family_alternatives).join(", "), title: "other model families whose latents have this shape" });
  return {
    sections: items.length ? [{ type: "figures", items }] : [],
    more: isNumber(samples.min) ? [{ type: "table", cls: "pm-kv", title: "Statistics", columns: [{ label: "" }, { label: "" }],
      rows: [["Min", stat(samples.min)], ["Max", stat(samples.max)], ["Mean", stat(samples.mean)], ["Std", stat(samples.std)]].map((cells) => ({ cells })) }] : [],
  };
}

/** @param {StepReport} step @returns {Design} */
export function dumpBlocks(step) {
  const d = obj(step.details);
  return { sections: Object.keys(obj(d.tensors)).length ? [tensorStatsTable(d.tensors)] : [], more: [] };
}

/** @param {StepReport} step @returns {Design} */
export function compareBlocks(step) {
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
  const only = [...arr(d.only_in_a).map((n) => `${n} (only in the reference, dump_a)`), ...arr(d.only_in_b).map((n) => `${n} (only in dump_b)`)];
  /** @type {Block[]} */
  const more = only.length ? [{ type: "groups", title: "Not compared", groups: [{ label: "", items: only }] }] : [];
  return { sections, more };
}

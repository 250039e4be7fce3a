// The conditioning step's card: the positive and negative prompt texts side by side, their figures
// in one two-column table; each entry's statistics under "details".
import { MISSING, formatValue } from "./format.mjs";
import { arr, detailColumn, detailLabel, num, obj, shape, stat } from "./card_parts.mjs";

/** A column of a side's entries, labelled by its declaration. @param {string} name @param {boolean} [isNum] */
const column = (name, isNum = false) => detailColumn("conditioning", `positive.entries.${name}`, isNum ? { num: true } : {});
import { KEYS } from "./vocabulary.generated.mjs";

/**
 * @typedef {import("./card_parts.mjs").Block} Block
 * @typedef {import("./card_parts.mjs").Design} Design
 * @typedef {import("./card_parts.mjs").StepReport} StepReport
 */

/** The prompt text(s) of one side, found through the graph. @param {any} side */
function sideText(side) {
  const texts = arr(obj(side).encoders).flatMap((e) => arr(e.texts)).filter((t) => typeof t.text === "string");
  if (!texts.length) return { text: null, note: obj(side).connected === false ? "not connected" : "no prompt text found" };
  const truncated = texts.some((t) => t.text_truncated);
  return { text: texts.map((t) => t.text).join("\n"), note: truncated ? "first 2,000 characters" : undefined };
}

/** @param {StepReport} step @returns {Design} */
export function conditioningBlocks(step) {
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
      columns: [column("index"), column("shape"), column("min", true), column("max", true), column("mean", true), column("std", true),
        { label: `${detailLabel("conditioning", "positive.entries.n_nan")}/${detailLabel("conditioning", "positive.entries.n_inf")}`, num: true }],
      rows: entries.map((e) => ({ cells: [String(e.index ?? ""), shape(e.shape), stat(e.min), stat(e.max), stat(e.mean), stat(e.std), `${num(e.n_nan)}/${num(e.n_inf)}`], tone: e.n_nan || e.n_inf ? "error" : undefined })),
    });
  }
  return { sections, more };
}

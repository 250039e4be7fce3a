// The parts every step card design is made of: the block types run_views.mjs renders, and the
// value helpers (bytes, percentages, statistics, yes/no) that write a detail for a person.
// Pure functions (no DOM).
import { MISSING, formatValue, isNumber, labelFromKey } from "./format.mjs";
import { DETAILS, VOCABULARY } from "./vocabulary.generated.mjs";

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
 * @typedef {{sections: Block[], more: Block[]}} Design a kind's blocks: shown, and under "details"
 * @typedef {import("./report_view.mjs").StepReport} StepReport
 */

/** @param {unknown} v @returns {any} */
export const obj = (v) => (v && typeof v === "object" && !Array.isArray(v) ? v : {});
/** @param {unknown} v @returns {any[]} */
export const arr = (v) => (Array.isArray(v) ? v : []);
/** @param {unknown} v */
export const shape = (v) => (Array.isArray(v) ? v.join("×") : MISSING);
/** @param {unknown} v */
export const yesNo = (v) => (v === true ? "yes" : v === false ? "no" : MISSING);
/** @param {unknown} v */
export const num = (v) => (isNumber(v) ? formatValue("", v) : MISSING);
/** @param {unknown} v fraction 0..1 -> "66.1 %" */
export const pct = (v) => (isNumber(v) ? `${(100 * v).toFixed(v < 0.001 ? 3 : 1)} %` : MISSING);
/** @param {unknown} v a statistic: 4 significant digits */
export const stat = (v) => (isNumber(v) ? (Math.abs(v) !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5) ? v.toExponential(2) : String(Number(v.toPrecision(4)))) : MISSING);

/**
 * A summary figure through the vocabulary: label and value with its unit.
 * @param {string} kind @param {Record<string, unknown>} summary @param {string} key
 * @returns {Figure}
 */
export function figure(kind, summary, key) {
  const field = VOCABULARY[kind]?.fields?.[key];
  return { label: labelFromKey(key, kind), value: formatValue(key, summary[key], kind), title: field?.description ?? key };
}

/**
 * A detail's declaration (monitors/<kind>/details.py, generated into DETAILS) at a dotted path
 * ("loaders.file.size_bytes"). An undeclared path throws: a card cannot show a key the declaration
 * lacks (the card then says why its layout is not shown, and the tests fail).
 * @param {string} kind @param {string} path
 * @returns {import("./vocabulary.generated.mjs").DetailInfo}
 */
export function detailInfo(kind, path) {
  /** @type {import("./vocabulary.generated.mjs").DetailInfo | undefined} */
  let info = DETAILS[kind];
  for (const name of path.split(".")) info = info?.fields?.[name];
  if (!info) throw new Error(`${kind} declares no detail ${path}`);
  return info;
}

/**
 * A detail's declared label as a row or column label: "file size" -> "File size".
 * @param {string} kind @param {string} path
 */
export function detailLabel(kind, path) {
  const { label } = detailInfo(kind, path);
  return label.charAt(0).toUpperCase() + label.slice(1);
}

/**
 * A column of a table whose rows are declared details: its label, and its description as title.
 * @param {string} kind @param {string} path @param {{num?: boolean}} [options]
 */
export function detailColumn(kind, path, options = {}) {
  return { label: detailLabel(kind, path), title: detailInfo(kind, path).description, ...options };
}

/** A tensor_compare figure as its headline shows it. @param {string | undefined} key @param {unknown} v */
export const figureText = (key, v) => (key && isNumber(v) ? formatValue(key, v, "tensor_compare") : stat(v));

/** @param {unknown} v */
export const known = (v) => v !== null && v !== undefined && !(typeof v === "number" && !Number.isFinite(v));

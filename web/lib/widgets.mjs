// Small elements the panel's views share: a badge, and a class name that wraps between its words.
import { h } from "./dom.mjs";

/**
 * A class name with line-break chances between its words ("Pipeline<wbr>Monitor<wbr>VAE<wbr>Encode"),
 * so a narrow column wraps it there rather than mid-word.
 * @param {string} text
 * @returns {(string | HTMLElement)[]}
 */
export function breakable(text) {
  /** @type {string[]} */
  const parts = [];
  for (const part of String(text).split(/(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])/)) {
    // a one-letter word stays with its neighbour: "KSampler", not "K" then "Sampler"
    if (parts.length && (part.length < 2 || parts[parts.length - 1].length < 2)) parts[parts.length - 1] += part;
    else parts.push(part);
  }
  return parts.flatMap((part, i) => (i ? [h("wbr"), part] : [part]));
}

/** @param {string} text @param {string} tone @param {string} [title] */
export function badge(text, tone, title) {
  return h("span", { class: `pm-badge pm-tone-${tone}`, text, title });
}

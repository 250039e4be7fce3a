// The compact summary a monitor node returns as ui {"text": [...]}, shown on the node itself as
// text (a read-only DOM widget filled through textContent), so a user sees the key figures
// without opening the panel. One line per entry, never wrapped: a line too long for the node ends
// in an ellipsis, past MAX_LINES the last line says how many more, and the tooltip has them all.
// The node grows to exactly that height, so the summary is never cut mid-line.

const WIDGET_NAME = "pipeline_monitor_summary";
const LINE_HEIGHT = 15;
export const MAX_LINES = 8; // more are behind the tooltip, so the node grows less over its neighbours
const MARGIN = 4; // the frontend insets a DOM widget by this on each side

/**
 * ui.text -> lines; anything else -> none.
 * @param {unknown} text
 * @returns {string[]}
 */
export function summaryLines(text) {
  if (!Array.isArray(text)) return [];
  return text.flatMap((t) => String(t ?? "").split("\n")).filter((line) => line.trim() !== "");
}

/**
 * Lines after wrapping at a width in pixels (11 px monospace: about 6.7 px a character).
 * @param {string[]} lines
 * @param {number} widthPx
 */
export function wrappedLineCount(lines, widthPx) {
  const perLine = Math.max(10, Math.floor(widthPx / 6.7));
  return lines.reduce((n, line) => n + Math.max(1, Math.ceil(line.length / perLine)), 0);
}

/**
 * The lines shown on the node: at most MAX_LINES, the last saying how many more the tooltip has.
 * @param {string[]} lines
 */
export function shownLines(lines) {
  if (lines.length <= MAX_LINES) return lines;
  const more = lines.length - (MAX_LINES - 1);
  return [...lines.slice(0, MAX_LINES - 1), `… ${more} more lines (hover for all)`];
}

/** The summary's height in pixels for `n` shown lines. @param {number} n */
export function summaryHeight(n) {
  return n * LINE_HEIGHT + 10 + 2 * MARGIN;
}

/**
 * @param {any} node an LGraphNode
 * @param {unknown} text
 */
export function showNodeSummary(node, text) {
  const lines = summaryLines(text);
  if (!node || !lines.length) return;
  let widget = node.widgets?.find((/** @type {any} */ w) => w.name === WIDGET_NAME);
  if (!widget) {
    if (typeof node.addDOMWidget !== "function") return;
    const element = document.createElement("div");
    element.className = "pm-node-summary";
    widget = node.addDOMWidget(WIDGET_NAME, "pm_summary", element, {
      serialize: false,
      hideOnZoom: true,
      margin: MARGIN,
      getMinHeight: () => widget.pmHeight ?? LINE_HEIGHT + 10 + 2 * MARGIN,
      getMaxHeight: () => widget.pmHeight ?? LINE_HEIGHT + 10 + 2 * MARGIN,
    });
    widget.serialize = false; // not part of the workflow's widgets_values
  }
  widget.element.classList.remove("pm-stale"); // this run refreshed it
  const shown = shownLines(lines);
  widget.element.textContent = shown.join("\n");
  widget.element.title = lines.join("\n");
  const nodeWidth = Math.max(node.size?.[0] ?? 0, 280);
  widget.pmHeight = summaryHeight(shown.length);
  const [width, height] = node.computeSize?.() ?? node.size;
  node.setSize?.([Math.max(nodeWidth, width), Math.max(node.size?.[1] ?? 0, height)]);
  node.setDirtyCanvas?.(true, true);
}

/**
 * Mark a monitor node's summary as from an earlier run (the last run failed before the node ran),
 * or as current again.
 * @param {any} node an LGraphNode
 * @param {boolean} stale
 */
export function markSummaryStale(node, stale) {
  const widget = node?.widgets?.find((/** @type {any} */ w) => w.name === WIDGET_NAME);
  const element = widget?.element;
  if (!element) return false;
  element.classList.toggle("pm-stale", stale);
  element.dataset.stale = stale ? "1" : "";
  const text = element.textContent;
  element.title = stale ? `from an earlier run: the last run ended before this node ran\n${text}` : text;
  node.setDirtyCanvas?.(true, true);
  return true;
}

/**
 * The node a `pipeline_monitor.step_text` event names (a step whose figures came after the prompt)
 * in the open graph, or null: only a top-level Pipeline Monitor node of that id, since the graph
 * may have changed since the prompt was queued.
 * @param {any} graph the app's root graph
 * @param {any} detail {prompt_id, node_id, kind, text}
 */
export function stepTextNode(graph, detail) {
  const id = detail?.node_id;
  if (typeof id !== "string" || id.includes(":") || typeof graph?.getNodeById !== "function") return null;
  const node = graph.getNodeById(/^\d+$/.test(id) ? Number(id) : id);
  return String(node?.comfyClass ?? node?.type ?? "").startsWith("PipelineMonitor") ? node : null;
}

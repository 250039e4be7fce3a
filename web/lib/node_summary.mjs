// The compact summary a monitor node returns as ui {"text": [...]}, shown on the node itself as
// text (a read-only DOM widget filled through textContent), so a user sees the key figures
// without opening the panel.

const WIDGET_NAME = "pipeline_monitor_summary";
const LINE_HEIGHT = 15;
const MAX_LINES = 12;

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
      getMinHeight: () => widget.pmHeight ?? LINE_HEIGHT + 8,
      getMaxHeight: () => widget.pmHeight ?? LINE_HEIGHT + 8,
    });
    widget.serialize = false; // not part of the workflow's widgets_values
  }
  widget.element.textContent = lines.join("\n");
  widget.element.title = lines.join("\n");
  widget.pmHeight = Math.min(lines.length, MAX_LINES) * LINE_HEIGHT + 8;
  const [width, height] = node.computeSize?.() ?? node.size;
  node.setSize?.([Math.max(node.size?.[0] ?? 0, width, 280), Math.max(node.size?.[1] ?? 0, height)]);
  node.setDirtyCanvas?.(true, true);
}

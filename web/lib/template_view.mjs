// The view an example opens at from the template browser. Frontends fit a template to the whole
// canvas (1.58 ignores the workflow's saved view for templates), and the canvas runs under the open
// sidebar: the first nodes sat under it, and a wide example opened below LiteGraph's threshold for
// drawing titles. So when one of this pack's cards was clicked and its graph has loaded (the
// extension's afterConfigureGraph), once the frontend's own camera has settled (the view unchanged
// for a few animation frames, 60 frames at most) the nodes are framed in the canvas area that is not
// under the sidebar, at a zoom between READABLE_SCALE and 1. Only after a click on the pack's card:
// a user's own workflows keep the view they were saved with.

export const READABLE_SCALE = 0.75; // over LiteGraph's low-quality threshold (about 0.6)
const MARGIN = { left: 32, top: 96, right: 32, bottom: 96 }; // clear of the floating toolbars
const CARD_SELECTOR = '[data-testid^="template-workflow-"]';
const PENDING_MS = 30_000; // a template loads within this after its card's click

/**
 * The scale and offset that put `bounds` (graph units) at the top left of `free` (canvas pixels).
 * @param {{left: number, top: number, right: number, bottom: number}} bounds
 * @param {{left: number, top: number, width: number, height: number}} free
 */
export function frameBounds(bounds, free) {
  const width = Math.max(1, bounds.right - bounds.left), height = Math.max(1, bounds.bottom - bounds.top);
  const fit = Math.min(free.width / width, free.height / height);
  const scale = Math.min(1, Math.max(READABLE_SCALE, fit));
  return { scale, offset: [free.left / scale - bounds.left, free.top / scale - bounds.top] };
}

/**
 * The graph's bounding box: its nodes, their title bars included, and its groups (each a
 * [x, y, width, height] box); null without nodes.
 * @param {any[]} nodes @param {number} titleHeight @param {number[][]} [groups]
 */
export function nodeBounds(nodes, titleHeight, groups = []) {
  if (!nodes.length) return null;
  const boxes = [...nodes.map((n) => [n.pos[0], n.pos[1] - titleHeight, n.size[0], n.size[1] + titleHeight]), ...groups];
  const box = { left: Infinity, top: Infinity, right: -Infinity, bottom: -Infinity };
  for (const [x, y, w, hgt] of boxes) {
    box.left = Math.min(box.left, x);
    box.top = Math.min(box.top, y);
    box.right = Math.max(box.right, x + w);
    box.bottom = Math.max(box.bottom, y + hgt);
  }
  return box;
}

/**
 * The canvas area (canvas pixels) right of the open sidebar, inside the margins.
 * @param {Document} doc @param {HTMLCanvasElement} canvasEl
 */
function freeArea(doc, canvasEl) {
  const rect = canvasEl.getBoundingClientRect();
  let left = rect.left;
  for (const el of doc.querySelectorAll(".side-tool-bar-container, .sidebar-content-container")) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.height > 0 && r.left < rect.left + rect.width / 2) left = Math.max(left, r.right);
  }
  const x = left - rect.left + MARGIN.left, y = MARGIN.top;
  return { left: x, top: y, width: rect.width - x - MARGIN.right, height: rect.height - y - MARGIN.bottom };
}

/**
 * Follows clicks on the pack's template cards; `afterLoad()` (from afterConfigureGraph) frames the
 * graph that such a click opened.
 * @param {Document} doc
 * @param {() => any} getApp the ComfyUI app (canvas, graph)
 * @param {(name: string) => Promise<boolean>} isPackTemplate
 */
export function exampleFramer(doc, getApp, isPackTemplate) {
  let clickedAt = 0; // when a template card was clicked; 0: none pending
  /** @type {Promise<boolean> | null} whether that card is the pack's (asked once the click came) */
  let ours = null;
  doc.addEventListener("click", (event) => {
    const card = /** @type {Element | null} */ (event.target instanceof Element ? event.target.closest(CARD_SELECTOR) : null);
    const name = card?.getAttribute("data-testid")?.slice("template-workflow-".length);
    clickedAt = name ? Date.now() : 0;
    ours = name ? isPackTemplate(name).catch(() => false) : null;
  }, true);
  return {
    async afterLoad() {
      // a click that opened nothing (an error, the dialog closed) does not frame a later load
      if (!clickedAt || !ours || Date.now() - clickedAt > PENDING_MS) return;
      const asked = ours;
      clickedAt = 0;
      ours = null;
      // the graph may load before the answer comes: wait for it, never frame someone else's
      if (!(await asked)) return;
      const canvas = getApp()?.canvas;
      if (!canvas?.ds || !canvas.canvas) return;
      let last = "", still = 0, frames = 0;
      const step = () => {
        const now = `${canvas.ds.scale}|${canvas.ds.offset[0]}|${canvas.ds.offset[1]}`;
        still = now === last ? still + 1 : 0;
        last = now;
        frames += 1;
        if ((still < 3 || frames < 6) && frames < 60) return void requestAnimationFrame(step);
        const app = getApp();
        const groups = (app?.graph?.groups ?? app?.graph?._groups ?? []).map((/** @type {any} */ g) => g.bounding ?? g._bounding).filter(Boolean);
        const bounds = nodeBounds(app?.graph?.nodes ?? [], globalThis.LiteGraph?.NODE_TITLE_HEIGHT ?? 30, [...groups].map((b) => [...b]));
        if (!bounds) return;
        const { scale, offset } = frameBounds(bounds, freeArea(doc, canvas.canvas));
        canvas.ds.scale = scale;
        canvas.ds.offset[0] = offset[0];
        canvas.ds.offset[1] = offset[1];
        canvas.setDirty(true, true);
      };
      requestAnimationFrame(step);
    },
  };
}

import { test } from "node:test";
import assert from "node:assert/strict";
import { READABLE_SCALE, frameBounds, nodeBounds } from "../../web/lib/template_view.mjs";

test("the nodes' box includes their title bars", () => {
  const nodes = [{ pos: [40, 60], size: [320, 130] }, { pos: [400, 300], size: [200, 100] }];
  assert.deepEqual(nodeBounds(nodes, 30), { left: 40, top: 30, right: 600, bottom: 400 });
  assert.equal(nodeBounds([], 30), null);
  assert.deepEqual(nodeBounds(nodes, 30, [[20, -20, 400, 200]]), { left: 20, top: -20, right: 600, bottom: 400 }, "a group above the nodes counts");
});

test("a graph that fits is shown at 1:1 from the free area's top left", () => {
  const { scale, offset } = frameBounds({ left: 40, top: 30, right: 600, bottom: 400 }, { left: 400, top: 96, width: 1100, height: 800 });
  assert.equal(scale, 1);
  // screen x = (graph x + offset) * scale: the box's left edge lands on the free area's left edge
  assert.equal((40 + offset[0]) * scale, 400);
  assert.equal((30 + offset[1]) * scale, 96);
});

test("a wide graph shrinks to fit, but never below the readable zoom", () => {
  const fit = frameBounds({ left: 0, top: 0, right: 1400, bottom: 700 }, { left: 400, top: 96, width: 1120, height: 800 });
  assert.equal(fit.scale, 0.8);
  assert.equal((0 + fit.offset[0]) * fit.scale, 400);
  const wide = frameBounds({ left: 0, top: 0, right: 3300, bottom: 700 }, { left: 400, top: 96, width: 1120, height: 800 });
  assert.equal(wide.scale, READABLE_SCALE);
  assert.equal((0 + wide.offset[0]) * wide.scale, 400); // the left edge stays clear of the sidebar
});

test("a graph that loads before the card is known to be the pack's is framed once the answer comes", async () => {
  const { exampleFramer } = await import("../../web/lib/template_view.mjs");
  /** @type {(event: any) => void} */
  let onClick = () => {};
  const doc = { addEventListener: (/** @type {string} */ _type, /** @type {any} */ handler) => { onClick = handler; } };
  const frames = /** @type {unknown[]} */ ([]);
  const savedFrame = globalThis.requestAnimationFrame;
  const savedElement = globalThis.Element;
  globalThis.requestAnimationFrame = /** @type {any} */ ((/** @type {unknown} */ step) => { frames.push(step); return 0; });
  globalThis.Element ??= /** @type {any} */ (class {});
  try {
    /** @type {((ours: boolean) => void)[]} */
    const answers = [];
    const isPackTemplate = () => new Promise((resolve) => { answers.push(resolve); });
    const app = { canvas: { ds: { scale: 1, offset: [0, 0] }, canvas: {} } };
    const framer = exampleFramer(/** @type {any} */ (doc), () => app, /** @type {any} */ (isPackTemplate));
    const card = { getAttribute: () => "template-workflow-dump_and_compare" };
    const target = Object.assign(Object.create(globalThis.Element.prototype), { closest: () => card });
    onClick({ target });
    const loading = framer.afterLoad(); // the graph loaded; the pack's template list has not answered yet
    assert.equal(frames.length, 0);
    answers[0](true);
    await loading;
    assert.equal(frames.length, 1, "framed once the card is known to be the pack's");
    onClick({ target });
    const other = framer.afterLoad();
    answers[1](false);
    await other;
    assert.equal(frames.length, 1, "another pack's card: not framed");
  } finally {
    globalThis.requestAnimationFrame = savedFrame;
    if (savedElement === undefined) delete (/** @type {any} */ (globalThis)).Element;
  }
});

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

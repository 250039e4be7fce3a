import assert from "node:assert/strict";
import { test } from "node:test";
import { nodeTrends, sparklinePoints, trendKey } from "../../web/lib/sparkline.mjs";

const node = (/** @type {number} */ s, cached = false) => ({ node_id: "3", class_type: "KSampler", status: cached ? "cached" : "executed", cached, duration_s: s, peak_rss_above_start_bytes: 1024 * s });
const run = (/** @type {string} */ id, /** @type {number} */ t, /** @type {any} */ n) => ({ prompt_id: id, status: "success", started_unix_s: t, nodes: [n] });

test("a node's trend runs oldest to newest, the run shown last, cached runs as gaps", () => {
  const shown = run("now", 9, node(3));
  const trends = nodeTrends(shown, [run("b", 5, node(2, true)), run("a", 1, node(1))]);
  assert.deepEqual(trends.get(trendKey("3", "KSampler")), { durations: [1, null, 3], memories: [1024, null, 3072] });
});

test("sparkline points span the box, min at the bottom; fewer than two values draw nothing", () => {
  assert.equal(sparklinePoints([1, null, 3], 44, 12), "1.0,11.0 43.0,1.0");
  assert.equal(sparklinePoints([2, 2], 44, 12), "1.0,6.0 43.0,6.0");
  assert.equal(sparklinePoints([null, 5], 44, 12), "");
});

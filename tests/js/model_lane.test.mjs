import assert from "node:assert/strict";
import { test } from "node:test";
import { LANE_COLORS, drawModelLane, modelFindings, modelLane, weightsFields } from "../../web/lib/model_lane.mjs";
import { nodeRows, problems } from "../../web/lib/report_view.mjs";
import { nodeColumns } from "../../web/lib/run_views.mjs";

const MiB = 1024 * 1024;
const report = {
  started_unix_s: 1000,
  nodes: [
    { node_id: "3", class_type: "KSampler", status: "executed", cached: false, duration_s: 2, weights_loaded_bytes: 100 * MiB, weights_unloaded_bytes: 0, weights_moved_s: 0.5 },
    { node_id: "8", class_type: "VAEDecode", status: "executed", cached: false, duration_s: 1 },
  ],
  model_residency: {
    events: [
      { kind: "load_full", model_class: "WAN21", offset_s: 0.25, duration_s: 0.5, bytes_moved: 100 * MiB, node_id: "3" },
      { kind: "unload_full", model_class: "WAN21", offset_s: 2.5, duration_s: 0.1, bytes_moved: 100 * MiB, node_id: "8" },
      { kind: "patch", model_class: "WAN21", offset_s: 0.75, duration_s: null, n_weights: 20, node_id: "3" },
      { kind: "load_full", model_class: "WAN21", offset_s: null },
    ],
  },
};

test("the lane has each timed model event at its wall-clock time, coloured by what it did", () => {
  const lane = modelLane(report);
  assert.deepEqual(lane.map((e) => [e.t, e.dur, e.group]), [[1000.25, 0.5, "load"], [1002.5, 0.1, "unload"], [1000.75, 0, "patch"]]);
  assert.equal(lane[0].label, "load_full WAN21 100.0 MiB (node #3)");
  assert.deepEqual(modelLane({ started_unix_s: 1 }), []);
  assert.deepEqual(modelLane({ model_residency: { events: report.model_residency.events } }), []); // no start
});

test("the lane paints one mark per event, at least 3 px wide, at the foot of the plot", () => {
  /** @type {any[]} */
  const rects = [];
  const ctx = { fillStyle: "", fillRect: (/** @type {number[]} */ ...r) => rects.push([ctx.fillStyle, ...r]) };
  const f = { ctx: /** @type {any} */ (ctx), top: 6, h: 100, x: (/** @type {number} */ t) => Math.round((t - 1000) * 100) };
  drawModelLane(f, modelLane(report));
  assert.deepEqual(rects, [[LANE_COLORS.load, 25, 100, 50, 5], [LANE_COLORS.unload, 250, 100, 10, 5], [LANE_COLORS.patch, 75, 100, 3, 5]]);
  drawModelLane(f, []);
  assert.equal(rects.length, 3);
});

test("a node row's weights moved: a column shown by default where any node moved weights", () => {
  assert.deepEqual(weightsFields({}), { weightsMovedBytes: null, weightsMovedS: null, weightsTitle: null });
  const rows = nodeRows(/** @type {any} */ (report));
  assert.equal(rows[0].weightsMovedBytes, 100 * MiB);
  assert.equal(rows[0].weightsTitle, "loaded 100.0 MiB, unloaded 0 B in 500 ms");
  const { shown } = nodeColumns(rows, false);
  const column = shown.find((c) => c.key === "weightsMovedBytes");
  assert.ok(column && column.label === "Weights" && /loaded_size/.test(String(column.title)));
  const none = nodeColumns(nodeRows(/** @type {any} */ ({ nodes: [report.nodes[1]] })), true);
  assert.ok(!none.shown.some((c) => c.key === "weightsMovedBytes"));
});

test("the run's model findings are in its problem list, warnings before notes", () => {
  const findings = [
    { level: "info", message: "LoRA weights changed on WAN21: 20 weights unpatched and 20 patched again (0.10 s)", code: "lora_repatched" },
    { level: "warning", message: "WAN21 was unloaded by node 8 (VAEDecode) in prompt p1 and loaded again", code: "model_reloaded" },
    { level: "bogus", message: "x" },
    null,
  ];
  const listed = problems(/** @type {any} */ ({ status: "success", steps: [], model_residency: { findings } }));
  assert.deepEqual(listed.map((p) => [p.level, p.where]), [["warning", "models"], ["info", "models"], ["info", "models"]]);
  assert.deepEqual(modelFindings({}), []);
});

import assert from "node:assert/strict";
import { test } from "node:test";
import { SampleBuffer, niceBytesMax, nodeSegments, normalizeSample, presentSeries } from "../../web/lib/live_chart.mjs";
import { segmentLabel } from "../../web/lib/live_samples.mjs";

const sample = (t, extra = {}) => ({ unix_time_s: t, process_rss_bytes: 100 + t, ram_used_bytes: 1000, ram_total_bytes: 4000, gpus: [], node: null, ...extra });

test("samples are normalised; malformed ones are dropped", () => {
  assert.equal(normalizeSample(null), null);
  assert.equal(normalizeSample({ unix_time_s: "x" }), null);
  const p = normalizeSample(sample(5, { node: { node_id: 7, class_type: "KSampler", title: null }, gpus: [{ device: "cuda:0", allocated_bytes: 1, reserved_bytes: 2, utilization_pct: 50 }] }));
  assert.deepEqual(p?.node, { id: "7", label: "KSampler" });
  assert.deepEqual(p?.gpus[0], { device: "cuda:0", allocated: 1, reserved: 2, util: 50, total: null, process: null, dynamic: null });
  const dynamic = normalizeSample(sample(6, { gpus: [{ device: "cuda:0", allocated_bytes: 1, process_used_bytes: 9, aimdo_used_bytes: 7 }] }));
  assert.deepEqual([dynamic?.gpus[0].process, dynamic?.gpus[0].dynamic], [9, 7]);
});

test("the buffer keeps time order, drops overlaps and stays bounded", () => {
  const buffer = new SampleBuffer(5);
  assert.equal(buffer.extend([sample(1), sample(2), sample(3)]), 3);
  assert.equal(buffer.push(sample(2)), false, "backfill overlapping live ticks");
  assert.equal(buffer.extend([sample(4), sample(5), sample(6), sample(7)]), 4);
  assert.deepEqual(buffer.points.map((p) => p.t), [3, 4, 5, 6, 7]);
  assert.deepEqual(buffer.window(2).map((p) => p.t), [5, 6, 7]);
  assert.equal(buffer.latest()?.rss, 107);
  assert.deepEqual(new SampleBuffer().window(), []);
});

test("executing nodes become segments on the time axis", () => {
  const node = (id) => ({ node_id: id, class_type: `C${id}`, title: null });
  const buffer = new SampleBuffer();
  buffer.extend([sample(1), sample(2, { node: node("4") }), sample(3, { node: node("4") }), sample(4, { node: node("5") }), sample(5), sample(6, { node: node("4") })]);
  assert.deepEqual(nodeSegments(buffer.points), [
    { start: 2, end: 4, id: "4", label: "C4", promptId: null },
    { start: 4, end: 5, id: "5", label: "C5", promptId: null },
    { start: 6, end: 6, id: "4", label: "C4", promptId: null },
  ]);
});

test("the same node id in two runs is two segments, labelled with its run when zoomed to the other", () => {
  const node = { node_id: "6", class_type: "VAEDecode", title: "VAE Decode" };
  const buffer = new SampleBuffer();
  buffer.extend([sample(1, { node, prompt_id: "a" }), sample(2, { node, prompt_id: "b" }), sample(3, { node: { ...node, node_id: "9:6" }, prompt_id: "b" })]);
  const segments = nodeSegments(buffer.points);
  assert.deepEqual(segments.map((s) => [s.id, s.promptId]), [["6", "a"], ["6", "b"], ["9:6", "b"]]);
  const zoom = { from: 0, to: 10, promptId: "b", runStart: 2 };
  assert.deepEqual(segments.map((s) => segmentLabel(s, zoom)), ["#6 VAE Decode · earlier run", "#6 VAE Decode", "#9:6 VAE Decode"]);
  assert.equal(segmentLabel(segments[2], { ...zoom, promptId: "a", runStart: 1 }), "#9:6 VAE Decode · later run");
  assert.equal(segmentLabel(segments[0], null), "#6 VAE Decode");
});

test("GPU series appear only where a GPU reports", () => {
  const buffer = new SampleBuffer();
  buffer.push(sample(1));
  assert.deepEqual(presentSeries(buffer.points).map((s) => s.key), ["ramUsed", "rss"]);
  buffer.push(sample(2, { gpus: [{ device: "cuda:0", allocated_bytes: 5, reserved_bytes: 6, utilization_pct: null }] }));
  assert.deepEqual(presentSeries(buffer.points).map((s) => s.key), ["ramUsed", "rss", "gpuAllocated", "gpuReserved"]);
});

test("the byte axis ends at a round value above the maximum", () => {
  const GiB = 1024 ** 3;
  assert.equal(niceBytesMax(0), GiB);
  assert.equal(niceBytesMax(3 * GiB), 4 * GiB);
  assert.equal(niceBytesMax(900 * 1024 ** 2), 1024 * 1024 ** 2);
  assert.ok(niceBytesMax(17 * GiB) >= 17 * GiB * 1.05);
});

test("the chart window is fixed, so the time axis does not jump while one watches", async () => {
  const { chartWindow, CHART_WINDOW_S } = await import("../../web/lib/live_chart.mjs");
  const buffer = new SampleBuffer();
  buffer.extend([sample(0), sample(5)]);
  assert.equal(chartWindow(buffer.points), CHART_WINDOW_S);
  for (let t = 10; t <= 1000; t += 10) buffer.push(sample(t));
  assert.equal(chartWindow(buffer.window()), CHART_WINDOW_S);
});

test("runs become bands, cut where samples stopped; gaps are found", async () => {
  const { runBands, isGap } = await import("../../web/lib/live_chart.mjs");
  const buffer = new SampleBuffer();
  buffer.extend([0, 1, 2, 30, 31].map((t) => ({ ...sample(t), prompt_id: "p1" })));
  buffer.extend([32, 33].map((t) => sample(t)));
  buffer.push({ ...sample(34), prompt_id: "p2" });
  assert.deepEqual(runBands(buffer.points).map((b) => [b.promptId, b.start, b.end]), [["p1", 0, 2], ["p1", 30, 31], ["p2", 34, 34]]);
  assert.equal(isGap(buffer.points[2], buffer.points[3]), true);
  assert.equal(isGap(buffer.points[0], buffer.points[1]), false);
});

test("the byte axis fits the plotted series, not system RAM, in round steps", async () => {
  const { byteAxis } = await import("../../web/lib/live_chart.mjs");
  const MiB = 1024 ** 2;
  const axis = byteAxis(940 * MiB, 978 * MiB);
  assert.ok(axis.lo <= 940 * MiB && axis.lo > 800 * MiB, `lo ${axis.lo / MiB}`);
  assert.ok(axis.hi >= 978 * MiB && axis.hi < 1100 * MiB, `hi ${axis.hi / MiB}`);
  assert.equal((axis.hi - axis.lo) % axis.step, 0);
  assert.deepEqual(byteAxis(0, 0), { lo: 0, hi: 1024 ** 3, step: 256 * MiB });
});

test("the hover readout takes the nearest point within reach", async () => {
  const { pointNear } = await import("../../web/lib/live_chart.mjs");
  const buffer = new SampleBuffer();
  buffer.extend([sample(0), sample(10)]);
  assert.equal(pointNear(buffer.points, 8, 3)?.t, 10);
  assert.equal(pointNear(buffer.points, 5, 1), null);
});

test("byte axis labels never repeat: as many decimals as the step needs", async () => {
  const { byteAxis, byteAxisLabel } = await import("../../web/lib/live_chart.mjs");
  const MiB = 1024 ** 2;
  const axis = byteAxis(1000 * MiB, 1060 * MiB);
  const labels = [];
  for (let v = axis.lo; v <= axis.hi + 1; v += axis.step) labels.push(byteAxisLabel(v, axis));
  assert.equal(new Set(labels).size, labels.length, labels.join(", "));
  assert.equal(byteAxisLabel(512 * MiB, { hi: 1024 ** 3, step: 256 * MiB }), "0.50 GiB", "a 0.25 GiB step needs two decimals");
  assert.equal(byteAxisLabel(1280 * MiB, { hi: 2 * 1024 ** 3, step: 256 * MiB }), "1.25 GiB", "not 1.3 GiB");
  assert.equal(byteAxisLabel(960 * MiB, { hi: 976 * MiB, step: 16 * MiB }), "960 MiB");
});

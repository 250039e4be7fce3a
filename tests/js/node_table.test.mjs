import assert from "node:assert/strict";
import { test } from "node:test";
import { nodeColumns, nodeTableCsv } from "../../web/lib/run_views.mjs";

const row = (/** @type {Record<string, any>} */ o) => ({ nodeId: "1", classType: "X", label: "X", status: "success", cached: false,
  durationS: 0.5, gpuTimeS: null, gpuBusyS: null, rssAddedBytes: 10, peakRssBytes: 1e9, gpuAddedBytes: null, peakGpuBytes: null,
  deviceBytes: null, deviceUnknownReason: null, aimdoBytes: null, aimdoUnknownReason: null,
  weightsMovedBytes: null, weightsMovedS: null, weightsTitle: null, ...o });

test("the node table shows the node's own figures by default and names the hidden columns", () => {
  const cpu = nodeColumns([row({})], false);
  assert.deepEqual(cpu.shown.map((c) => c.key), ["nodeId", "durationS", "rssAddedBytes"]);
  assert.deepEqual(cpu.hidden.map((c) => c.label), ["Peak RSS"]);
  const gpu = nodeColumns([row({ gpuTimeS: 0.1, gpuBusyS: 0.02, gpuAddedBytes: 5, peakGpuBytes: 9 })], false);
  // GPU busy by default; the stream span (idle time included) is behind the toggle, named there
  assert.deepEqual(gpu.shown.map((c) => c.key), ["nodeId", "durationS", "gpuBusyS", "gpuAddedBytes"]);
  assert.deepEqual(gpu.hidden.map((c) => c.label), ["GPU span", "RSS +", "Peak RSS", "Peak GPU"]);
  assert.match(String(gpu.hidden[0].title), /idle time included/);
  assert.match(String(gpu.shown[2].title), /an idle node shows about 0/);
  const spanOnly = nodeColumns([row({ gpuTimeS: 0.1, gpuAddedBytes: 5, peakGpuBytes: 9 })], true);
  assert.ok(!spanOnly.shown.some((c) => c.key === "gpuBusyS"), "no GPU busy column without a figure");
  assert.deepEqual(nodeColumns([row({})], true).hidden, []);
  // the process's device memory (the driver's count, dynamic VRAM's) where measured, behind the toggle
  const device = nodeColumns([row({ gpuAddedBytes: 5, peakGpuBytes: 9, deviceBytes: 12 })], false);
  assert.deepEqual(device.hidden.map((c) => c.label), ["RSS +", "Peak RSS", "Peak GPU", "Device"]);
  assert.match(String(device.hidden[3].title), /outside torch|allocations outside torch/);
  const dynamic = nodeColumns([row({ gpuAddedBytes: 5, peakGpuBytes: 9, deviceBytes: 12, aimdoBytes: 7 })], true);
  assert.deepEqual(dynamic.shown.slice(-2).map((c) => c.key), ["deviceBytes", "aimdoBytes"]);
});

test("the CSV has every column in seconds and bytes, and quotes text a spreadsheet would run", () => {
  const csv = nodeTableCsv([row({ label: '=HYPERLINK("x")', cached: true })]);
  const [head, line] = csv.trim().split("\n");
  assert.equal(head, "node_id,class_type,title,status,cached,duration_s,gpu_busy_s,gpu_time_s,rss_added_bytes,peak_rss_bytes,gpu_added_bytes,peak_gpu_bytes,peak_process_used_bytes,peak_aimdo_used_bytes,weights_moved_bytes,weights_moved_s");
  assert.equal(line, `1,X,"'=HYPERLINK(""x"")",success,true,0.5,,,10,1000000000,,,,,,`);
});

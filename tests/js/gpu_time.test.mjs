import assert from "node:assert/strict";
import { test } from "node:test";
import { nodeRows } from "../../web/lib/report_view.mjs";
import { makeReport } from "./report_view.test.mjs";

test("node rows carry GPU time beside wall time, unknown with its reason", () => {
  const report = makeReport();
  report.nodes[0].gpu_time_s = null;
  report.nodes[0].gpu_time_unknown_reason = "no CUDA device in use by this process";
  report.nodes[1].gpu_time_s = 0.2;
  report.nodes[1].gpu_time_unknown_reason = null;
  const rows = nodeRows(report);
  assert.deepEqual(rows.map((r) => [r.durationS, r.gpuTimeS]), [[1.0, null], [1.5, 0.2], [null, null]]);
  assert.equal(rows[0].gpuTimeUnknownReason, "no CUDA device in use by this process");
  assert.equal(rows[2].gpuTimeUnknownReason, null, "older reports and cached rows have neither");
});

test("node rows carry GPU busy time from NVML's samples, unknown with its reason", () => {
  const report = makeReport();
  report.nodes[0].gpu_busy_s = null;
  report.nodes[0].gpu_busy_unknown_reason = "the node is shorter than NVML's sampling period";
  report.nodes[1].gpu_busy_s = 0.19;
  const rows = nodeRows(report);
  assert.deepEqual(rows.map((r) => r.gpuBusyS), [null, 0.19, null]);
  assert.equal(rows[0].gpuBusyUnknownReason, "the node is shorter than NVML's sampling period");
});

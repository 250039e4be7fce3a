import assert from "node:assert/strict";
import { test } from "node:test";
import {
  clip, formatBytes, formatDelta, formatPercent, formatSeconds, formatTime, formatValue, labelFromKey, relativeChange, safeFileName,
} from "../../web/lib/format.mjs";

test("bytes in binary units, unknown as a dash", () => {
  assert.equal(formatBytes(0), "0 B");
  assert.equal(formatBytes(1023), "1023 B");
  assert.equal(formatBytes(1536), "1.5 KiB");
  assert.equal(formatBytes(3 * 1024 ** 3), "3.0 GiB");
  assert.equal(formatBytes(-2 * 1024 ** 2), "-2.0 MiB");
  assert.equal(formatBytes(null), "–");
  assert.equal(formatBytes(Number.NaN), "–");
});

test("seconds, percent", () => {
  assert.equal(formatSeconds(0.25), "250 ms");
  assert.equal(formatSeconds(0.0042), "4.2 ms");
  assert.equal(formatSeconds(3.14159), "3.14 s");
  assert.equal(formatSeconds(600), "10.0 min");
  assert.equal(formatSeconds(undefined), "–");
  assert.equal(formatPercent(12.345), "12.3 %");
});

test("values are formatted by the unit in the key", () => {
  assert.equal(formatValue("peak_rss_bytes", 2 * 1024 ** 3), "2.0 GiB");
  assert.equal(formatValue("duration_s", 1.5), "1.50 s");
  assert.equal(formatValue("ram_used_pct", 50), "50.0 %");
  assert.equal(formatValue("frames_per_s", 12.5), "12.5/s", "a rate is not a time");
  assert.equal(formatValue("n_tensors", 12345), "12,345");
  assert.equal(formatValue("mean", 0.000012345), "1.234e-5");
  assert.equal(formatValue("std", 0.98765), "0.9877");
  assert.equal(formatValue("written", true), "yes");
  assert.equal(formatValue("anything", null), "–");
  assert.equal(formatValue("shape", [1, 16, 3, 8, 8]), "[1, 16, 3, 8, 8]");
  assert.equal(formatValue("strategy_used", "<b>tiled</b>"), "<b>tiled</b>", "text stays text, the DOM layer shows it as such");
  const long = formatValue("nested", { a: "x".repeat(400) });
  assert.ok(long.length <= 160 && long.endsWith("…"));
});

test("labels drop the unit and mark counts", () => {
  assert.equal(labelFromKey("peak_rss_bytes"), "peak rss");
  assert.equal(labelFromKey("duration_s"), "duration");
  assert.equal(labelFromKey("frames_per_s"), "frames per s");
  assert.equal(labelFromKey("n_out_of_memory"), "out of memory (count)");
  assert.equal(labelFromKey("_s"), " s", "a bare suffix is not stripped");
});

test("deltas and relative change", () => {
  assert.equal(formatDelta("duration_s", 0.5), "+500 ms");
  assert.equal(formatDelta("peak_bytes", -(1024 ** 2)), "-1.0 MiB");
  assert.equal(formatDelta("duration_s", 0), "±0");
  assert.equal(formatDelta("duration_s", null), "–");
  assert.equal(relativeChange(2, 3), 50);
  assert.equal(relativeChange(0, 3), null);
});

test("time of day today, with the date otherwise", () => {
  const now = new Date(2025, 5, 1, 12, 0, 0).getTime();
  assert.equal(formatTime(new Date(2025, 5, 1, 9, 5, 7).getTime() / 1000, now), "09:05:07");
  assert.equal(formatTime(new Date(2025, 4, 31, 23, 0, 0).getTime() / 1000, now), "2025-05-31 23:00:00");
});

test("clip and safe file names", () => {
  assert.equal(clip("abcdef", 4), "abc…");
  assert.equal(clip(null, 4), "");
  assert.equal(safeFileName("../../etc/passwd"), "_.._etc_passwd");
  assert.equal(safeFileName('<img src=x onerror="a">'), "_img_src_x_onerror_a_");
  assert.equal(safeFileName(""), "report");
});

test("byte labels say size unless the name says what it measures", () => {
  assert.equal(labelFromKey("latent_bytes"), "latent size");
  assert.equal(labelFromKey("total_size_bytes"), "total size");
  assert.equal(labelFromKey("peak_gpu_allocated_bytes"), "peak gpu allocated");
  assert.equal(labelFromKey("rss_change_bytes"), "rss change");
});

test("the panel rounds a rate, a ratio and a list's numbers as the node's text does (four significant digits)", () => {
  assert.equal(formatValue("frames_per_s", 0.037853), "0.03785/s");
  assert.equal(formatValue("overhead_ratio", 2.0594), "2.059×");
  assert.equal(formatValue("values", [0.929183, 1024, null]), "[0.9292, 1024, null]");
});

import { test } from "node:test";
import assert from "node:assert/strict";
import { freedMessage, readoutParts } from "../../web/lib/topbar_readout.mjs";

const GiB = 1024 ** 3;
const point = (/** @type {any} */ extra = {}) => ({ t: 1, ramUsed: 2 * GiB, ramTotal: 16 * GiB, rss: GiB, cpu: null, gpus: [], node: null, promptId: null, ...extra });

test("the readout: RAM, then VRAM and GPU use where a GPU reports, then the node and the progress", () => {
  assert.deepEqual(readoutParts(null, null), [["live", "waiting for samples"]]);
  assert.deepEqual(readoutParts(point(), null), [["RAM", "2.0 GiB / 16.0 GiB"], ["", "idle"]]);
  const busy = point({
    gpus: [{ device: "cuda:0", allocated: 3 * GiB, reserved: 4 * GiB, util: 87, total: 80 * GiB }],
    node: { id: "7", label: "KSampler" },
  });
  const parts = readoutParts(busy, { fraction: 0.456, basisS: 10, basisPromptId: "p" });
  assert.deepEqual(parts.map((p) => p[0]), ["RAM", "VRAM", "GPU", "running", ""]);
  assert.match(parts[1][1], /3\.0 GiB \(reserved 4\.0 GiB\)/);
  assert.equal(parts[3][1], "#7 KSampler");
  assert.equal(parts[4][1], "~46 % of last run");
  // dynamic VRAM: the process's whole device memory beside torch's, which misses its weights
  const dynamic = point({ gpus: [{ device: "cuda:0", allocated: 1 * GiB, reserved: 1 * GiB, util: null, total: null, process: 9 * GiB, dynamic: 7 * GiB }] });
  assert.deepEqual(readoutParts(dynamic, null).slice(1, 3), [["VRAM", "1.0 GiB"], ["device", "9.0 GiB (dynamic 7.0 GiB)"]]);
});

test("free memory says what came back, and says so when nothing did", () => {
  const stats = (/** @type {number} */ ram, /** @type {number} */ vram, type = "cuda") => ({ system: { ram_free: ram }, devices: [{ type, vram_free: vram }] });
  assert.equal(freedMessage(stats(1 * GiB, 2 * GiB), stats(3 * GiB, 6 * GiB)), "Models unloaded; freed 2.0 GiB of RAM and 4.0 GiB of VRAM.");
  assert.equal(freedMessage(stats(1 * GiB, 1 * GiB, "cpu"), stats(2 * GiB, 2 * GiB, "cpu")), "Models unloaded; freed 1.0 GiB of RAM.");
  assert.match(freedMessage(stats(2 * GiB, 1), stats(1 * GiB, 1)), /no memory came back/);
  assert.match(freedMessage(null, null), /no memory came back/);
});

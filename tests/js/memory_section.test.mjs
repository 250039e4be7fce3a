// The shared "Memory" section of a step card (details.memory from monitors.engine.span.memory_picture).
import assert from "node:assert/strict";
import { test } from "node:test";
import { compactBytes, designedCard, gpuNoteOfRun, memoryBlock, memoryScopeLine } from "../../web/lib/step_cards.mjs";
import { MEMORY_ROWS } from "../../web/lib/vocabulary.generated.mjs";

const MiB = 1024 ** 2;
const GiB = 1024 ** 3;

/** @param {number | null} baseline @param {number | null} end @param {number | null} peak @param {number | null} at */
const fig = (baseline, end, peak, at) => ({
  baseline, end, change: baseline === null || end === null ? null : end - baseline, change_pct: null, peak, peak_at_s: at,
});

const picture = {
  duration_s: 1.5,
  start_unix_s: 1000,
  peak_rss_method: "kernel_hwm",
  process_rss_bytes: fig(512 * MiB, 768 * MiB, GiB, 0.42),
  system_ram: {
    used_bytes: fig(null, null, null, null),
    available_bytes: { baseline: null, end: null, change: null, change_pct: null, low: null, low_at_s: null },
    used_pct: fig(null, null, null, null),
  },
  gpus: [{
    device: "cuda:0",
    allocated_bytes: fig(GiB, 2 * GiB, 3 * GiB, 1.25),
    reserved_bytes: fig(2 * GiB, 2 * GiB, 4 * GiB, 1.3),
    nvml_used_bytes: fig(null, null, null, null),
    utilization_pct: fig(null, null, null, null),
  }],
  unknown_reasons: { system_ram: "not read by this span (light detail)", gpu_nvml: "NVML not available" },
};

const loraStep = {
  kind: "lora",
  node_id: "12",
  summary: {},
  details: {
    memory: picture,
    memory_unknown_reason: null,
    memory_scope: { upstream_node_ids: ["10", "11", "4"], measured_node_ids: ["10", "11"], not_run_node_ids: ["4"] },
  },
};

test("a step with a memory picture gets one Memory section: start, end, change, peak @ time per row", () => {
  const block = memoryBlock(loraStep, (id) => ({ 10: "LoraLoader", 11: "LoraLoader", 4: "CheckpointLoaderSimple" })[id]);
  assert.ok(block);
  assert.equal(block.title, "Memory over 1.50 s");
  assert.deepEqual(block.rows.map((r) => r.label), ["process RSS", "RAM used", "RAM available", "cuda:0 allocated", "cuda:0 reserved", "cuda:0 NVML used"]);
  const rss = block.rows[0];
  assert.deepEqual(rss.cells.map((c) => c.text), ["512 MiB", "768 MiB", "+256 MiB", "1.0 GiB"]);
  assert.equal(rss.cells[0].title, "536,870,912 bytes");
  assert.equal(rss.cells[3].sub, "@ 420 ms");
  assert.deepEqual(rss.bar, { from: 0.5, to: 1 });
  assert.equal(block.rows[3].cells[3].sub, "@ 1.25 s");
  assert.equal(block.scope, "measured: LoraLoader #10, #11 · not run (cached): CheckpointLoaderSimple #4");
  // the card places it after the kind's own sections
  const card = designedCard(loraStep);
  assert.equal(card.sections.at(-1)?.type, "memory");
});

test("unknown figures read n/a with the reason as their title", () => {
  const block = memoryBlock(loraStep);
  assert.ok(block);
  const ram = block.rows.find((r) => r.label === "RAM used");
  assert.ok(ram);
  assert.deepEqual(ram.cells.map((c) => c.text), ["n/a", "n/a", "n/a", "n/a"]);
  assert.equal(ram.cells[0].title, "not read by this span (light detail)");
  assert.equal(ram.bar, null);
  const nvml = block.rows.find((r) => r.label === "cuda:0 NVML used");
  assert.equal(nvml?.cells[1].title, "NVML not available");
  // without a class lookup the scope names the node ids
  assert.equal(block.scope, "measured: #10, #11 · not run (cached): #4");
});

test("available RAM shows its low point, without a bar", () => {
  const step = { ...loraStep, details: { ...loraStep.details, memory: { ...picture, system_ram: {
    ...picture.system_ram, available_bytes: { baseline: 8 * GiB, end: 7 * GiB, change: -GiB, change_pct: -12.5, low: 6 * GiB, low_at_s: 0.2 },
  } } } };
  const block = memoryBlock(step);
  const available = block?.rows.find((r) => r.label === "RAM available");
  assert.deepEqual(available?.cells.map((c) => c.text), ["8.0 GiB", "7.0 GiB", "-1.0 GiB", "6.0 GiB"]);
  assert.equal(available?.cells[3].title, "lowest during the step");
  assert.equal(available?.cells[3].sub, "low @ 200 ms");
  assert.equal(available?.bar, null);
});

test("no picture: the section says why, with the scope", () => {
  const step = { kind: "models", node_id: "5", summary: {}, details: {
    memory: null, memory_unknown_reason: "upstream nodes cached: nothing ran",
    memory_scope: { upstream_node_ids: ["4"], measured_node_ids: [], not_run_node_ids: ["4"] },
  } };
  const block = memoryBlock(step);
  assert.deepEqual(block && { unknown: block.unknown, rows: block.rows, scope: block.scope },
    { unknown: "upstream nodes cached: nothing ran", rows: [], scope: "not run (cached): #4" });
});

test("steps without a memory field get no section; a CPU-only picture has no GPU rows and says so", () => {
  assert.equal(memoryBlock({ kind: "latent", node_id: "1", summary: {}, details: {} }), null);
  assert.equal(designedCard({ kind: "latent", node_id: "1", summary: {}, details: {} }).sections.some((b) => b.type === "memory"), false);
  const block = memoryBlock({ kind: "vae_encode", node_id: "2", summary: {}, details: {
    memory: { ...picture, gpus: [], unknown_reasons: { gpus: "no GPU seen by torch or NVML" } },
  } });
  assert.deepEqual(block?.rows.map((r) => r.label), ["process RSS", "RAM used", "RAM available"]);
  assert.equal(block?.note, undefined, "said once per run, not on every card");
  assert.equal(gpuNoteOfRun({ steps: [{ kind: "latent", node_id: "1", details: {} }, { kind: "vae_encode", node_id: "2", details: { memory: { unknown_reasons: { gpus: "no GPU seen by torch or NVML" } } } }] }),
    "no GPU seen by torch or NVML");
  assert.equal(block?.scope, null);
});

test("the rows come from the generated vocabulary", () => {
  assert.deepEqual(MEMORY_ROWS.map((r) => r.field), ["process_rss_bytes", "used_bytes", "available_bytes", "allocated_bytes", "reserved_bytes", "nvml_used_bytes"]);
  assert.equal(memoryScopeLine({}), null);
  assert.deepEqual([compactBytes(920.2 * 1024 ** 2), compactBytes(20.8 * GiB), compactBytes(-123.4 * MiB), compactBytes(99.5 * MiB)],
    ["920 MiB", "20.8 GiB", "-123 MiB", "99.5 MiB"]);
});

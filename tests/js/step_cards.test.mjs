import assert from "node:assert/strict";
import { test } from "node:test";
import { blockBars, designedCard, groupKeysByBlock } from "../../web/lib/step_cards.mjs";
import { nodeRows, problems, statusTone } from "../../web/lib/report_view.mjs";
import { KEYS } from "../../web/lib/vocabulary.generated.mjs";
import { makeReport } from "./report_view.test.mjs";

const L = KEYS.lora;
const C = KEYS.conditioning;
const V = KEYS.vae_encode;
const T = KEYS.tensor_compare;

/** Blocks of a card, flattened to their text, for assertions on what a person reads. @param {any[]} blocks */
function text(blocks) {
  return JSON.stringify(blocks);
}

const loraStep = {
  kind: "lora",
  node_id: "3",
  summary: { [L.success]: true, [L.n_loras]: 1, [L.n_unmatched_keys]: 3, [L.n_matched_keys]: 6, [L.n_file_keys]: 9, [L.model_relative_change_ratio]: 0.66, [L.clip_relative_change_ratio]: null },
  details: {
    loaders: [{
      node_id: "2", lora_name: "detail.safetensors", strength_model: 0.8, strength_clip: 0, has_clip_input: false, skipped: false,
      file: { name: "detail.safetensors", exists: true, size_bytes: 7092, n_tensors: 9, format: "safetensors", network: {} },
      coverage: { computed: true, n_file_keys: 9, n_matched_keys: 6, n_unmatched_keys: 3, matched_pct: 66.7, unmatched_truncated: false,
        unmatched_keys: ["lora_unet_blocks_9_self_attn_q.alpha", "lora_unet_blocks_9_self_attn_q.lora_down.weight", "lora_unet_blocks_9_self_attn_q.lora_up.weight"] },
      model_hop_index: 0,
    }],
    model: {
      analysed: true,
      hops: [{ totals: { ranks: [2, 2], alphas: [2.0], n_keys: 2, n_not_applied: 0, relative_change: 0.66 },
        by_block: { "diffusion_model.blocks.0": { relative_change: 0.7 }, "diffusion_model.blocks.1": { relative_change: 0.35 } } }],
      overall: { weights: [{ key: "diffusion_model.blocks.0.self_attn.q.weight", relative_change: 0.7, applied: true }] },
    },
  },
  findings: [{ level: "warning", message: "3 of 9 keys unmatched" }],
};

test("a LoRA card: one table per LoRA with strength, rank, alpha, applied, the unmatched key names by block and per-block bars", () => {
  const card = designedCard(loraStep);
  const table = card.sections.find((b) => b.type === "table");
  assert.ok(table && table.type === "table");
  assert.match(table.title ?? "", /detail\.safetensors · node #2/);
  const rows = Object.fromEntries(table.rows.map((r) => [r.cells[0], r.cells[1]]));
  assert.equal(rows["Strength model / clip"], "0.8 / –");
  assert.equal(rows.Rank, "2");
  assert.equal(rows.Alpha, "2");
  // a lone LoRA: applied, matched keys and patched weights are the headline's, said once
  assert.deepEqual(Object.keys(rows).filter((k) => ["Applied", "Matched keys", "Unmatched keys", "Patched weights", "Weight change"].includes(k)), []);
  const two = designedCard({ ...loraStep, details: { ...loraStep.details, loaders: [loraStep.details.loaders[0], { ...loraStep.details.loaders[0], node_id: "5" }] } });
  const first = Object.fromEntries(/** @type {any} */ (two.sections.find((b) => b.type === "table")).rows.map((/** @type {any} */ r) => [r.cells[0], r.cells[1]]));
  assert.equal(first["Matched keys"], "6 of 9 (67 %)", "with two LoRAs each table has its own");
  const groups = card.sections.find((b) => b.type === "groups");
  assert.ok(groups && groups.type === "groups");
  assert.deepEqual(groups.groups, [{ label: "blocks 9", items: ["self_attn_q (alpha, lora_down.weight, lora_up.weight)"] }]);
  const bars = card.sections.find((b) => b.type === "bars");
  assert.ok(bars && bars.type === "bars");
  assert.deepEqual(bars.items.map((b) => [b.label, b.fraction, b.text]), [["blocks.0", 1, "70.0 %"], ["blocks.1", 0.5, "35.0 %"]]);
  assert.deepEqual(card.headline.map((f) => f.label).slice(0, 2), ["applied", "LoRAs"], "headline in the declared order");
  assert.ok(!card.headline.some((f) => f.value === "–"), "unknown figures are left out of the headline");
  assert.doesNotMatch(text(card.more), /"\{/, "details are figures and tables, not JSON");
});

test("key grouping: blocks in numeric order, keys without a block under 'other'", () => {
  const groups = groupKeysByBlock(["lora_unet_blocks_10_ffn.alpha", "lora_unet_blocks_2_ffn.alpha", "lora_te_text_projection.weight"]);
  assert.deepEqual(groups.map((g) => g.label), ["blocks 2", "blocks 10", "other"]);
});

test("block bars fall back to change norms and say how many blocks are hidden", () => {
  const bars = blockBars({ a: { delta_norm: 2 }, b: { delta_norm: 1 }, c: { delta_norm: 0.5 } }, 2);
  assert.equal(bars.measure, "change norm");
  assert.equal(bars.hidden, 1);
  assert.deepEqual(bars.items.map((b) => b.fraction), [1, 0.5]);
});

test("a conditioning card puts positive and negative side by side with the prompt text", () => {
  const step = {
    kind: "conditioning",
    node_id: "15",
    summary: { [C.family]: "SD1.x", [C.positive_n_tokens]: 77, [C.negative_n_tokens]: 77, [C.positive_encode_s]: 0.5, [C.negative_encode_s]: null },
    details: {
      positive: { connected: true, encoders: [{ texts: [{ text: "日本の猫 <b>", text_truncated: false }] }], entries: [{ index: 0, shape: [1, 77, 768], min: -1, max: 1, mean: 0, std: 1, n_nan: 0, n_inf: 0 }] },
      negative: { connected: false },
    },
  };
  const card = designedCard(step);
  const sides = card.sections.find((b) => b.type === "sides");
  assert.ok(sides && sides.type === "sides");
  assert.deepEqual(sides.sides.map((s) => [s.title, s.text]), [["Positive", "日本の猫 <b>"], ["Negative", null]]);
  assert.equal(sides.sides[1].note, "not connected");
  const table = card.sections.find((b) => b.type === "table");
  assert.ok(table && table.type === "table");
  assert.deepEqual(table.rows.find((r) => r.cells[0] === "Encode time")?.cells, ["Encode time", "500 ms", "–"]);
  assert.ok(!card.headline.some((f) => /positive/.test(f.label)), "per-side figures live in the side-by-side table, not twice");
});

test("a VAE card lists the attempts (strategy, outcome, time, peak) and the compression", () => {
  const step = {
    kind: "vae_encode",
    node_id: "11",
    summary: { [V.strategy_used]: "tiled", [V.spatial_compression_ratio]: 64, [V.temporal_compression_ratio]: 2.5, [V.frames_per_s]: 1.905 },
    details: {
      attempts: [
        { strategy: "direct", outcome: "out_of_memory", error_type: "OutOfMemoryError", duration_s: 0.2, peaks: { rss: { value: 1024 ** 3 } } },
        { strategy: "tiled", outcome: "ok", duration_s: 2.5, peaks: { rss: { value: 1024 ** 3 }, "cuda:0": { value: 512 * 1024 ** 2 } } },
      ],
    },
  };
  const card = designedCard(step);
  const attempts = card.sections.find((b) => b.type === "table");
  assert.ok(attempts && attempts.type === "table");
  assert.deepEqual(attempts.rows.map((r) => r.cells), [
    ["direct", "out_of_memory: OutOfMemoryError", "200 ms", "1.0 GiB RSS"],
    ["tiled", "ok", "2.50 s", "512.0 MiB GPU"],
  ]);
  assert.match(text(card.sections), /spatial compression.*64×/);
  assert.equal(card.headline.find((f) => f.label === "frames per second")?.value, "1.905", "four significant digits, as the node text (Python); a rate named 'per second' shows no second '/s'");
});

test("a compare card says the verdict once and has a row per tensor", () => {
  const verdict = "close: 2 tensors within rtol 1e-3";
  const step = {
    kind: "tensor_compare",
    node_id: "9",
    summary: { [T.status]: "close", [T.verdict]: verdict },
    details: { tensors: { "latent.samples": { max_abs_diff: 1e-5, relative_error: 2e-4, cosine_similarity: 0.99999, allclose: true, equal: false } } },
    findings: [{ level: "info", message: verdict }],
  };
  const card = designedCard(step);
  const all = JSON.stringify([card.headline, card.sections, card.findings, card.more]);
  assert.equal(all.split(verdict).length - 1, 1, "the verdict appears exactly once");
  const table = card.sections.find((b) => b.type === "table");
  assert.ok(table && table.type === "table");
  assert.deepEqual(table.rows[0].cells, ["latent.samples", "1.000e-5", "0.02 %", "1", "yes"]);
  // one precision per figure: a tensor's row reads as the headline reads the same value
  const both = designedCard({ ...step, summary: { ...step.summary, [T.max_relative_error_ratio]: 0.3708, [T.max_abs_diff]: 0.03785 },
    details: { tensors: { x: { max_abs_diff: 0.03785, relative_error: 0.3708, cosine_similarity: 0.929, allclose: false } } } });
  const headline = Object.fromEntries(both.headline.map((f) => [f.label, f.value]));
  const row = /** @type {any} */ (both.sections.find((b) => b.type === "table")).rows[0].cells;
  assert.ok(Object.values(headline).includes(row[1]) && Object.values(headline).includes(row[2]), JSON.stringify({ headline, row }));
});

test("a models card has one row per object", () => {
  const step = {
    kind: "models",
    node_id: "16",
    summary: {},
    details: {
      objects: { model: { module_class: "WAN21", device: "cpu", dtype: "float32", size_bytes: 4 * 1024 ** 2 }, vae: { module_class: "WanVAE", device: "cpu", dtype: "float32", size_bytes: 1024 ** 2 } },
      loaders: { model: { duration_s: 0.05 } },
    },
  };
  const table = designedCard(step).sections[0];
  assert.ok(table.type === "table");
  // four columns, two lines each, so it fits the 312 px sidebar
  assert.equal(table.columns.length, 4);
  assert.deepEqual(table.rows.map((r) => r.cells), [["model\nWAN21", "cpu\nfloat32", "4.0 MiB", "50 ms"], ["vae\nWanVAE", "cpu\nfloat32", "1.0 MiB", "–"]]);
});

test("a models card says which memory manager counted the resident bytes and how patches are applied", () => {
  const step = {
    kind: "models",
    node_id: "16",
    summary: {},
    details: {
      objects: {
        model: { module_class: "BaseModel", resident_bytes: 2 * 1024 ** 3, memory_manager: "dynamic", n_patches: 192, patch_application: "on_the_fly", load_device: "cuda:0", offload_device: "cpu" },
        vae: { module_class: "AutoencoderKL", resident_bytes: 1024 ** 2, memory_manager: "estimate", n_patches: 0, patch_application: "none" },
      },
    },
  };
  const card = designedCard(step);
  const placement = card.more.find((b) => b.type === "table");
  assert.ok(placement && placement.type === "table");
  assert.deepEqual(placement.rows.map((r) => r.cells.slice(2)), [["2.0 GiB\ndynamic", "192\non the fly"], ["1.0 MiB\nestimate", "0\nnone"]]);
  assert.match(String(card.sections[0].type === "table" && card.sections[0].rows[0].title), /dynamic memory manager.*192 patches \(on the fly\)/);
});

test("details of an unexpected shape still give a card, which says why its layout is missing", () => {
  const card = designedCard({ kind: "lora", node_id: "1", summary: { [L.success]: false }, details: { loaders: [null] } });
  assert.ok(card.headline.length);
  assert.equal(card.sections.length, 0);
  assert.match(card.monitorErrors.join(" "), /card layout not shown/);
});

test("a cancel is neutral, not an error; a failed node gets no slowest or most-memory badge", () => {
  assert.equal(statusTone("interrupted"), "neutral");
  const report = makeReport({ status: "interrupted", error: { node_id: "2", exception_type: "interrupted" } });
  report.nodes[1].status = "interrupted";
  const items = problems(report);
  assert.equal(items[0].level, "info");
  assert.match(items[0].message, /^interrupted while node #2/);
  const failed = makeReport();
  failed.nodes[0].status = "error";
  failed.nodes[0].duration_s = 9;
  const rows = nodeRows(failed);
  assert.equal(rows[0].slowest || rows[0].hungriest, false, "a node that failed is no record holder");
  assert.equal(rows[1].slowest, false, "the failed node took longest: no finished node is the run's slowest");
});

test("no 'most memory' badge when no finished node added memory", () => {
  const report = makeReport();
  for (const n of report.nodes) n.peak_rss_above_start_bytes = 0;
  assert.equal(nodeRows(report).some((r) => r.hungriest), false);
});

test("the VAE's compression reads per side with the area ratio in the tooltip, and frames in -> out", async () => {
  const { compressionFigures } = await import("../../web/lib/step_cards.mjs");
  const V = KEYS.vae_encode;
  const items = compressionFigures({ [V.spatial_compression_ratio]: 64, [V.temporal_compression_ratio]: 3, [V.input_frames]: 9, [V.latent_frames]: 3 });
  assert.equal(items[0].value, "8x");
  assert.match(String(items[0].title), /area ratio 64/);
  assert.equal(items[1].value, "9 → 3");
  assert.match(String(items[1].title), /temporal compression 3/);
});

test("a lone LoRA loader's table does not repeat the headline's change and unmatched keys", () => {
  const step = { kind: "lora", node_id: "3", summary: {}, details: { loaders: [{ node_id: "2", lora_name: "x.safetensors",
    coverage: { computed: true, n_matched_keys: 4, n_file_keys: 7, n_unmatched_keys: 3, unmatched_keys: ["lora_unet_blocks_9_q.alpha"] } }] },
    findings: [{ level: "warning", message: "model: 3 of 7 keys unmatched, ComfyUI ignores them (their names are in the report, by block)" }] };
  const card = designedCard(step);
  const table = /** @type {any} */ (card.sections.find((b) => b.type === "table"));
  assert.equal(table.rows.some((/** @type {any} */ r) => r.cells[0] === "Unmatched keys"), false);
  assert.equal(card.findings[0].message, "model: 3 of 7 keys unmatched, ComfyUI ignores them (listed below, by block)");
});

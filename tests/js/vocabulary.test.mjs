import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { formatValue, labelFromKey } from "../../web/lib/format.mjs";
import { stepCard } from "../../web/lib/report_view.mjs";
import { BADGES, STEP_KINDS, kindInfo, upgradeReport } from "../../web/lib/step_kinds.mjs";
import { KEYS, SCHEMA_VERSION, VOCABULARY } from "../../web/lib/vocabulary.generated.mjs";

const V1 = JSON.parse(readFileSync(new URL("../fixtures/run_report_v1.json", import.meta.url), "utf8"));

test("every declared kind is a panel kind with its title and headline figures, profiling included", () => {
  assert.deepEqual(Object.keys(STEP_KINDS), Object.keys(VOCABULARY));
  assert.ok("profiling" in STEP_KINDS);
  for (const [kind, info] of Object.entries(VOCABULARY)) {
    assert.equal(kindInfo(kind).title, info.title);
    assert.deepEqual(kindInfo(kind).first, info.headline);
  }
});

test("badges are only for declared kinds, and a declared kind without badges is a panel kind all the same", () => {
  for (const kind of Object.keys(BADGES)) assert.ok(kind in VOCABULARY, kind);
  const plain = Object.keys(VOCABULARY).filter((kind) => !(kind in BADGES));
  for (const kind of plain) assert.deepEqual(kindInfo(kind), { title: VOCABULARY[kind].title, first: VOCABULARY[kind].headline });
  assert.equal(typeof kindInfo("lora").badges, "function");
});

test("labels and units of declared keys come from the vocabulary", () => {
  for (const [kind, info] of Object.entries(VOCABULARY)) {
    for (const [key, field] of Object.entries(info.fields)) {
      assert.equal(labelFromKey(key, kind), field.label, `${kind}.${key}`);
      assert.equal(KEYS[/** @type {keyof typeof KEYS} */ (kind)][key], key);
    }
  }
  assert.equal(formatValue(KEYS.lora.model_relative_change_ratio, 0.0123, "lora"), "1.23 %");
  assert.equal(formatValue(KEYS.vae_encode.spatial_compression_ratio, 64, "vae_encode"), "64×");
  assert.equal(formatValue(KEYS.lora.analysis_s, 0.05, "lora"), "50 ms");
  assert.equal(labelFromKey("n_things"), "things (count)", "undeclared keys keep the name-derived label");
});

test("a version 1 report reads in version 2 names, a version 2 report as it is", () => {
  const upgraded = upgradeReport(V1);
  assert.equal(upgraded.schema_version, SCHEMA_VERSION);
  assert.equal(V1.schema_version, 1, "the original is not changed");
  const byKind = Object.fromEntries(upgraded.steps.map((/** @type {any} */ s) => [s.kind, s.summary]));
  assert.equal(byKind.lora[KEYS.lora.model_relative_change_ratio], 0.0123);
  assert.equal(byKind.vae_encode[KEYS.vae_encode.spatial_compression_ratio], 64);
  assert.equal(byKind.latent[KEYS.latent.latent_type], "image");
  assert.equal(byKind.latent[KEYS.latent.n_channels], 4);
  assert.equal(byKind.tensor_compare[KEYS.tensor_compare.max_relative_error_ratio], 2e-6);
  assert.equal(upgradeReport(upgraded), upgraded);
  const latent = stepCard(upgraded.steps.find((/** @type {any} */ s) => s.kind === "latent"));
  assert.deepEqual(latent.badges.map((b) => b.text), ["image"]);
});

test("badges read the declared keys", () => {
  const lora = stepCard({ kind: "lora", node_id: "1", summary: { [KEYS.lora.success]: true, [KEYS.lora.n_unmatched_keys]: 3 } });
  assert.deepEqual(lora.badges.map((b) => [b.text, b.tone]), [["applied", "ok"], ["3 unmatched keys", "warn"]]);
  const profiling = stepCard({ kind: "profiling", node_id: null, summary: { [KEYS.profiling.slowest_stage]: "denoise" } });
  assert.equal(profiling.title, "Profiling");
  assert.deepEqual(profiling.badges.map((b) => b.text), ["slowest: denoise"]);
});

test("a version 3 report's VAE input rate reads in MiB per second, as the Python upgrade", () => {
  const v3 = { schema_version: 3, steps: [{ kind: "vae_encode", summary: { input_mb_per_s: 2.097152, frames_per_s: 3 } }] };
  const upgraded = upgradeReport(v3);
  assert.equal(upgraded.schema_version, SCHEMA_VERSION);
  const summary = /** @type {Record<string, unknown>} */ (upgraded.steps[0].summary);
  assert.ok(Math.abs(/** @type {number} */ (summary[KEYS.vae_encode.input_mib_per_s]) - 2) < 1e-9);
  assert.equal("input_mb_per_s" in summary, false);
  assert.equal(v3.steps[0].summary.input_mb_per_s, 2.097152, "the original is not changed");
});

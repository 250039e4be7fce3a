import assert from "node:assert/strict";
import { test } from "node:test";
import { detailColumn, detailInfo, detailLabel } from "../../web/lib/card_parts.mjs";
import { designedCard } from "../../web/lib/step_cards.mjs";
import { DETAILS, NODE_FIELDS } from "../../web/lib/vocabulary.generated.mjs";

test("a detail's label is its declaration's, capitalised; an undeclared path throws", () => {
  assert.equal(DETAILS.lora.fields.loaders.fields.file.fields.size_bytes.label, "file size");
  assert.equal(detailLabel("lora", "loaders.file.size_bytes"), "File size");
  assert.equal(detailInfo("vae_encode", "predictions.needed_bytes").unit, "bytes");
  assert.deepEqual(detailColumn("vae_encode", "attempts.duration_s", { num: true }),
    { label: "Time", title: "wall time of the attempt", num: true });
  assert.throws(() => detailLabel("lora", "loaders.file.size"), /lora declares no detail loaders\.file\.size/);
  assert.throws(() => detailLabel("models", "objectz"), /models declares no detail/);
  assert.equal(detailLabel("models", "objects"), "Objects"); // every kind declares its details
});

test("node rows are declared with their GPU peaks", () => {
  assert.equal(NODE_FIELDS.fields.duration_s.unit, "s");
  assert.equal(NODE_FIELDS.fields.gpu_peaks.fields?.peak_allocated_bytes.label, "GPU allocated peak");
});

test("the cards' row and column labels come from the declarations", () => {
  const vae = designedCard({ kind: "vae_encode", node_id: "5", summary: {}, findings: [], monitor_errors: [],
    details: { attempts: [{ strategy: "direct", outcome: "ok", duration_s: 1 }], predictions: { direct: { strategy: "direct", needed_bytes: 1, free_bytes: 2, fits: true } } } });
  const tables = vae.sections.concat(vae.more).filter((b) => b.type === "table");
  const labels = tables.flatMap((b) => (b.type === "table" ? b.columns.map((c) => c.label) : []));
  const declared = DETAILS.vae_encode.fields;
  for (const [group, key] of [["attempts", "strategy"], ["attempts", "outcome"], ["predictions", "needed_bytes"], ["predictions", "fits"]]) {
    const label = declared[group].fields?.[key].label ?? "";
    assert.ok(labels.includes(label.charAt(0).toUpperCase() + label.slice(1)), `${group}.${key}`);
  }
  assert.deepEqual(vae.monitorErrors, []);
});

// Step cards designed per kind: what a person reads at a glance. Each kind turns its summary and
// details into a few blocks (figures, tables, bars, text); a card shows the headline figures (the
// vocabulary's headline, known values only), its designed blocks, and one "details" with the
// remaining figures and tables in plain labels and units. The raw JSON is only a download.
// Pure functions (no DOM): Node's test runner covers them; run_views.mjs renders the blocks.
// Each kind's design lives in its own module (lora_card, conditioning_card, vae_card,
// tensor_cards, deep_profile_card; memory_card for the shared memory section); this one picks the
// design and assembles the card.
import { figure, known } from "./card_parts.mjs";
import { conditioningBlocks } from "./conditioning_card.mjs";
import { deepProfileBlocks } from "./deep_profile_card.mjs";
import { loraBlocks } from "./lora_card.mjs";
import { memoryBlock } from "./memory_card.mjs";
import { stepCard } from "./report_view.mjs";
import { compareBlocks, dumpBlocks, latentBlocks, modelsBlocks } from "./tensor_cards.mjs";
import { vaeBlocks } from "./vae_card.mjs";
import { KEYS, VOCABULARY } from "./vocabulary.generated.mjs";

// The designs' own helpers, for the modules and tests that read them through this one.
export { blockBars, groupKeysByBlock } from "./lora_card.mjs";
export { compressionFigures } from "./vae_card.mjs";
export { compactBytes, gpuNoteOfRun, memoryBlock, memoryScopeLine } from "./memory_card.mjs";

/**
 * @typedef {import("./card_parts.mjs").Figure} Figure
 * @typedef {import("./card_parts.mjs").Block} Block
 * @typedef {import("./card_parts.mjs").Design} Design
 * @typedef {import("./card_parts.mjs").MemoryBlock} MemoryBlock
 * @typedef {import("./card_parts.mjs").MemoryCell} MemoryCell
 * @typedef {import("./card_parts.mjs").StepReport} StepReport
 */

/** @type {Record<string, (step: StepReport) => Design>} */
const DESIGNS = {
  lora: loraBlocks,
  conditioning: conditioningBlocks,
  vae_encode: vaeBlocks,
  models: modelsBlocks,
  latent: latentBlocks,
  tensor_dump: dumpBlocks,
  tensor_compare: compareBlocks,
  deep_profile: deepProfileBlocks,
};

/** Summary keys a kind's designed blocks already show, so the headline and details skip them. */
const SHOWN_IN_BLOCKS = /** @type {Record<string, string[]>} */ ({
  // each object's class and size are in the Objects table
  models: [KEYS.models.model_class, KEYS.models.model_size_bytes, KEYS.models.clip_class, KEYS.models.clip_size_bytes, KEYS.models.vae_class, KEYS.models.vae_size_bytes],
  conditioning: Object.entries(KEYS.conditioning).filter(([k]) => /^(positive|negative)_/.test(k)).map(([, v]) => v),
  tensor_compare: [KEYS.tensor_compare.verdict],
  vae_encode: [KEYS.vae_encode.spatial_compression_ratio, KEYS.vae_encode.temporal_compression_ratio, KEYS.vae_encode.input_frames, KEYS.vae_encode.latent_frames, KEYS.vae_encode.input_bytes],
});

/**
 * Everything a designed card shows: the base card (title, badges, findings), the headline figures
 * (declared headline order, known values), the kind's blocks, and the details blocks.
 * @param {StepReport} step
 * @param {{nodeClass?: (id: string) => string | null | undefined}} [context] nodeClass: a node id's class, for the memory scope line
 */
export function designedCard(step, context = {}) {
  const base = stepCard(step);
  const summary = base.summary;
  const skip = new Set(SHOWN_IN_BLOCKS[step.kind] ?? []);
  const all = [...base.keyFigures, ...base.moreFigures];
  const declaredHeadline = VOCABULARY[step.kind]?.headline;
  const isHeadline = declaredHeadline ? (/** @type {string} */ k) => declaredHeadline.includes(k) : (/** @type {string} */ k) => base.keyFigures.includes(k);
  const headlineKeys = all.filter((k) => isHeadline(k) && !skip.has(k) && known(summary[k]));
  const restKeys = all.filter((k) => !headlineKeys.includes(k) && !skip.has(k) && known(summary[k]));
  let designed = { sections: /** @type {Block[]} */ ([]), more: /** @type {Block[]} */ ([]) };
  const monitorErrors = [...base.monitorErrors];
  try {
    designed = (DESIGNS[step.kind] ?? (() => designed))(step);
  } catch (err) {
    // Details of an unexpected shape still give a card with its figures, and the card says why.
    monitorErrors.push(`card layout not shown: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
  }
  let memory = null;
  try {
    memory = memoryBlock(step, context.nodeClass);
  } catch (err) {
    monitorErrors.push(`memory section not shown: ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
  }
  const verdict = step.kind === "tensor_compare" ? summary[KEYS.tensor_compare.verdict] : undefined;
  /** @type {Block[]} */
  const more = [];
  if (restKeys.length) more.push({ type: "figures", title: "Other figures", items: restKeys.map((k) => figure(step.kind, summary, k)) });
  more.push(...designed.more);
  // A finding pointing to the key names the card lists right below says so no more.
  const listsKeys = designed.sections.some((b) => b.type === "groups");
  const findings = base.findings
    .filter((f) => verdict === undefined || f.message !== verdict) // the verdict is the card's headline text
    .map((f) => (listsKeys ? { ...f, message: f.message.replace(/ \(their names are in the report, by block\)/, " (listed below, by block)") } : f));
  return {
    ...base,
    monitorErrors,
    findings,
    headline: headlineKeys.map((k) => figure(step.kind, summary, k)),
    sections: [...designed.sections, ...(memory ? [memory] : [])],
    more,
  };
}

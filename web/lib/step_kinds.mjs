// What to show first for each known step kind, and its badges. The kinds, their titles and headline
// figures come from the generated vocabulary (the registered stages, monitors/vocabulary/stages.py),
// so a new stage needs no line here; a kind with badges adds them to BADGES, which reads figures
// through the vocabulary's KEYS, so no summary key is spelled here. Unknown kinds and keys still
// render (all summary keys, in report order): this table only orders and decorates.
import { formatValue } from "./format.mjs";
import { KEYS, SCHEMA_VERSION, VOCABULARY } from "./vocabulary.generated.mjs";

/** @typedef {"ok" | "info" | "warn" | "error"} Tone */
/** @typedef {{text: string, tone: Tone, title?: string}} Badge */
/** @typedef {{title: string, first: string[], badges?: (summary: Record<string, unknown>) => Badge[]}} KindInfo */

/** Strategy of the VAE chain -> tone; `dummy` means all-zero latents and is always red. */
export const VAE_STRATEGY_TONES = /** @type {Record<string, Tone>} */ ({
  direct: "ok",
  tiled: "info",
  cpu: "warn",
  dummy: "error",
});

const L = KEYS.lora;
const C = KEYS.conditioning;
const V = KEYS.vae_encode;
const T = KEYS.latent;
const P = KEYS.profiling;

/** @type {Partial<Record<string, (summary: Record<string, unknown>) => Badge[]>>} */
export const BADGES = {
  lora: (s) => {
    /** @type {Badge[]} */
    const badges = [];
    if (s[L.success] === true) badges.push({ text: "applied", tone: "ok" });
    if (s[L.success] === false) badges.push({ text: "problem", tone: "error" });
    const unmatched = s[L.n_unmatched_keys];
    if (typeof unmatched === "number" && unmatched > 0) {
      badges.push({ text: `${unmatched} unmatched keys`, tone: "warn" });
    }
    return badges;
  },
  conditioning: (s) => {
    /** @type {Badge[]} */
    const badges = [];
    const family = s[C.family];
    if (typeof family === "string") badges.push({ text: family, tone: "info" });
    if (s[C.hidden_size_match] === false) badges.push({ text: "hidden size mismatch", tone: "error" });
    for (const [side, key] of [["positive", C.positive_n_nan], ["negative", C.negative_n_nan]]) {
      const nan = s[key];
      if (typeof nan === "number" && nan > 0) badges.push({ text: `NaN in ${side}`, tone: "error" });
    }
    return badges;
  },
  vae_encode: (s) => {
    /** @type {Badge[]} */
    const badges = [];
    const used = s[V.strategy_used];
    const requested = s[V.strategy_requested];
    if (typeof used === "string") {
      const dummy = used === "dummy" || s[V.dummy_used] === true;
      badges.push({
        text: dummy ? "dummy latent (zeros)" : used,
        tone: dummy ? "error" : (VAE_STRATEGY_TONES[used] ?? "info"),
        title: `strategy used: ${used}${typeof requested === "string" ? ` (requested ${requested})` : ""}`,
      });
    } else if (s[V.error]) {
      badges.push({ text: "failed", tone: "error" });
    }
    const oom = s[V.n_out_of_memory];
    if (typeof oom === "number" && oom > 0) {
      badges.push({ text: `${oom} OOM`, tone: "warn" });
    }
    return badges;
  },
  latent: (s) => {
    /** @type {Badge[]} */
    const badges = [];
    const type = s[T.latent_type];
    if (typeof type === "string") badges.push({ text: type, tone: "info" });
    const bad = (Number(s[T.n_nan]) || 0) + (Number(s[T.n_inf]) || 0);
    if (bad > 0) badges.push({ text: "NaN/Inf", tone: "error" });
    return badges;
  },
  tensor_dump: (s) => (s[KEYS.tensor_dump.written] === false ? [{ text: "not written", tone: "error" }] : []),
  tensor_compare: (s) => {
    const tone = /** @type {Record<string, Tone>} */ ({ identical: "ok", close: "ok", different: "warn" });
    const status = s[KEYS.tensor_compare.status];
    return typeof status === "string" ? [{ text: status, tone: tone[status] ?? "error" }] : [];
  },
  profiling: (s) => {
    const stage = s[P.slowest_stage];
    return typeof stage === "string" ? [{ text: `slowest: ${stage}`, tone: "info" }] : [];
  },
  deep_profile: (s) => {
    const ratio = s[KEYS.deep_profile.overhead_ratio];
    // the card's own rounding of the figure (formatValue), so the badge and the table agree
    return typeof ratio === "number" ? [{ text: `overhead ${formatValue(KEYS.deep_profile.overhead_ratio, ratio, "deep_profile")}`, tone: "info", title: "wall time against the workflow's last plain run" }] : [];
  },
};

/**
 * Every declared kind (the generated vocabulary's, in the order of the registered stages): its
 * title and headline figures, and its badges where BADGES has them.
 * @type {Record<string, KindInfo>}
 */
export const STEP_KINDS = Object.fromEntries(
  Object.entries(VOCABULARY).map(([kind, info]) => {
    /** @type {KindInfo} */
    const declared = { title: info.title, first: info.headline };
    const badges = BADGES[kind];
    return [kind, badges ? { ...declared, badges } : declared];
  }),
);

/**
 * The kind's info; a made-up one for kinds this panel does not know yet.
 * @param {string} kind
 * @returns {KindInfo}
 */
export function kindInfo(kind) {
  return STEP_KINDS[kind] ?? { title: String(kind || "step").replaceAll("_", " "), first: [] };
}

const MB_PER_MIB = 1024 ** 2 / 1e6;

/**
 * A report of schema_version 1 in version 2 names (the declared renames), and of versions up to 3
 * with the VAE step's input rate in MiB (monitors/vocabulary/upgrade.py); others as they are.
 * @template {{schema_version?: number, steps?: Array<{kind: string, summary?: Record<string, unknown>}>}} R
 * @param {R} report
 * @returns {R}
 */
export function upgradeReport(report) {
  const version = report?.schema_version;
  if (!report || typeof version !== "number" || version > 3) return report;
  const steps = (report.steps ?? []).map((step) => {
    const renames = version === 1 ? VOCABULARY[step.kind]?.v1Renames ?? {} : {};
    const summary = Object.fromEntries(Object.entries(step.summary ?? {}).map(([k, v]) => [renames[k] ?? k, v]));
    if (step.kind === "vae_encode" && "input_mb_per_s" in summary) {
      const rate = summary.input_mb_per_s;
      delete summary.input_mb_per_s;
      summary.input_mib_per_s = typeof rate === "number" ? rate / MB_PER_MIB : rate;
    }
    return { ...step, summary };
  });
  return { ...report, steps, schema_version: SCHEMA_VERSION };
}

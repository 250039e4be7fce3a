// What to show first for each known step kind, and its badges. Unknown kinds and keys still
// render (all summary keys, in report order): this table only orders and decorates.

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

/** @type {Record<string, KindInfo>} */
export const STEP_KINDS = {
  models: {
    title: "Models",
    first: ["n_objects", "total_size_bytes", "loaders_duration_s", "model_class", "model_size_bytes", "clip_class", "clip_size_bytes", "vae_class", "vae_size_bytes"],
  },
  lora: {
    title: "LoRA",
    first: ["success", "n_loras", "n_loras_skipped", "n_unmatched_keys", "n_matched_keys", "n_file_keys", "model_relative_change", "clip_relative_change", "model_n_patch_keys_added", "analysis_s"],
    badges: (s) => {
      /** @type {Badge[]} */
      const badges = [];
      if (s.success === true) badges.push({ text: "applied", tone: "ok" });
      if (s.success === false) badges.push({ text: "problem", tone: "error" });
      if (typeof s.n_unmatched_keys === "number" && s.n_unmatched_keys > 0) {
        badges.push({ text: `${s.n_unmatched_keys} unmatched keys`, tone: "warn" });
      }
      return badges;
    },
  },
  conditioning: {
    title: "Conditioning",
    first: ["family", "encoder_class", "positive_n_tokens", "positive_hidden_size", "positive_pooled_size", "negative_connected", "hidden_size_match", "positive_encode_s", "positive_n_nan"],
    badges: (s) => {
      /** @type {Badge[]} */
      const badges = [];
      if (typeof s.family === "string") badges.push({ text: s.family, tone: "info" });
      if (s.hidden_size_match === false) badges.push({ text: "hidden size mismatch", tone: "error" });
      for (const side of ["positive", "negative"]) {
        const nan = s[`${side}_n_nan`];
        if (typeof nan === "number" && nan > 0) badges.push({ text: `NaN in ${side}`, tone: "error" });
      }
      return badges;
    },
  },
  vae_encode: {
    title: "VAE encode",
    first: ["strategy_used", "strategy_requested", "duration_s", "latent_type", "latent_shape", "latent_dtype", "latent_bytes", "peak_rss_bytes", "peak_gpu_allocated_bytes", "peak_gpu_reserved_bytes", "n_attempts", "n_out_of_memory", "frames_per_s", "error"],
    badges: (s) => {
      /** @type {Badge[]} */
      const badges = [];
      const used = s.strategy_used;
      if (typeof used === "string") {
        const dummy = used === "dummy" || s.dummy_used === true;
        badges.push({
          text: dummy ? "dummy latent (zeros)" : used,
          tone: dummy ? "error" : (VAE_STRATEGY_TONES[used] ?? "info"),
          title: `strategy used: ${used}${typeof s.strategy_requested === "string" ? ` (requested ${s.strategy_requested})` : ""}`,
        });
      } else if (s.error) {
        badges.push({ text: "failed", tone: "error" });
      }
      if (typeof s.n_out_of_memory === "number" && s.n_out_of_memory > 0) {
        badges.push({ text: `${s.n_out_of_memory} OOM`, tone: "warn" });
      }
      return badges;
    },
  },
  latent: {
    title: "Latent",
    first: ["kind", "shape", "family", "channels", "n_frames", "dtype", "device", "size_bytes", "n_nan", "n_inf", "mean", "std", "has_noise_mask"],
    badges: (s) => {
      /** @type {Badge[]} */
      const badges = [];
      if (typeof s.kind === "string") badges.push({ text: s.kind, tone: "info" });
      const bad = (Number(s.n_nan) || 0) + (Number(s.n_inf) || 0);
      if (bad > 0) badges.push({ text: "NaN/Inf", tone: "error" });
      return badges;
    },
  },
  tensor_dump: {
    title: "Tensor dump",
    first: ["file_name", "written", "n_tensors", "tensor_bytes", "file_bytes", "write_s", "value_kinds", "encoder_family"],
    badges: (s) => (s.written === false ? [{ text: "not written", tone: "error" }] : []),
  },
  tensor_compare: {
    title: "Tensor compare",
    first: ["status", "verdict", "n_compared", "n_different", "n_incompatible", "max_abs_diff", "max_relative_error", "min_cosine_similarity", "dump_a", "dump_b"],
    badges: (s) => {
      const tone = /** @type {Record<string, Tone>} */ ({ identical: "ok", close: "ok", different: "warn" });
      return typeof s.status === "string" ? [{ text: s.status, tone: tone[s.status] ?? "error" }] : [];
    },
  },
};

/**
 * The kind's info; a made-up one for kinds this panel does not know yet.
 * @param {string} kind
 * @returns {KindInfo}
 */
export function kindInfo(kind) {
  return STEP_KINDS[kind] ?? { title: String(kind || "step").replaceAll("_", " "), first: [] };
}

// The deep profile in the panel: the "Deep profile" card's blocks (per node, wall time against
// device time as bars, then the top operations), the button that asks for a deep profile of the
// next prompt, and the marks that keep deep-profiled timings apart from plain runs (run list,
// compare). Labels and descriptions come from the generated vocabulary
// (monitors/deep_profile/summary.py). Pure functions but for DeepProfileToggle (DOM, fetch).
import { h } from "./dom.mjs";
import { MISSING, formatSeconds, formatValue, isNumber } from "./format.mjs";
import { DEEP_PROFILE_FIELDS } from "./vocabulary.generated.mjs";

export const DEEP_KIND = "deep_profile";
export const DEEP_ROUTE = "/pipeline_monitor/deep_profile";
const NODE = DEEP_PROFILE_FIELDS.node;
const OP = DEEP_PROFILE_FIELDS.topOp;
/** The node rows' keys, by property access (their names are declared once, in the vocabulary). */
const N = /** @type {Record<string, string>} */ (Object.fromEntries(Object.keys(NODE).map((k) => [k, k])));
const CARD_NODES = 6; // nodes the card shows (the slowest); Details has them all
const NODE_COLUMNS = [N.wall_s, N.host_op_time_s, N.device_time_s, N.gpu_busy_pct, N.n_syncs];
const REASONS = /** @type {Record<string, string>} */ ({ device_time_s: "device_time_unknown_reason", gpu_busy_pct: "gpu_busy_unknown_reason", n_syncs: "n_syncs_unknown_reason" });

/** @param {unknown} v @returns {any} */
const obj = (v) => (v && typeof v === "object" && !Array.isArray(v) ? v : {});
/** @param {unknown} v @returns {any[]} */
const arr = (v) => (Array.isArray(v) ? v : []);
/** @param {any} row */
const nodeLabel = (row) => `#${row.node_id} ${row.class_type ?? ""}`.trim();

/**
 * The card's blocks (see step_cards.mjs): bars of wall time against device time per node (host op
 * time where no CUDA device was profiled), the top ops per node, and the per-node figures.
 * @param {{details?: unknown}} step
 * @returns {{sections: import("./card_parts.mjs").Block[], more: import("./card_parts.mjs").Block[]}}
 */
export function deepProfileBlocks(step) {
  const details = obj(step.details);
  const rows = arr(details.nodes).filter((r) => r && typeof r === "object");
  const notes = Object.entries(obj(details.unknown_reasons)).map(([k, v]) => `${k}: ${v}`).join("; ");
  if (!rows.length) return { sections: [{ type: "text", title: "Per node", text: "No node was profiled.", note: notes || undefined }], more: [] };
  const cuda = rows.some((r) => isNumber(r.device_time_s));
  const second = cuda ? N.device_time_s : N.host_op_time_s;
  // The sidebar is narrow: the slowest nodes, in the order they ran; every node is in Details.
  const slowest = new Set([...rows].sort((a, b) => (b[N.wall_s] ?? 0) - (a[N.wall_s] ?? 0)).slice(0, CARD_NODES));
  const shown = rows.filter((r) => slowest.has(r));
  const left = rows.length - shown.length;
  const longest = Math.max(...shown.flatMap((r) => [r[N.wall_s], r[second]].filter(isNumber)), 0) || 1;
  /** @type {{label: string, fraction: number, text: string}[]} */
  const bars = [];
  // Two bars per node: the wall time under the node's name, then the device (or host op) time.
  for (const r of shown) {
    for (const key of [N.wall_s, second]) {
      const label = key === N.wall_s ? nodeLabel(r) : `↳ ${cuda ? "device" : "host ops"}`;
      if (isNumber(r[key])) bars.push({ label, fraction: r[key] / longest, text: formatSeconds(r[key]) });
    }
  }
  // One heading row per node, then its ops: four columns fit the 312 px sidebar.
  const topRows = shown.flatMap((r) => [
    { cells: [nodeLabel(r), "", formatSeconds(r[second]), ""], tone: "node", title: `${nodeLabel(r)}: ${NODE[second].label}` },
    ...arr(r.top_ops).map((op) => ({
      cells: [`  ${op.name}`, formatValue("n_calls", op.n_calls), formatSeconds(op.total_s), formatValue("share_pct", op.share_pct)],
      title: `${nodeLabel(r)}: ${op.name}`,
    })),
  ]);
  const by = rows[0].top_ops_by === "device" ? "device" : "host";
  const more = left > 0 ? `${left} more nodes in Details` : undefined;
  return {
    sections: [
      { type: "bars", title: `Wall time vs ${NODE[second].label} per node`, items: bars,
        note: [cuda ? "" : "no CUDA device was profiled: host op time instead of device time", more ?? ""].filter(Boolean).join("; ") || undefined },
      { type: "table", title: `Top ops per node (by ${by} time)`, cls: "pm-deep-ops",
        columns: [{ label: OP.name.label, title: OP.name.description }, { label: OP.n_calls.label, num: true, title: OP.n_calls.description },
          { label: OP.total_s.label, num: true, title: OP.total_s.description }, { label: OP.share_pct.label, num: true, title: OP.share_pct.description }],
        rows: topRows },
    ],
    more: [{ type: "table", title: "Per node", cls: "pm-deep-nodes",
      columns: [{ label: "Node" }, ...NODE_COLUMNS.map((k) => ({ label: NODE[k].label, num: true, title: NODE[k].description }))],
      rows: rows.map((r) => ({ cells: [nodeLabel(r), ...NODE_COLUMNS.map((k) => (r[k] === null || r[k] === undefined ? MISSING : formatValue(k, r[k])))],
        title: NODE_COLUMNS.map((k) => (REASONS[k] && r[REASONS[k]] ? `${NODE[k].label}: ${r[REASONS[k]]}` : "")).filter(Boolean).join("\n") || undefined })),
      note: notes || undefined }],
  };
}

/** Whether a run-list row (or a report) was deep-profiled. @param {{step_kinds?: string[], steps?: {kind: string}[]} | null | undefined} run */
export function isDeepProfiled(run) {
  if (!run) return false;
  if (Array.isArray(run.step_kinds)) return run.step_kinds.includes(DEEP_KIND);
  return arr(run.steps).some((s) => s && s.kind === DEEP_KIND);
}

/**
 * What a comparison says when only one of its runs was deep-profiled; null otherwise.
 * @param {any} base @param {any} candidate
 */
export function deepCompareNote(base, candidate) {
  const a = isDeepProfiled(base), b = isDeepProfiled(candidate);
  if (a === b) return a ? "Both runs were deep-profiled: their timings include the profiler's overhead." : null;
  return `Only the ${a ? "base" : "newer"} run was deep-profiled: its timings include the profiler's overhead, so the time figures below do not compare like with like.`;
}

/**
 * The "Deep-profile the next prompt" button: asks the server (one prompt, then it turns itself off)
 * or takes the request back; refresh() after a run finishes shows that it turned off.
 */
export class DeepProfileToggle {
  /** @param {{fetchApi: (route: string, init?: RequestInit) => Promise<Response>, toast: (severity: "success" | "info" | "warn" | "error", summary: string, detail?: string) => void}} host */
  constructor(host) {
    this.host = host;
    this.armed = false;
    /** @type {HTMLButtonElement | null} */
    this.button = null;
  }

  /** A new button for a freshly mounted panel. */
  element() {
    this.button = /** @type {HTMLButtonElement} */ (h("button", { class: "pm-button pm-deep-toggle", onclick: () => void this.set(!this.armed) }));
    this.render();
    void this.refresh();
    return this.button;
  }

  render() {
    if (!this.button) return;
    this.button.textContent = this.armed ? "Deep profile: armed" : "Deep-profile next prompt";
    this.button.title = this.armed
      ? "The next prompt runs under torch.profiler (per-node ops and kernels); click to cancel"
      : "Run the next prompt under torch.profiler: per-node top ops, host and device time (one prompt, then off)";
    this.button.dataset.armed = String(this.armed);
    this.button.setAttribute("aria-pressed", String(this.armed));
    this.button.classList.toggle("pm-deep-armed", this.armed);
  }

  /** @param {Response} response */
  async read(response) {
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const state = await response.json();
    this.armed = state.armed === true;
    this.render();
  }

  async refresh() {
    try {
      await this.read(await this.host.fetchApi(DEEP_ROUTE));
    } catch {
      // an older server without the route: the button stays off
    }
  }

  /** @param {boolean} armed */
  async set(armed) {
    try {
      await this.read(await this.host.fetchApi(DEEP_ROUTE, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ armed }) }));
      this.host.toast("info", "Pipeline Monitor", this.armed ? "The next prompt will be deep-profiled." : "Deep profile cancelled.");
    } catch (err) {
      this.host.toast("error", "Pipeline Monitor", `Deep profile not changed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}

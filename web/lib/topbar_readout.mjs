// The small live readout in ComfyUI's top bar (at the start of the action bar, beside Run), so the
// figures are visible without the panel: RAM, VRAM (torch's allocation; beside it this process's
// whole device memory and dynamic VRAM's share where the sampler reports them), GPU utilisation, the running node and the prompt's progress against the
// last run of its workflow. A click opens the panel; beside it "Free memory" calls ComfyUI's own
// POST /free (unload models, free memory) and says what that freed. On by default, switched in the
// settings (PipelineMonitor.TopBarReadout). Its element is one of the live subscription's viewers
// (live_watch.mjs): samples come while it is shown. Re-inserted when the frontend redraws the bar.
import { h } from "./dom.mjs";
import { formatBytes, formatPercent, isNumber } from "./format.mjs";

export const READOUT_SETTING = "PipelineMonitor.TopBarReadout";
const BAR_SELECTOR = ".actionbar-container";
export const FREE_SETTLE_MS = 1500; // ComfyUI unloads on its worker's next turn

/**
 * The readout's parts: [label, value] pairs.
 * @param {import("./live_samples.mjs").Point | null} point the latest sample
 * @param {import("./running.mjs").Progress} progress the running prompt against its last run
 * @returns {[string, string][]}
 */
export function readoutParts(point, progress) {
  if (!point) return [["live", "waiting for samples"]];
  const parts = /** @type {[string, string][]} */ ([["RAM", `${formatBytes(point.ramUsed)} / ${formatBytes(point.ramTotal)}`]]);
  const gpu = point.gpus[0];
  if (gpu) {
    parts.push(["VRAM", isNumber(gpu.reserved) && gpu.reserved !== gpu.allocated ? `${formatBytes(gpu.allocated)} (reserved ${formatBytes(gpu.reserved)})` : formatBytes(gpu.allocated)]);
    // the process's whole device memory, dynamic VRAM's weights and the CUDA context included
    if (isNumber(gpu.process)) parts.push(["device", isNumber(gpu.dynamic) ? `${formatBytes(gpu.process)} (dynamic ${formatBytes(gpu.dynamic)})` : formatBytes(gpu.process)]);
    if (isNumber(gpu.util)) parts.push(["GPU", formatPercent(gpu.util)]);
  }
  if (point.node) parts.push(["running", `#${point.node.id} ${point.node.label}`.trim()]);
  else parts.push(["", "idle"]);
  if (point.node && progress) parts.push(["", `~${Math.round(progress.fraction * 100)} % of last run`]);
  return parts;
}

/**
 * What POST /free freed, from ComfyUI's /system_stats before and after.
 * @param {any} before @param {any} after
 */
export function freedMessage(before, after) {
  const gained = (/** @type {unknown} */ a, /** @type {unknown} */ b) => (isNumber(a) && isNumber(b) ? b - a : null);
  const ram = gained(before?.system?.ram_free, after?.system?.ram_free);
  const vram = gained(before?.devices?.[0]?.vram_free, after?.devices?.[0]?.vram_free);
  const hasVram = isNumber(after?.devices?.[0]?.vram_free) && after?.devices?.[0]?.type !== "cpu";
  const parts = [];
  if (ram !== null && ram > 0) parts.push(`${formatBytes(ram)} of RAM`);
  if (hasVram && vram !== null && vram > 0) parts.push(`${formatBytes(vram)} of VRAM`);
  return parts.length
    ? `Models unloaded; freed ${parts.join(" and ")}.`
    : "Models unloaded; no memory came back (nothing was loaded, or other programs took it).";
}

export class TopBarReadout {
  /**
   * @param {{fetchApi: (route: string, init?: RequestInit) => Promise<Response>,
   *   toast: (severity: "success" | "info" | "warn" | "error", summary: string, detail?: string) => void,
   *   openPanel: () => void, live: import("./live_watch.mjs").LiveWatch}} host
   */
  constructor(host) {
    this.host = host;
    this.values = h("span", { class: "pm-topbar-values" });
    this.element = h("div", { class: "pm-topbar" },
      h("button", { class: "pm-topbar-open", title: "Pipeline Monitor: open the panel", onclick: () => host.openPanel() },
        h("i", { class: "pi pi-chart-line" }), this.values),
      h("button", { class: "pm-topbar-free", text: "Free memory", title: "ComfyUI's /free: unload models and free memory", onclick: () => void this.free() }));
    /** @type {MutationObserver | null} */
    this.observer = null;
    this.render(null, null);
  }

  /** @param {boolean} on */
  enable(on) {
    if (!on) {
      this.observer?.disconnect();
      this.observer = null;
      this.element.remove();
      this.host.live.detach("readout");
      return;
    }
    if (this.observer) return;
    const place = () => {
      if (this.element.isConnected) return;
      const bar = document.querySelector(BAR_SELECTOR);
      if (!bar) return;
      bar.prepend(this.element);
      this.host.live.attach("readout", this.element);
    };
    this.observer = new MutationObserver(place);
    this.observer.observe(document.body, { childList: true, subtree: true });
    place();
  }

  /** @param {import("./live_samples.mjs").Point | null} point @param {import("./running.mjs").Progress} progress */
  render(point, progress) {
    this.values.replaceChildren(...readoutParts(point, progress).map(([label, value]) =>
      h("span", { class: "pm-topbar-part" }, label ? h("span", { class: "pm-muted", text: `${label} ` }) : null, h("b", { text: value }))));
  }

  async free() {
    const stats = async () => (await this.host.fetchApi("/system_stats")).json();
    try {
      const before = await stats();
      const response = await this.host.fetchApi("/free", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ unload_models: true, free_memory: true }),
      });
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      await new Promise((resolve) => setTimeout(resolve, FREE_SETTLE_MS));
      this.host.toast("success", "Free memory", freedMessage(before, await stats()));
    } catch (error) {
      this.host.toast("error", "Free memory", `ComfyUI's /free failed: ${error}`);
    }
  }
}

// The sidebar panel: live chart at the top, then the runs list, one run, or a comparison.
// Data stays in this object between openings; the DOM is rebuilt on every mount. While the panel
// is not shown nothing runs: no timer, no animation frame, and the server is told to stop pushing
// (live_watch.mjs judges "shown" by itself: frontends do not always call the tab's destroy).
import { clear, h } from "./dom.mjs";
import { formatTime, safeFileName } from "./format.mjs";
import { SampleBuffer, WINDOW_S, bandAt, chartWindow, drawChart, modelLane, runRange } from "./live_chart.mjs";
import { runName, upsertRun } from "./report_view.mjs";
import { RunStore } from "./run_store.mjs";
import { DeepProfileToggle } from "./deep_profile_card.mjs";
import { runView, runningRowView, runsListView } from "./run_views.mjs";
import { compareView } from "./compare_view.mjs";
import { READOUT_HINT, downloadRun, liveChips, readoutText, saveBlob } from "./live_readout.mjs";
import { RunningTracker, estimateProgress } from "./running.mjs";
import { TREND_RUNS } from "./sparkline.mjs";
import { LiveWatch } from "./live_watch.mjs";

/**
 * What the panel needs from ComfyUI, injected so this module imports nothing of it.
 * @typedef {{fetchApi: (route: string, init?: RequestInit) => Promise<Response>, clientId: () => string | undefined,
 *   toast: (severity: "success" | "info" | "warn" | "error", summary: string, detail?: string) => void,
 *   focusNode?: (nodeId: string) => boolean}} Host
 */

export class MonitorPanel {
  /** @param {Host} host */
  constructor(host) {
    this.host = host;
    this.buffer = new SampleBuffer();
    this.store = new RunStore((route) => host.fetchApi(route));
    this.deepProfile = new DeepProfileToggle(host); // "Deep-profile next prompt" in the title bar
    /** @type {{name: "runs"} | {name: "run", id: string} | {name: "compare", a: string, b: string}} */
    this.view = { name: "runs" };
    /** @type {{key: string, dir: "asc" | "desc", allColumns?: boolean, collapsed?: Set<string>}} */
    this.sort = { key: "durationS", dir: "desc" };
    /** @type {HTMLElement | null} */
    this.root = null;
    /** @type {HTMLCanvasElement | null} */
    this.canvas = null;
    /** @type {HTMLElement | null} */
    this.values = null;
    /** @type {HTMLElement | null} */
    this.readout = null;
    /** @type {number | null} time under the pointer, for the hover readout */
    this.hoverT = null;
    /** @type {import("./live_samples.mjs").ZoomRange | null} the run the chart is zoomed to; null: live */
    this.zoom = null;
    /** @type {HTMLElement | null} */
    this.zoomBar = null;
    /** @type {HTMLElement | null} */
    this.main = null;
    /** @type {number | null} */
    this.frame = null;
    /** @type {ResizeObserver | null} */
    this.resizer = null;
    /** @type {HTMLElement | null} the running prompt's row, refreshed in place on each sample */
    this.runningSlot = null;
    this.tracker = new RunningTracker();
    this.generation = 0; // bumps on unmount so late fetches do not touch a closed panel
    /** @type {{draws: number, samples: number, renewals: number, mounts: number}} */
    this.stats = { draws: 0, samples: 0, renewals: 0, mounts: 0 };
    this.live = new LiveWatch(host, (points) => this.backfill(points), this.stats);
    /** @type {import("./run_views.mjs").Actions} */
    this.actions = {
      openRun: (id) => {
        if (!this.tracker.current) this.zoomTo(id); // while a prompt runs the chart stays live
        this.show({ name: "run", id });
      },
      back: () => this.show(this.view.name === "compare" ? { name: "run", id: this.view.a } : { name: "runs" }),
      compare: (a, b) => b && this.show({ name: "compare", a, b }),
      download: (id, format) => void this.download(id, format),
      sort: (key) => {
        this.sort = { ...this.sort, key, dir: this.sort.key === key && this.sort.dir === "desc" ? "asc" : "desc" };
        this.renderMain();
      },
      refresh: () => void this.loadRuns(),
      toggleColumns: () => {
        this.sort = { ...this.sort, allColumns: !this.sort.allColumns };
        this.renderMain();
      },
      toggleSubgraph: (id) => { const c = new Set(this.sort.collapsed); if (!c.delete(id)) c.add(id); this.sort = { ...this.sort, collapsed: c }; this.renderMain(); },
      downloadCsv: (id, csv) => saveBlob(new Blob([csv], { type: "text/csv" }), `pipeline_monitor_${safeFileName(id)}_nodes.csv`),
      focusNode: (id) => {
        if (this.host.focusNode && !this.host.focusNode(id)) this.host.toast("info", "Pipeline Monitor", `Node #${id} is not in the workflow on the canvas.`);
      },
    };
  }

  // -- events, registered once by the entry ----------------------------------------------------
  /** @param {unknown} detail */
  onSample(detail) {
    if (!this.live.active) return; // a push that was in flight when the last viewer was hidden
    this.stats.samples += 1;
    if (!this.buffer.push(detail)) return;
    this.follow(/** @type {import("./live_samples.mjs").Point} */ (this.buffer.latest()));
    this.scheduleDraw();
  }

  /**
   * A prompt started (ComfyUI's execution_start, sent to the page that queued it): the chart goes
   * back to live at once, before the first sample of the run arrives.
   * @param {any} detail
   */
  onPromptStart(detail) {
    const promptId = detail?.prompt_id;
    if (typeof promptId !== "string") return;
    const last = this.buffer.latest();
    const t = isFinite(detail.timestamp) ? detail.timestamp / 1000 : last ? last.t : Date.now() / 1000;
    if (this.tracker.start(promptId, t)) this.onNewPrompt();
  }

  /** This page queued a prompt from a workflow. @param {string} promptId @param {{id?: string | null, name?: string | null}} workflow */
  onQueued(promptId, workflow) {
    this.tracker.noteQueued(promptId, workflow);
    if (this.tracker.current?.promptId === promptId) this.renderRunning();
  }

  /** Follow the running prompt from a sample. @param {import("./live_samples.mjs").Point} point */
  follow(point) {
    const wasRunning = this.tracker.current;
    if (this.tracker.sample(point)) this.onNewPrompt();
    else if (wasRunning || this.tracker.current) this.renderRunning();
  }

  /** A new prompt runs: live by default, and its row first in the list. */
  onNewPrompt() {
    if (this.zoom) this.unzoom();
    this.renderRunning();
  }

  /** @param {any} summary */
  onRun(summary) {
    this.store.runs = upsertRun(this.store.runs, summary);
    if (this.root) void this.deepProfile.refresh(); // a deep profile turns itself off after its prompt
    if (typeof summary?.prompt_id === "string" && summary.status !== "running") this.tracker.finish(summary.prompt_id);
    if (typeof summary?.prompt_id === "string") this.store.forget(summary.prompt_id); // stored again: read anew
    if (this.root && (this.view.name === "runs" || this.showsRun(summary?.prompt_id))) this.renderMain();
  }

  /** Whether the open view shows that run (a run, or one side of a comparison). @param {unknown} id */
  showsRun(id) {
    const view = this.view;
    return view.name === "run" ? view.id === id : view.name === "compare" ? view.a === id || view.b === id : false;
  }

  /** The running prompt's row, refreshed in place (the rest of the list is not rebuilt). */
  renderRunning() {
    const slot = this.runningSlot;
    if (!slot) return;
    clear(slot);
    const running = this.tracker.current;
    slot.hidden = !running;
    if (running) slot.append(runningRowView(running, estimateProgress(running, this.runs)));
  }

  // -- open / close ----------------------------------------------------------------------------
  /** @param {HTMLElement} el */
  mount(el) {
    if (this.root) this.release(); // rendered again without a destroy in between
    this.stats.mounts += 1;
    this.canvas = h("canvas", { class: "pm-chart", role: "img", "aria-label": "memory over the last minutes" });
    this.values = h("div", { class: "pm-live-values" });
    this.readout = h("div", { class: "pm-readout pm-muted", text: READOUT_HINT });
    this.main = h("div", { class: "pm-main" });
    this.canvas.addEventListener("pointermove", (event) => this.hover(event));
    this.canvas.addEventListener("pointerleave", () => this.hover(null));
    this.canvas.addEventListener("click", (event) => this.clickChart(event));
    this.zoomBar = h("div", { class: "pm-zoom-bar" });
    this.root = h("div", { class: "pipeline-monitor-panel" },
      h("div", { class: "pm-title" }, h("span", { text: "Pipeline Monitor" }), this.deepProfile.element()),
      h("section", { class: "pm-live" }, this.values, this.zoomBar, h("div", { class: "pm-chart-box" }, this.canvas), this.readout),
      this.main);
    el.append(this.root);
    this.resizer = new ResizeObserver(() => this.scheduleDraw());
    this.resizer.observe(this.canvas);
    this.renderValues();
    this.renderZoomBar();
    this.renderMain();
    this.live.attach("panel", this.root);
    void this.loadRuns();
  }

  /** The tab's destroy: the DOM gone, the server told to stop pushing. */
  unmount() {
    this.release();
    this.live.detach("panel");
  }

  /** Drops the DOM and what draws into it; the live subscription is the caller's to end or hand on. */
  release() {
    this.generation += 1;
    if (this.frame !== null) cancelAnimationFrame(this.frame);
    this.resizer?.disconnect();
    this.frame = this.resizer = null;
    this.root?.remove();
    this.root = this.canvas = this.values = this.main = this.readout = this.zoomBar = this.runningSlot = null;
    this.hoverT = null;
  }

  /** Points the server kept while the panel was not shown (or before it opened). @param {unknown[]} points */
  backfill(points) {
    if (!this.buffer.extend(points)) return;
    const last = this.buffer.latest();
    if (last) this.follow(last); // a prompt already running when the tab opened
    this.scheduleDraw();
  }

  // -- live chart ------------------------------------------------------------------------------
  scheduleDraw() {
    if (!this.root || this.frame !== null) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = null;
      this.draw();
    });
  }

  draw() {
    if (!this.canvas || !this.root) return;
    this.stats.draws += 1;
    const style = getComputedStyle(this.root);
    const color = (/** @type {string} */ name, /** @type {string} */ fallback) => style.getPropertyValue(name).trim() || fallback;
    const points = this.zoom ? this.buffer.points : this.buffer.window(WINDOW_S);
    drawChart(this.canvas, points, {
      fg: color("--fg-color", "#ddd"),
      muted: color("--descrip-text", "#999"),
      grid: color("--border-color", "#444"),
      windowS: chartWindow(points),
      hoverT: this.hoverT,
      zoom: this.zoom,
      modelLane: this.modelLane, // the opened run's model loads and unloads (model_lane.mjs)
    });
    this.renderValues();
    this.renderReadout();
  }

  /**
   * The time under the pointer (the chart's plot starts 48 px from the left and ends 30 px from
   * the right, as drawChart lays it out); null when the pointer left.
   * @param {PointerEvent | null} event
   */
  hover(event) {
    if (!this.canvas) return;
    const last = this.buffer.latest();
    if (!event || !last) {
      this.hoverT = null;
    } else {
      this.hoverT = this.timeAt(event);
    }
    this.scheduleDraw();
  }

  /** The time at the pointer's x on the chart. @param {MouseEvent} event */
  timeAt(event) {
    const rect = /** @type {HTMLCanvasElement} */ (this.canvas).getBoundingClientRect();
    const plotW = Math.max(10, rect.width - 48 - 30);
    const fraction = Math.min(1, Math.max(0, (event.clientX - rect.left - 48) / plotW));
    const { from, to } = this.chartSpan();
    return from + (to - from) * fraction;
  }

  /** The time range the chart shows now: the zoomed run's, else the live window. */
  chartSpan() {
    if (this.zoom) return { from: this.zoom.from, to: this.zoom.to };
    const last = this.buffer.latest();
    const now = last ? last.t : Date.now() / 1000;
    return { from: now - chartWindow(this.buffer.points), to: now };
  }

  /**
   * Zoom the chart to one run's time span (from its summary, else its samples); false when
   * neither says when it ran.
   * @param {string} promptId
   */
  zoomTo(promptId) {
    const zoom = runRange(promptId, this.runs.find((r) => r.prompt_id === promptId), this.buffer.points);
    if (!zoom) return false;
    this.zoom = zoom;
    this.renderZoomBar();
    this.scheduleDraw();
    return true;
  }

  /** Back to the live window. */
  unzoom() {
    this.zoom = null;
    this.renderZoomBar();
    this.scheduleDraw();
  }

  /** A click on a run's band zooms to that run and opens it. @param {MouseEvent} event */
  clickChart(event) {
    if (!this.canvas || this.zoom) return;
    const band = bandAt(this.buffer.window(chartWindow(this.buffer.points)), this.timeAt(event));
    if (band) this.actions.openRun(band.promptId);
  }

  renderZoomBar() {
    if (!this.zoomBar) return;
    clear(this.zoomBar);
    const zoom = this.zoom;
    this.zoomBar.hidden = !zoom;
    if (!zoom) return;
    const run = this.runs.find((r) => r.prompt_id === zoom.promptId);
    const name = runName(run ?? { prompt_id: zoom.promptId });
    this.zoomBar.append(
      h("span", { class: "pm-zoom-label", title: `prompt ${zoom.promptId}`, text: `Zoomed to run: ${name} · ${formatTime(zoom.runStart)}` }),
      h("button", { class: "pm-button pm-live-back", text: "Back to live", title: "Show the last 2 minutes again", onclick: () => this.unzoom() }));
  }

  renderReadout() {
    if (!this.readout) return;
    const points = this.zoom ? this.buffer.points : this.buffer.window(chartWindow(this.buffer.points));
    this.readout.textContent = readoutText(points, this.hoverT, this.zoom);
  }

  renderValues() {
    if (!this.values) return;
    clear(this.values);
    this.values.append(...liveChips(this.buffer.latest(), this.buffer.window(WINDOW_S)));
  }

  // -- runs, run, compare ----------------------------------------------------------------------
  /** The runs listed, newest first (the store's). */
  get runs() {
    return this.store.runs;
  }

  async loadRuns() {
    const generation = this.generation;
    try {
      await this.store.load();
      if (generation === this.generation && this.view.name === "runs") this.renderMain();
    } catch (error) {
      this.host.toast("error", "Pipeline Monitor", `Could not load runs: ${error}`);
    }
  }

  /** A run's report, through the store's cache. @param {string} id */
  report(id) {
    return this.store.report(id);
  }

  /** @param {MonitorPanel["view"]} view */
  show(view) {
    this.view = view;
    this.renderMain();
  }

  renderMain() {
    const main = this.main;
    if (!main) return;
    const view = this.view;
    if (view.name === "runs") {
      clear(main);
      this.runningSlot = h("div", { class: "pm-running-slot" });
      const running = this.tracker.current?.promptId;
      main.append(runsListView(this.runs.filter((r) => r.prompt_id !== running), this.actions, this.runningSlot));
      this.renderRunning();
      return;
    }
    this.runningSlot = null;
    const generation = this.generation;
    const ids = view.name === "run" ? [view.id, ...this.store.historyIds(view.id, view.id, TREND_RUNS - 1)] : [view.a, view.b, ...this.store.historyIds(view.a, view.b)];
    // a history report that cannot be read only narrows the verdict's basis
    const needed = view.name === "run" ? 1 : 2;
    Promise.all(ids.map((id, i) => (i < needed ? this.report(id) : this.report(id).catch(() => null))))
      .then((reports) => {
        if (generation !== this.generation || this.view !== view || !this.main) return;
        clear(main);
        const history = /** @type {import("./report_view.mjs").RunReport[]} */ (reports.slice(needed).filter(Boolean));
        if (view.name === "run") { this.modelLane = modelLane(reports[0]); this.scheduleDraw(); }
        main.append(view.name === "run" ? runView(reports[0], this.runs, this.sort, this.actions, history) : compareView(reports[0], reports[1], this.actions, history));
      })
      .catch((error) => {
        this.host.toast("error", "Pipeline Monitor", String(error));
        if (this.view === view) this.show({ name: "runs" });
      });
  }

  /**
   * Fetch through the app's API (same auth and base path) and save as a file.
   * @param {string} id
   * @param {"json" | "html"} format
   */
  async download(id, format) {
    try {
      await downloadRun((route) => this.host.fetchApi(route), id, format);
    } catch (error) {
      this.host.toast("error", "Pipeline Monitor", `Download failed: ${error}`);
    }
  }
}

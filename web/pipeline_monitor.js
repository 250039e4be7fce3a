// Pipeline Monitor: the pack's only auto-loaded entry file (ComfyUI imports every *.js under
// web/; the rest of the panel lives in lib/*.mjs, which it does not list).
//   - sidebar tab "Pipeline Monitor" (live chart, runs, run details, compare, export)
//   - settings that the server applies at run time (POST /pipeline_monitor/settings)
//   - the compact summary a monitor node returns as ui.text, shown on the node itself
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { MonitorPanel } from "./lib/panel.mjs";
import { SETTINGS, settingsPusher } from "./lib/settings.mjs";
import { markSummaryStale, showNodeSummary, stepTextNode } from "./lib/node_summary.mjs";
import { applyRunBadges, focusNode, staleMonitorIds } from "./lib/canvas_badges.mjs";
import { nameQueuedWorkflows, noteQueuedPrompts } from "./lib/workflow_name.mjs";
import { describeTemplateCards, packFolder } from "./lib/templates.mjs";
import { showToast } from "./lib/toast.mjs";
import { exampleFramer } from "./lib/template_view.mjs";
import { READOUT_SETTING, TopBarReadout } from "./lib/topbar_readout.mjs";
import { estimateProgress } from "./lib/running.mjs";

const TAB_ID = "pipeline-monitor";
/** @type {ReturnType<typeof exampleFramer> | null} */
let framer = null;

const panel = new MonitorPanel({
  fetchApi: (route, init) => api.fetchApi(route, init),
  clientId: () => api.clientId ?? undefined,
  toast: (severity, summary, detail) => showToast(app.extensionManager?.toast, severity, summary, detail),
  focusNode: (nodeId) => focusNode(app, nodeId),
});

/**
 * After a run: its time/memory badge on every node that finished, and monitor summaries the run
 * did not refresh marked as from an earlier run. One report request per finished run.
 * @param {any} summary the pipeline_monitor.run event's run summary
 */
async function tieCanvasToRun(summary) {
  if (!summary?.prompt_id || summary.status === "running") return;
  try {
    const report = await panel.report(summary.prompt_id);
    const graph = /** @type {any} */ (app).rootGraph ?? app.graph; // the root, whatever subgraph is open
    // A run of another workflow (its graph id differs) leaves this canvas as it is; without an id
    // the badges still match nodes by id and class, but no summary is called stale.
    const sameGraph = report.workflow?.id ? report.workflow.id === graph?.id : null;
    if (sameGraph === false) return;
    applyRunBadges(graph, report, await panel.store.previousRunReport(report));
    if (!sameGraph) return;
    const monitors = (graph?.nodes ?? []).filter((/** @type {any} */ n) => String(n.type ?? "").startsWith("PipelineMonitor"));
    const stale = new Set(staleMonitorIds(report, monitors.map((/** @type {any} */ n) => String(n.id))));
    for (const node of monitors) markSummaryStale(node, stale.has(String(node.id)));
  } catch (error) {
    console.warn("Pipeline Monitor: run badges not shown", error);
  }
}
// The top bar's live readout: a click opens the panel (when it is not open already).
const readout = new TopBarReadout({
  fetchApi: (route, init) => api.fetchApi(route, init),
  toast: (severity, summary, detail) => showToast(app.extensionManager?.toast, severity, summary, detail),
  openPanel: () => {
    if (!panel.live.shown("panel")) void app.extensionManager?.command?.execute(`Workspace.ToggleSidebarTab.${TAB_ID}`);
  },
  live: panel.live,
});
const renderReadout = () => {
  const running = panel.tracker.current;
  readout.render(panel.buffer.latest(), running ? estimateProgress(running, panel.runs) : null);
};
/** @type {any} */ (window).__pipelineMonitorReadout = readout;

// For the browser test and for curious users: the panel's counters (draws, samples, renewals).
/** @type {any} */ (window).__pipelineMonitor = panel;

const pushSetting = settingsPusher((route, init) => api.fetchApi(route, init), (message) =>
  showToast(app.extensionManager?.toast, "warn", "Pipeline Monitor settings", message, 6000));

function addStylesheet() {
  const href = new URL("./lib/panel.css", import.meta.url).href;
  if (document.querySelector(`link[href="${href}"]`)) return;
  const link = document.createElement("link");
  link.rel = "stylesheet";
  link.href = href;
  document.head.append(link);
}

app.registerExtension({
  name: "PipelineMonitor",
  settings: SETTINGS.map((s) => ({
    id: s.id,
    name: s.name,
    tooltip: s.tooltip,
    category: s.category,
    type: s.type,
    defaultValue: s.defaultValue,
    attrs: s.attrs,
    onChange: (/** @type {unknown} */ value, /** @type {unknown} */ old) => pushSetting(s, value, old),
  })).concat([{
    id: READOUT_SETTING,
    name: "Live readout in the top bar",
    tooltip: "RAM, VRAM, GPU use and the running node beside the Run button; a click opens the panel.",
    category: ["Pipeline Monitor", "Top bar", "Readout"],
    type: "boolean",
    defaultValue: true,
    attrs: undefined,
    onChange: (/** @type {unknown} */ value) => readout.enable(value !== false),
  }]),

  setup() {
    addStylesheet();
    readout.enable(app.extensionManager.setting.get(READOUT_SETTING) !== false);
    nameQueuedWorkflows(app); // runs are listed by their workflow's name
    noteQueuedPrompts(api, (promptId, workflow) => panel.onQueued(promptId, workflow)); // the running row's workflow
    const folder = packFolder(import.meta.url);
    if (folder) {
      /** @type {Promise<string[]> | null} */
      let names = null;
      const templateNames = () => (names ??= api.fetchApi("/workflow_templates").then((r) => r.json()).then((all) => all?.[folder] ?? []));
      // the template browser's cards show each example's extra.info, not its file name
      describeTemplateCards(document, templateNames,
        async (name) => (await api.fetchApi(`/workflow_templates/${encodeURIComponent(folder)}/${encodeURIComponent(name)}.json`)).json());
      // an example opened from its card is framed right of the open sidebar, titles readable
      framer = exampleFramer(document, () => app, async (name) => (await templateNames().catch(() => [])).includes(name));
    }
    api.addEventListener("execution_start", (/** @type {any} */ event) => panel.onPromptStart(event.detail));
    // Listeners are registered once; with the tab closed the server sends no samples, and a run
    // event only updates the list in memory.
    api.addEventListener(/** @type {any} */ ("pipeline_monitor.sample"), (/** @type {any} */ event) => {
      panel.onSample(event.detail);
      renderReadout();
    });
    // a step whose figures came after the prompt: its node's text, to the page that queued it
    api.addEventListener(/** @type {any} */ ("pipeline_monitor.step_text"), (/** @type {any} */ event) => {
      const node = stepTextNode(app.graph, event.detail);
      if (node) showNodeSummary(node, event.detail?.text);
    });
    api.addEventListener(/** @type {any} */ ("pipeline_monitor.run"), (/** @type {any} */ event) => {
      panel.onRun(event.detail);
      void tieCanvasToRun(event.detail);
    });
    app.extensionManager.registerSidebarTab({
      id: TAB_ID,
      icon: "pi pi-chart-line",
      title: "Pipeline Monitor",
      tooltip: "Pipeline Monitor: live memory, runs and monitor reports",
      type: "custom",
      render: (el) => panel.mount(el),
      destroy: () => panel.unmount(),
    });
  },

  afterConfigureGraph() {
    void framer?.afterLoad();
  },

  beforeRegisterNodeDef(nodeType, nodeData) {
    if (!String(nodeData?.name ?? "").startsWith("PipelineMonitor")) return;
    const proto = /** @type {any} */ (nodeType.prototype);
    const original = proto.onExecuted;
    proto.onExecuted = function (/** @type {any} */ output) {
      const result = original?.apply(this, arguments);
      showNodeSummary(this, output?.text);
      return result;
    };
  },
});

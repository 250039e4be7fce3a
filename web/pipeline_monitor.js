// Pipeline Monitor: the pack's only auto-loaded entry file. The sidebar panel lands here;
// for now it keeps the latest run summaries announced by the server.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

/** @type {Array<Record<string, unknown>>} */
const recentRuns = [];
const MAX_RECENT_RUNS = 50;

app.registerExtension({
  name: "PipelineMonitor",
  setup() {
    api.addEventListener("pipeline_monitor.run", (event) => {
      recentRuns.unshift(/** @type {CustomEvent} */ (event).detail);
      recentRuns.length = Math.min(recentRuns.length, MAX_RECENT_RUNS);
    });
  },
});

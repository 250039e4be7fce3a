// The runs the panel knows and the reports it read: the list (newest first), a bounded cache of
// reports, and the earlier runs of a workflow that comparisons, sparklines and canvas badges need.
import { sameWorkflow, sortRunsNewestFirst, upsertRun } from "./report_view.mjs";
import { upgradeReport } from "./step_kinds.mjs";

const MAX_CACHED_REPORTS = 40; // a run and its workflow's last 20 runs for the sparklines, and a comparison
export const HISTORY_RUNS = 10; // earlier runs of a workflow a comparison's verdicts rest on

export class RunStore {
  /** @param {(route: string) => Promise<Response>} fetchApi */
  constructor(fetchApi) {
    this.fetchApi = fetchApi;
    /** @type {import("./report_view.mjs").RunSummary[]} */
    this.runs = [];
    /** @type {Map<string, import("./report_view.mjs").RunReport>} */
    this.reports = new Map();
  }

  /** Read the list of runs from the server; run events that came in meanwhile are kept. */
  async load() {
    const body = await (await this.fetchApi("/pipeline_monitor/runs?limit=100")).json();
    let runs = sortRunsNewestFirst(Array.isArray(body.runs) ? body.runs : []);
    for (const run of this.runs) runs = upsertRun(runs, run);
    this.runs = runs;
  }

  /** A run stored again (its pending steps finished): its report is read anew. @param {string} id */
  forget(id) {
    this.reports.delete(id);
  }

  /** @param {string} id */
  async report(id) {
    const cached = this.reports.get(id);
    if (cached) return cached;
    const response = await this.fetchApi(`/pipeline_monitor/runs/${encodeURIComponent(id)}`);
    if (!response.ok) throw new Error(`run ${id}: HTTP ${response.status}`);
    const report = upgradeReport(await response.json()); // older reports in today's names
    if (report.status !== "running" && report.complete !== false) { // a report with pending steps is read again
      this.reports.set(id, report);
      while (this.reports.size > MAX_CACHED_REPORTS) this.reports.delete(/** @type {string} */ (this.reports.keys().next().value));
    }
    return report;
  }

  /**
   * Earlier successful runs of the first run's workflow (at most HISTORY_RUNS, newest first, the two
   * compared left out): the spread a regression must exceed.
   * @param {string} a @param {string} b @param {number} [limit]
   */
  historyIds(a, b, limit = HISTORY_RUNS) {
    const run = this.runs.find((r) => r.prompt_id === a);
    if (!run) return [];
    const newest = Math.max(...[a, b].map((id) => this.runs.find((r) => r.prompt_id === id)?.started_unix_s ?? 0));
    return sortRunsNewestFirst(this.runs)
      .filter((r) => r.prompt_id !== a && r.prompt_id !== b && r.status === "success" && sameWorkflow(run, r) && (r.started_unix_s ?? 0) <= newest)
      .slice(0, limit)
      .map((r) => r.prompt_id);
  }

  /**
   * The report of the last successful run of a report's workflow before it (for the canvas
   * badges' change since then); null when there is none or it cannot be read.
   * @param {import("./report_view.mjs").RunReport} report
   */
  async previousRunReport(report) {
    const run = { prompt_id: report.prompt_id, status: report.status, started_unix_s: report.started_unix_s,
      workflow_id: report.workflow?.id ?? null, workflow_name: report.workflow?.name ?? null };
    const previous = sortRunsNewestFirst(this.runs).find((r) => r.prompt_id !== report.prompt_id && r.status === "success"
      && (r.started_unix_s ?? 0) < (report.started_unix_s ?? 0) && sameWorkflow(run, r));
    return previous ? this.report(previous.prompt_id).catch(() => null) : null;
  }
}

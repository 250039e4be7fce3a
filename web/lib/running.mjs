// The prompt running now, as the panel follows it: which prompt (from the live samples, which
// carry the running prompt's id and node, or from ComfyUI's execution_start), since when, its
// workflow (known when this page queued it), and a progress estimate from the last run of the same
// workflow. Pure functions and a small tracker, no DOM, so Node's test runner covers them.
import { isNumber } from "./format.mjs";
import { sameWorkflow, sortRunsNewestFirst } from "./report_view.mjs";

/**
 * @typedef {{id?: string | null, name?: string | null}} WorkflowRef
 * @typedef {{promptId: string, startS: number, latestS: number, node: {id: string, label: string} | null,
 *   workflow: WorkflowRef | null}} Running
 * @typedef {{fraction: number, basisS: number, basisPromptId: string} | null} Progress
 */

/** Samples without a prompt for this long after a run mean it ended (the run event comes later). */
export const IDLE_AFTER_S = 1.5;

export class RunningTracker {
  constructor() {
    /** @type {Running | null} */
    this.current = null;
    /** @type {Map<string, WorkflowRef>} workflows of prompts this page queued, by prompt id */
    this.queued = new Map();
    /** @type {Set<string>} prompts known to have ended (their run event came) */
    this.ended = new Set();
  }

  /** This page queued `promptId` from the workflow `ref`. @param {string} promptId @param {WorkflowRef} ref */
  noteQueued(promptId, ref) {
    this.queued.set(promptId, ref);
    // the prompt may have started before ComfyUI's answer to the queue request came back
    if (this.current?.promptId === promptId && !this.current.workflow) this.current.workflow = ref;
    while (this.queued.size > 50) this.queued.delete(/** @type {string} */ (this.queued.keys().next().value));
  }

  /**
   * A prompt started (ComfyUI's execution_start, or the first sample that carries it). Returns true
   * when it is a prompt not followed before: the chart goes back to live then.
   * @param {string} promptId @param {number} tS
   */
  start(promptId, tS) {
    if (this.ended.has(promptId)) return false;
    if (this.current?.promptId === promptId) return false;
    this.current = { promptId, startS: tS, latestS: tS, node: null, workflow: this.queued.get(promptId) ?? null };
    return true;
  }

  /**
   * A live sample: a prompt id starts or follows a run; samples without one for IDLE_AFTER_S end it.
   * Returns whether a new prompt started.
   * @param {{t: number, promptId: string | null, node: {id: string, label: string} | null}} point
   */
  sample(point) {
    if (point.promptId) {
      const started = this.start(point.promptId, point.t);
      if (this.current?.promptId === point.promptId) {
        this.current.latestS = Math.max(this.current.latestS, point.t);
        if (point.node) this.current.node = point.node;
      }
      return started;
    }
    if (this.current && point.t - this.current.latestS > IDLE_AFTER_S) this.current = null;
    return false;
  }

  /** The run event of a finished prompt. @param {string} promptId */
  finish(promptId) {
    this.ended.add(promptId);
    if (this.ended.size > 200) this.ended.delete(/** @type {string} */ (this.ended.values().next().value));
    if (this.current?.promptId === promptId) this.current = null;
  }
}

/**
 * The last successful run of the running prompt's workflow, if its workflow is known.
 * @param {Running} running
 * @param {import("./report_view.mjs").RunSummary[]} runs
 */
export function lastRunOfWorkflow(running, runs) {
  const ref = running.workflow;
  if (!ref || (!ref.id && !ref.name)) return null;
  const probe = { prompt_id: running.promptId, status: "running", started_unix_s: running.startS, workflow_id: ref.id ?? null, workflow_name: ref.name ?? null };
  return sortRunsNewestFirst(runs).find((r) => r.prompt_id !== running.promptId && r.status === "success"
    && isNumber(r.duration_s) && r.duration_s > 0 && sameWorkflow(probe, r)) ?? null;
}

/**
 * Progress as elapsed over the last run's duration, held below 99 % until the run ends (a run
 * slower than the last one stays at 99 %); null without a last run to go by.
 * @param {Running} running
 * @param {import("./report_view.mjs").RunSummary[]} runs
 * @returns {Progress}
 */
export function estimateProgress(running, runs) {
  const last = lastRunOfWorkflow(running, runs);
  if (!last || !isNumber(last.duration_s)) return null;
  const elapsed = Math.max(0, running.latestS - running.startS);
  return { fraction: Math.min(0.99, elapsed / last.duration_s), basisS: last.duration_s, basisPromptId: last.prompt_id };
}

// The workflow's name travels with the prompt: ComfyUI's frontend sends the graph as
// extra_data.extra_pnginfo.workflow with its id but no file name, so the panel adds the open
// workflow's name to that copy's `extra` (monitors/engine/recorder.py workflow_from_extra_data reads it).
// The graph itself is never changed, so the workflow is not marked modified and files stay as saved.

export const WORKFLOW_NAME_KEY = "pipeline_monitor_workflow_name";

/**
 * A copy of a serialized workflow with `name` in its extra; the input is returned when there is
 * nothing to add.
 * @template {Record<string, any> | null | undefined} W
 * @param {W} workflow
 * @param {unknown} name
 * @returns {W}
 */
export function withWorkflowName(workflow, name) {
  if (!workflow || typeof workflow !== "object" || typeof name !== "string" || !name.trim()) return workflow;
  const extra = workflow.extra && typeof workflow.extra === "object" ? workflow.extra : {};
  return /** @type {W} */ ({ ...workflow, extra: { ...extra, [WORKFLOW_NAME_KEY]: name.trim() } });
}

/**
 * Wrap `app.graphToPrompt` once so the prompt's workflow copy carries the open workflow's name.
 * Feature-detected: without that method or a workflow store, prompts simply carry no name.
 * @param {any} app ComfyUI's app
 */
export function nameQueuedWorkflows(app) {
  const original = app?.graphToPrompt;
  if (typeof original !== "function" || original.__pipelineMonitorNamed) return false;
  const wrapped = async function (/** @type {any[]} */ ...args) {
    const result = await original.apply(app, args);
    try {
      const active = app.extensionManager?.workflow?.activeWorkflow;
      const name = active?.filename ?? active?.path;
      if (result && typeof result === "object") result.workflow = withWorkflowName(result.workflow, name);
    } catch (error) {
      console.warn("Pipeline Monitor: workflow name not added", error);
    }
    return result;
  };
  wrapped.__pipelineMonitorNamed = true;
  app.graphToPrompt = wrapped;
  return true;
}

/**
 * The workflow (graph id and name) a serialized workflow copy stands for.
 * @param {any} workflow
 * @returns {{id: string | null, name: string | null}}
 */
export function workflowRef(workflow) {
  const id = typeof workflow?.id === "string" ? workflow.id : null;
  const name = workflow?.extra?.[WORKFLOW_NAME_KEY];
  return { id, name: typeof name === "string" ? name : null };
}

/**
 * Wrap `api.queuePrompt` once so the panel learns which workflow each prompt this page queues
 * comes from (its running row then estimates progress from that workflow's last run).
 * Feature-detected: without that method the running row simply has no estimate.
 * @param {any} api ComfyUI's api
 * @param {(promptId: string, workflow: {id: string | null, name: string | null}) => void} onQueued
 */
export function noteQueuedPrompts(api, onQueued) {
  const original = api?.queuePrompt;
  if (typeof original !== "function" || original.__pipelineMonitorNoted) return false;
  const wrapped = async function (/** @type {any[]} */ ...args) {
    const result = await original.apply(api, args);
    try {
      if (typeof result?.prompt_id === "string") onQueued(result.prompt_id, workflowRef(args[1]?.workflow));
    } catch (error) {
      console.warn("Pipeline Monitor: queued prompt not noted", error);
    }
    return result;
  };
  wrapped.__pipelineMonitorNoted = true;
  api.queuePrompt = wrapped;
  return true;
}

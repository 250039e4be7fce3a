import assert from "node:assert/strict";
import { test } from "node:test";
import { IDLE_AFTER_S, RunningTracker, estimateProgress } from "../../web/lib/running.mjs";
import { noteQueuedPrompts, workflowRef } from "../../web/lib/workflow_name.mjs";

const point = (/** @type {number} */ t, /** @type {string | null} */ promptId, node = null) => ({ t, promptId, node });

test("a sample with a new prompt id starts a run once; its node and time follow the samples", () => {
  const tracker = new RunningTracker();
  assert.equal(tracker.sample(point(10, null)), false);
  assert.equal(tracker.sample(point(11, "p1")), true, "a new prompt");
  assert.equal(tracker.sample(point(12, "p1", /** @type {any} */ ({ id: "7", label: "KSampler" }))), false, "the same prompt");
  assert.deepEqual(tracker.current && { id: tracker.current.promptId, start: tracker.current.startS, latest: tracker.current.latestS, node: tracker.current.node?.id },
    { id: "p1", start: 11, latest: 12, node: "7" });
  assert.equal(tracker.sample(point(13, "p2")), true, "the next prompt of a queue is new again");
});

test("samples without a prompt end the run only after a short quiet; the run event ends it at once", () => {
  const tracker = new RunningTracker();
  tracker.sample(point(0, "p1"));
  tracker.sample(point(IDLE_AFTER_S / 2, null));
  assert.equal(tracker.current?.promptId, "p1", "one idle tick between nodes");
  tracker.sample(point(IDLE_AFTER_S + 1, null));
  assert.equal(tracker.current, null);
  tracker.start("p2", 20);
  tracker.finish("p2");
  assert.equal(tracker.current, null);
  assert.equal(tracker.sample(point(21, "p2")), false, "a late sample of an ended prompt does not restart it");
});

test("progress is elapsed over the last successful run of the same workflow, held below 99 %", () => {
  const tracker = new RunningTracker();
  tracker.noteQueued("now", { id: "w1", name: "lora.json" });
  tracker.start("now", 100);
  tracker.sample(point(103, "now"));
  const runs = [
    { prompt_id: "other", status: "success", started_unix_s: 90, duration_s: 1, workflow_id: "w2" },
    { prompt_id: "failed", status: "error", started_unix_s: 80, duration_s: 2, workflow_id: "w1" },
    { prompt_id: "last", status: "success", started_unix_s: 70, duration_s: 12, workflow_id: "w1" },
  ];
  const running = /** @type {any} */ (tracker.current);
  assert.deepEqual(estimateProgress(running, runs), { fraction: 0.25, basisS: 12, basisPromptId: "last" });
  running.latestS = 200;
  assert.equal(estimateProgress(running, runs)?.fraction, 0.99);
  assert.equal(estimateProgress({ ...running, workflow: null }, runs), null, "a prompt queued elsewhere: no estimate");
});

test("the queue wrapper notes each prompt's workflow and returns ComfyUI's answer unchanged", async () => {
  /** @type {[string, any][]} */
  const noted = [];
  const api = { queuePrompt: async () => ({ prompt_id: "abc", number: 3 }) };
  assert.equal(noteQueuedPrompts(api, (id, ref) => noted.push([id, ref])), true);
  assert.equal(noteQueuedPrompts(api, () => {}), false, "wrapped once");
  const answer = await api.queuePrompt(0, { output: {}, workflow: { id: "g1", extra: { pipeline_monitor_workflow_name: "demo.json" } } });
  assert.deepEqual(answer, { prompt_id: "abc", number: 3 });
  assert.deepEqual(noted, [["abc", { id: "g1", name: "demo.json" }]]);
  assert.deepEqual(workflowRef(null), { id: null, name: null });
});

test("a prompt that starts before the queue request returns still gets its workflow", () => {
  const tracker = new RunningTracker();
  tracker.start("early", 5);
  tracker.noteQueued("early", { id: "w1", name: "demo.json" });
  assert.deepEqual(tracker.current?.workflow, { id: "w1", name: "demo.json" });
});

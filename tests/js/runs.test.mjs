import assert from "node:assert/strict";
import { test } from "node:test";
import { defaultCompareTarget, runName, runStatus } from "../../web/lib/report_view.mjs";
import { WORKFLOW_NAME_KEY, withWorkflowName } from "../../web/lib/workflow_name.mjs";

/** @param {Record<string, any>} o */
const run = (o) => ({ prompt_id: "x", status: "success", started_unix_s: 0, ...o });

test("runs are named by their workflow, else marked scripted with a short prompt id", () => {
  assert.equal(runName(run({ workflow_name: "text_to_image_lora.json" })), "text_to_image_lora");
  assert.equal(runName(run({ prompt_id: "0123456789abcdef" })), "scripted 01234567");
});

test("a run's status says its warnings and errors; a cancel is neutral", () => {
  assert.deepEqual(runStatus(run({ n_warnings: 2, n_errors: 0 })), { text: "success · 2 warnings", tone: "warn" });
  assert.deepEqual(runStatus(run({ n_warnings: 0, n_errors: 0 })), { text: "success", tone: "ok" });
  assert.deepEqual(runStatus(run({ status: "error", n_errors: 1 })), { text: "failed · 1 error", tone: "error" });
  assert.deepEqual(runStatus(run({ status: "interrupted" })), { text: "interrupted", tone: "neutral" });
});

test("compare defaults to the last successful run of the same workflow, not the previous run", () => {
  const runs = [
    run({ prompt_id: "new", workflow_id: "w1", started_unix_s: 50 }),
    run({ prompt_id: "other-failed", workflow_id: "w2", status: "error", started_unix_s: 40 }),
    run({ prompt_id: "same-failed", workflow_id: "w1", status: "error", started_unix_s: 30 }),
    run({ prompt_id: "same-ok", workflow_id: "w1", started_unix_s: 20 }),
    run({ prompt_id: "other-ok", workflow_id: "w2", started_unix_s: 10 }),
  ];
  assert.equal(defaultCompareTarget(runs[0], runs), "same-ok");
  const withScripted = [run({ prompt_id: "scripted", started_unix_s: 70 }), ...runs];
  assert.equal(defaultCompareTarget(run({ prompt_id: "script2", started_unix_s: 80 }), withScripted), "new",
    "for a scripted run, another scripted run is no default target while a named one exists");
  assert.equal(defaultCompareTarget(run({ prompt_id: "lone", workflow_id: "w9", started_unix_s: 60 }), runs), null,
    "the first run of a workflow: no other workflow offered as its base");
  assert.equal(defaultCompareTarget(runs[0], [runs[0]]), null);
  assert.equal(defaultCompareTarget(run({ prompt_id: "n", workflow_name: "a" }), [run({ prompt_id: "m", workflow_name: "a" }), run({ prompt_id: "k", started_unix_s: 5 })]), "m", "by name without ids");
});

test("the queued workflow copy carries the name; the graph's own extra is untouched", () => {
  const extra = { ds: { scale: 1 } };
  const workflow = { id: "w1", nodes: [], extra };
  const named = withWorkflowName(workflow, " my flow ");
  assert.equal(named.extra[WORKFLOW_NAME_KEY], "my flow");
  assert.deepEqual(named.extra.ds, { scale: 1 });
  assert.equal(WORKFLOW_NAME_KEY in extra, false);
  assert.equal(withWorkflowName(workflow, undefined), workflow);
  assert.equal(withWorkflowName(null, "x"), null);
});

// A step whose figures come after the prompt (issue 35): the card says "pending", a report with
// pending steps is read again rather than kept, and the run event that announces the finished
// step draws the open run again with the figures.
import assert from "node:assert/strict";
import { test } from "node:test";
import { stepCard } from "../../web/lib/report_view.mjs";
import { designedCard } from "../../web/lib/step_cards.mjs";
import { RunStore } from "../../web/lib/run_store.mjs";
import { MonitorPanel } from "../../web/lib/panel.mjs";
import { VOCABULARY } from "../../web/lib/vocabulary.generated.mjs";

const NORM = VOCABULARY.lora.fields.model_delta_norm.label;

const LOADER = { node_id: "2", class_type: "LoraLoaderModelOnly", lora_name: "first.safetensors", strength_model: 0.75,
  on_model_path: true, on_clip_path: false, skipped: false, file: null, coverage: null, profile: null };

/** @param {boolean} pending */
function loraStep(pending) {
  return {
    kind: "lora", node_id: "3", pending, unfinished_reason: null, cached: false,
    summary: { success: pending ? null : true, n_loras: 1, model_delta_norm: pending ? null : 1.25, analysis_s: 0.01 },
    details: { loaders: [LOADER], deferred: { job_id: "deferred-1", in_prompt_s: 0.01, after_prompt_s: pending ? null : 0.5 } },
    findings: [{ level: "info", message: "first analysis of this LoRA file on this model: the patch figures are computed after the prompt", code: "lora_figures_after_prompt" }],
    monitor_errors: [],
  };
}

/** @param {boolean} complete */
function report(complete) {
  return { prompt_id: "p1", status: "success", started_unix_s: 1, complete, steps: [loraStep(!complete)], nodes: [] };
}

test("a pending step's card says pending and shows no figure it does not have", () => {
  const card = stepCard(loraStep(true));
  assert.equal(card.pending, true);
  assert.ok(card.badges.some((b) => b.text === "pending"));
  const designed = designedCard(loraStep(true));
  const shown = (/** @type {any} */ c) => [...c.headline, ...c.more.flatMap((/** @type {any} */ b) => b.items ?? [])].map((f) => f.label);
  assert.ok(!shown(designed).includes(NORM));
  const done = designedCard(loraStep(false));
  assert.equal(done.pending, false);
  assert.ok(!done.badges.some((b) => b.text === "pending"));
  assert.ok(shown(done).includes(NORM));
});

test("a step whose figures never came says why among the monitoring problems", () => {
  const step = { ...loraStep(false), unfinished_reason: "the prompt ended interrupted: the figures were not computed" };
  const card = stepCard(step);
  assert.ok(card.monitorErrors.some((m) => m.includes("ended interrupted")));
  assert.equal(card.worst, "warning");
});

test("a report with pending steps is read again; a complete one is kept", async () => {
  const answers = [report(false), report(true)];
  let reads = 0;
  const store = new RunStore(async () => /** @type {any} */ ({ ok: true, json: async () => answers[Math.min(reads++, 1)] }));
  assert.equal((await store.report("p1")).complete, false);
  assert.equal((await store.report("p1")).complete, true);
  assert.equal((await store.report("p1")).complete, true);
  assert.equal(reads, 2);
  store.forget("p1");
  await store.report("p1");
  assert.equal(reads, 3);
});

test("the run event of a finished step draws the open run again, read anew", () => {
  const host = { fetchApi: async () => /** @type {any} */ ({ ok: true, json: async () => ({}) }), clientId: () => "c", toast: () => {} };
  const panel = new MonitorPanel(host);
  let draws = 0;
  panel.renderMain = () => { draws += 1; };
  panel.deepProfile.refresh = async () => {};
  panel.root = /** @type {any} */ ({}); // mounted
  panel.view = { name: "run", id: "p1" };
  panel.store.reports.set("p1", /** @type {any} */ (report(false)));
  panel.onRun({ prompt_id: "p1", status: "success", started_unix_s: 1, complete: true });
  assert.equal(draws, 1);
  assert.equal(panel.store.reports.has("p1"), false);
  panel.onRun({ prompt_id: "p2", status: "success", started_unix_s: 2, complete: true });
  assert.equal(draws, 1); // another run: the open one is not drawn again
  panel.view = { name: "compare", a: "p0", b: "p1" };
  panel.onRun({ prompt_id: "p1", status: "success", started_unix_s: 1, complete: true });
  assert.equal(draws, 2);
});

test("the text of a step finished after the prompt goes to its monitor node only", async () => {
  const { stepTextNode } = await import("../../web/lib/node_summary.mjs");
  const nodes = new Map([[3, { id: 3, comfyClass: "PipelineMonitorLora" }], [4, { id: 4, comfyClass: "KSampler" }]]);
  const graph = { getNodeById: (/** @type {any} */ id) => nodes.get(id) ?? null };
  assert.equal(stepTextNode(graph, { node_id: "3", text: ["applied: yes"] }), nodes.get(3));
  assert.equal(stepTextNode(graph, { node_id: "4" }), null); // another node under that id now
  assert.equal(stepTextNode(graph, { node_id: "9" }), null);
  assert.equal(stepTextNode(graph, { node_id: "54:3" }), null); // inside a subgraph: not drawn
  assert.equal(stepTextNode(null, { node_id: "3" }), null);
});

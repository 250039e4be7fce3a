// The deep profile in the panel: the card's blocks (wall vs device bars, top ops), the marks that
// keep deep timings apart from plain runs, and the button's calls to the route.
import assert from "node:assert/strict";
import { test } from "node:test";
import { DEEP_ROUTE, DeepProfileToggle, deepCompareNote, deepProfileBlocks, isDeepProfiled } from "../../web/lib/deep_profile_card.mjs";
import { designedCard } from "../../web/lib/step_cards.mjs";

const op = (name, n_calls, total_s, share_pct) => ({ name, n_calls, total_s, host_s: total_s, device_s: null, share_pct });
const cpuStep = {
  kind: "deep_profile",
  node_id: null,
  summary: { slowest_node: "#3 KSampler", prompt_wall_s: 2.5, overhead_ratio: 1.4, host_op_time_s: 1.9, device_time_s: null },
  details: {
    nodes: [
      { node_id: "3", class_type: "KSampler", wall_s: 2.0, host_op_time_s: 1.8, device_time_s: null, device_time_unknown_reason: "no CUDA", gpu_busy_pct: null,
        n_syncs: null, n_ops: 40, top_ops_by: "host", top_ops: [op("aten::conv2d", 20, 1.2, 66.7), op("aten::linear", 10, 0.5, 27.8)] },
      { node_id: "8", class_type: "VAEDecode", wall_s: 0.4, host_op_time_s: 0.1, device_time_s: null, gpu_busy_pct: null, n_syncs: null, n_ops: 3,
        top_ops_by: "host", top_ops: [op("aten::conv2d", 3, 0.1, 100)] },
    ],
    unknown_reasons: { device: "no CUDA activity was profiled" },
  },
};

test("the card shows wall time against host op time without CUDA, and the top ops per node", () => {
  const { sections, more } = deepProfileBlocks(cpuStep);
  const [bars, ops] = sections;
  assert.equal(bars.type, "bars");
  assert.deepEqual(bars.items.map((b) => b.label), ["#3 KSampler", "↳ host ops", "#8 VAEDecode", "↳ host ops"]);
  assert.equal(bars.items[0].fraction, 1);
  assert.match(bars.note, /no CUDA/);
  assert.equal(ops.type, "table");
  assert.deepEqual(ops.rows.map((r) => r.cells.slice(0, 2)), [["#3 KSampler", ""], ["  aten::conv2d", "20"], ["  aten::linear", "10"], ["#8 VAEDecode", ""], ["  aten::conv2d", "3"]]);
  assert.equal(ops.rows[0].tone, "node");
  assert.equal(ops.rows[1].cells[3], "66.7 %");
  assert.equal(ops.columns.length, 4); // fits the 312 px sidebar
  assert.equal(more[0].rows[0].title, "device time: no CUDA");
});

test("the card shows the six slowest nodes in the order they ran; Details has them all", () => {
  const step = structuredClone(cpuStep);
  step.details.nodes = Array.from({ length: 9 }, (_, i) => ({ ...cpuStep.details.nodes[1], node_id: String(i), wall_s: i === 4 ? 0.001 : 1 + i / 10 }));
  const { sections, more } = deepProfileBlocks(step);
  const shown = sections[0].items.filter((b) => b.label.startsWith("#")).map((b) => b.label);
  assert.deepEqual(shown, ["2", "3", "5", "6", "7", "8"].map((id) => `#${id} VAEDecode`));
  assert.match(sections[0].note, /3 more nodes in Details/);
  assert.equal(more[0].rows.length, 9);
});

test("with CUDA the bars compare wall time with device time", () => {
  const step = structuredClone(cpuStep);
  step.details.nodes[0].device_time_s = 1.0;
  step.details.nodes[1].device_time_s = 0;
  const [bars, ops] = deepProfileBlocks(step).sections;
  assert.equal(bars.title, "Wall time vs device time per node");
  assert.equal(bars.items[1].label, "↳ device");
  assert.equal(bars.items[1].text, "1.00 s");
  assert.equal(bars.items[1].fraction, 0.5);
  assert.match(ops.title, /by host time/); // top_ops_by decides
});

test("a profile without nodes says so with the reasons, and the designed card uses these blocks", () => {
  const empty = { kind: "deep_profile", details: { nodes: [], unknown_reasons: { nodes: "the profiler failed to start" } } };
  const { sections } = deepProfileBlocks(empty);
  assert.equal(sections[0].text, "No node was profiled.");
  assert.match(sections[0].note, /failed to start/);
  const card = designedCard(cpuStep);
  assert.equal(card.title, "Deep profile");
  assert.equal(card.sections[0].type, "bars");
  assert.ok(card.headline.some((f) => f.label === "profiler overhead" && f.value === "1.4×"));
});

test("deep-profiled runs are marked and a mixed comparison says so", () => {
  const deep = { step_kinds: ["deep_profile", "models"] };
  const plain = { step_kinds: ["models"] };
  assert.ok(isDeepProfiled(deep) && !isDeepProfiled(plain) && isDeepProfiled({ steps: [{ kind: "deep_profile" }] }));
  assert.equal(deepCompareNote(plain, plain), null);
  assert.match(deepCompareNote(plain, deep), /Only the newer run was deep-profiled/);
  assert.match(deepCompareNote(deep, plain), /Only the base run/);
  assert.match(deepCompareNote(deep, deep), /Both runs/);
});

class FakeButton {
  constructor() { this.dataset = {}; this.attributes = {}; this.textContent = ""; this.title = ""; this.classes = new Set(); this.listeners = {}; }
  setAttribute(k, v) { this.attributes[k] = v; }
  addEventListener(type, fn) { this.listeners[type] = fn; }
  append() {}
  get classList() { return { toggle: (c, on) => (on ? this.classes.add(c) : this.classes.delete(c)) }; }
  set className(v) { this.classes = new Set(String(v).split(" ")); }
}

test("the button reads the state, arms and cancels through the route", async () => {
  globalThis.document = { createElement: () => new FakeButton(), createTextNode: (t) => t };
  let armed = false;
  const calls = [];
  const toasts = [];
  const host = {
    fetchApi: async (route, init) => {
      calls.push([route, init?.method ?? "GET", init?.body ?? null]);
      if (init?.method === "POST") armed = JSON.parse(init.body).armed;
      return { ok: true, json: async () => ({ armed, active_prompt_id: null, last_prompt_id: null }) };
    },
    toast: (severity, summary, detail) => toasts.push(detail),
  };
  const toggle = new DeepProfileToggle(host);
  const button = toggle.element();
  await toggle.refresh();
  assert.equal(button.dataset.armed, "false");
  await toggle.set(true);
  assert.equal(button.dataset.armed, "true");
  assert.equal(button.textContent, "Deep profile: armed");
  assert.deepEqual(calls.at(-1), [DEEP_ROUTE, "POST", JSON.stringify({ armed: true })]);
  armed = false; // the server used the request up on the next prompt
  await toggle.refresh();
  assert.equal(button.dataset.armed, "false");
  assert.deepEqual(toasts, ["The next prompt will be deep-profiled."]);
  delete globalThis.document;
});

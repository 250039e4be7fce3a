import assert from "node:assert/strict";
import { test } from "node:test";
import { SampleBuffer, bandAt, runRange, timeLabels } from "../../web/lib/live_chart.mjs";
import { inputChangesLine } from "../../web/lib/report_view.mjs";

const change = (input, before, after, node_id = "3") => ({ node_id, node_type: "KSampler", input, before, after });

test("the inputs that changed read as one line; first run, no change and unknown are said", () => {
  const two = { compared_with_prompt_id: "p1", first_run: false, changes: [change("seed", "1", "2"), change("steps", "20", "30")], n_changes: 2, n_inputs_added: 0, n_inputs_removed: 0, unknown_reason: null };
  assert.equal(inputChangesLine(two)?.text, "seed 1 → 2, steps 20 → 30");
  assert.match(inputChangesLine(two)?.title ?? "", /#3 KSampler seed: 1 → 2/);
  assert.equal(inputChangesLine({ ...two, first_run: true, changes: [], n_changes: 0 })?.text, "first run");
  assert.equal(inputChangesLine({ ...two, changes: [], n_changes: 0 })?.text, "no inputs changed");
  assert.equal(inputChangesLine({ ...two, changes: [], n_changes: 0, n_inputs_added: 2 })?.text, "no values changed (2 inputs added)");
  const many = { ...two, changes: ["a", "b", "c", "d", "e"].map((k) => change(k, "0", "1")), n_changes: 60 };
  assert.equal(inputChangesLine(many)?.text, "a 0 → 1, b 0 → 1, c 0 → 1, d 0 → 1, +56 more");
  const restarted = { compared_with_prompt_id: "p0", first_run: false, changes: null, n_changes: null, unknown_reason: "ran before the server restarted" };
  assert.deepEqual(inputChangesLine(restarted), { text: "changes unknown", title: "ran before the server restarted" });
  assert.equal(inputChangesLine({ ...restarted, compared_with_prompt_id: null }), null, "no workflow name: nothing to say");
  assert.equal(inputChangesLine(null), null);
  assert.equal(inputChangesLine(undefined), null);
});

test("values stay text: markup in a value is carried as is, for textContent", () => {
  const evil = '<img src=x onerror="alert(1)">';
  const line = inputChangesLine({ compared_with_prompt_id: "p1", first_run: false, changes: [change("text", "a cat", evil)], n_changes: 1, unknown_reason: null });
  assert.equal(line?.text, `text a cat → ${evil}`);
});

const sample = (t, promptId = null) => ({ unix_time_s: t, process_rss_bytes: 100, gpus: [], node: null, prompt_id: promptId });

test("a run's zoom range comes from its summary, else from its samples, padded", () => {
  const buffer = new SampleBuffer();
  buffer.extend([sample(100), sample(101, "a"), sample(102, "a"), sample(109, "a"), sample(110)]);
  assert.deepEqual(runRange("a", { started_unix_s: 100.5, duration_s: 20 }, buffer.points), { from: 100.5, to: 121.5, promptId: "a", runStart: 100.5 });
  assert.deepEqual(runRange("a", null, buffer.points), { from: 101, to: 109.4, promptId: "a", runStart: 101 });
  const short = runRange("b", { started_unix_s: 50, duration_s: 0.007 }, []);
  assert.deepEqual([short?.from, short?.to], [50, 51], "a 7 ms run: the axis starts at its start and spans a second");
  assert.equal(timeLabels({ from: 50, to: 51 }, /** @type {any} */ (short))[0], "0.0 s", "never -0.5 s");
  assert.equal(timeLabels({ from: 49.98, to: 51 }, /** @type {any} */ (short))[0], "0.0 s", "never -0.0 s");
  assert.equal(runRange("missing", null, buffer.points), null);
});

test("clicking a band finds its run; labels count from the run's start when zoomed", () => {
  const buffer = new SampleBuffer();
  buffer.extend([sample(100), sample(101, "a"), sample(103, "a"), sample(104), sample(120, "b")]);
  assert.equal(bandAt(buffer.points, 102)?.promptId, "a");
  assert.equal(bandAt(buffer.points, 110), null);
  assert.deepEqual(timeLabels({ from: 99, to: 104 }, { from: 99, to: 104, promptId: "a", runStart: 100 }), ["-1.0 s", "0.0 s", "1.0 s", "2.0 s", "3.0 s", "4.0 s"]);
  assert.deepEqual(timeLabels({ from: 0, to: 120 }, null), ["-2 min", "-1.6 min", "-1.2 min", "-48 s", "-24 s", "now"]);
});

test("an input name several nodes share names the node in the line", () => {
  const change = (/** @type {string} */ id, /** @type {string} */ input, /** @type {string} */ before, /** @type {string} */ after) =>
    ({ node_id: id, node_type: "CLIPTextEncode", input, before, after });
  const texts = { changes: [change("6", "text", "a cat", "a dog"), change("7", "text", "blurry", "dark"), change("3", "seed", "1", "2")], n_changes: 3 };
  assert.equal(inputChangesLine(/** @type {any} */ (texts))?.text, "#6 text a cat → a dog, #7 text blurry → dark, seed 1 → 2");
});

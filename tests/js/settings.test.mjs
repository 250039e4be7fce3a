import assert from "node:assert/strict";
import { test } from "node:test";
import { SETTINGS, settingValue, settingsPusher, shouldPush } from "../../web/lib/settings.mjs";

const byKey = Object.fromEntries(SETTINGS.map((s) => [s.key, s]));

test("every server setting has a dialog entry with an id in the pack's namespace", () => {
  assert.deepEqual(Object.keys(byKey).sort(), ["max_report_files", "max_runs", "profile_enabled", "sample_interval_ms"]);
  for (const s of SETTINGS) assert.match(s.id, /^PipelineMonitor\./);
});

test("values are clamped, rounded and typed; nonsense is dropped", () => {
  assert.equal(settingValue(byKey.sample_interval_ms, 10), 50);
  assert.equal(settingValue(byKey.sample_interval_ms, "250.4"), 250);
  assert.equal(settingValue(byKey.max_runs, Number.NaN), null);
  assert.equal(settingValue(byKey.profile_enabled, "true"), null);
  assert.equal(settingValue(byKey.profile_enabled, false), false);
});

test("on page load only non-default values are sent; changes always", () => {
  const interval = byKey.sample_interval_ms;
  assert.equal(shouldPush(interval, 500, undefined), false);
  assert.equal(shouldPush(interval, 1000, undefined), true);
  assert.equal(shouldPush(interval, 500, 1000), true);
  assert.equal(shouldPush(interval, 500, 500), false);
});

test("changes made together go out as one request", async () => {
  const calls = [];
  const warnings = [];
  const fetchApi = async (route, init) => {
    calls.push([route, JSON.parse(String(init?.body))]);
    return new Response(JSON.stringify({ error: "max_runs must be between 1 and 1000" }), { status: calls.length > 1 ? 400 : 200 });
  };
  const push = settingsPusher(fetchApi, (m) => warnings.push(m), 5);
  push(byKey.max_runs, 20, 50);
  push(byKey.profile_enabled, false, true);
  push(byKey.sample_interval_ms, 500, undefined);
  await new Promise((r) => setTimeout(r, 30));
  assert.deepEqual(calls, [["/pipeline_monitor/settings", { max_runs: 20, profile_enabled: false }]]);
  push(byKey.max_runs, 30, 20);
  await new Promise((r) => setTimeout(r, 30));
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /between 1 and 1000/);
});

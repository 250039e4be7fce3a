import { test } from "node:test";
import assert from "node:assert/strict";
import { showToast } from "../../web/lib/toast.mjs";

/** A toast of frontend 1.58: add still there, but deprecated. */
function newToast() {
  /** @type {any[]} */
  const calls = [];
  const record = (/** @type {string} */ name) => (/** @type {any[]} */ ...args) => calls.push([name, ...args]);
  return { calls, add: record("add"), success: record("success"), info: record("info"), warning: record("warning"), error: record("error") };
}

test("the newer calls are used where the frontend has them, warn as warning", () => {
  const toast = newToast();
  showToast(toast, "success", "Saved", "report.json");
  showToast(toast, "info", "Node", undefined, 7000);
  showToast(toast, "warn", "Settings", "not applied", 6000);
  showToast(toast, "error", "Failed", "boom");
  assert.deepEqual(toast.calls, [
    ["success", "Saved", { description: "report.json", duration: 5000 }],
    ["info", "Node", { description: undefined, duration: 7000 }],
    ["warning", "Settings", { description: "not applied", duration: 6000 }],
    ["error", "Failed", { description: "boom", duration: 5000 }],
  ]);
});

test("add where the newer calls are missing (frontends 1.35 and 1.49), nothing without a toast", () => {
  /** @type {any[]} */
  const added = [];
  const toast = { add: (/** @type {any} */ message) => added.push(message) };
  showToast(toast, "warn", "Settings", "not applied", 6000);
  showToast(toast, "success", "Saved");
  assert.deepEqual(added, [
    { severity: "warn", summary: "Settings", detail: "not applied", life: 6000 },
    { severity: "success", summary: "Saved", detail: undefined, life: 5000 },
  ]);
  showToast(undefined, "error", "no toast yet");
  showToast({}, "error", "a toast without either");
});

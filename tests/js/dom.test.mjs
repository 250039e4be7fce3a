// The panel renders run data only as text: h() sets textContent / text nodes, never HTML, and no
// web file uses an HTML sink.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { summaryLines } from "../../web/lib/node_summary.mjs";

class FakeElement {
  constructor(tag) {
    this.tagName = tag;
    this.children = [];
    this.attributes = {};
    this.dataset = {};
    this.listeners = {};
    this.textContent = "";
    this.className = "";
  }
  set innerHTML(_) {
    throw new Error("innerHTML must never be used");
  }
  setAttribute(name, value) {
    this.attributes[name] = value;
  }
  addEventListener(type, fn) {
    this.listeners[type] = fn;
  }
  append(...nodes) {
    this.children.push(...nodes);
  }
}

globalThis.document = /** @type {any} */ ({
  createElement: (tag) => new FakeElement(tag),
  createTextNode: (data) => ({ nodeType: 3, data }),
});
const { h } = await import("../../web/lib/dom.mjs");

const EVIL = '<img src=x onerror="globalThis.pwned=1">';

test("text and children become text, attributes are plain values", () => {
  const el = /** @type {any} */ (h("div", { class: "c", text: EVIL, title: EVIL, dataset: { id: EVIL } }, EVIL, 5, null, false));
  assert.equal(el.textContent, EVIL);
  assert.equal(el.attributes.title, EVIL);
  assert.equal(el.dataset.id, EVIL);
  assert.deepEqual(el.children, [{ nodeType: 3, data: EVIL }, { nodeType: 3, data: "5" }]);
  assert.equal(globalThis.pwned, undefined);
});

test("event handlers must be functions, never attribute strings", () => {
  assert.throws(() => h("div", { onclick: "alert(1)" }), /must be a function/);
  const fn = () => {};
  assert.equal(/** @type {any} */ (h("button", { onclick: fn })).listeners.click, fn);
});

test("no web file uses an HTML sink", () => {
  const web = fileURLToPath(new URL("../../web/", import.meta.url));
  const files = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.(m?js)$/.test(entry.name)) files.push(path);
    }
  };
  walk(web);
  assert.ok(files.length >= 8, files.join(", "));
  for (const file of files) {
    const source = readFileSync(file, "utf8");
    for (const sink of ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"]) {
      const code = source.split("\n").filter((line) => !line.trim().startsWith("//")).join("\n");
      assert.ok(!code.includes(sink), `${file} uses ${sink}`);
    }
  }
});

test("node summary lines come only from a list of text", () => {
  assert.deepEqual(summaryLines(["a\nb", "", "c"]), ["a", "b", "c"]);
  assert.deepEqual(summaryLines("abc"), [], "a string is not a ui list");
  assert.deepEqual(summaryLines(undefined), []);
});

test("wrapped summary lines grow with the text and shrink with the width", async () => {
  const { wrappedLineCount } = await import("../../web/lib/node_summary.mjs");
  assert.equal(wrappedLineCount(["short"], 300), 1);
  assert.equal(wrappedLineCount(["x".repeat(100)], 335), 2);
  assert.equal(wrappedLineCount(["a", "x".repeat(100)], 67), 11);
});

test("a node summary shows at most MAX_LINES lines, the last saying how many more", async () => {
  const { MAX_LINES, shownLines, summaryHeight } = await import("../../web/lib/node_summary.mjs");
  const lines = Array.from({ length: MAX_LINES + 3 }, (_, i) => `line ${i}`);
  const shown = shownLines(lines);
  assert.equal(shown.length, MAX_LINES);
  assert.equal(shown[MAX_LINES - 1], "… 4 more lines (hover for all)");
  assert.deepEqual(shownLines(["a", "b"]), ["a", "b"]);
  assert.equal(summaryHeight(2) - summaryHeight(1), 15, "one line of 15 px each: the node grows to exactly its lines");
});

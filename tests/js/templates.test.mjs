import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { test } from "node:test";
import { packFolder, templateDescription } from "../../web/lib/templates.mjs";

test("a template card's text is the workflow's extra.info", () => {
  assert.equal(templateDescription({ extra: { info: "  Shows X.  " } }), "Shows X.");
  assert.equal(templateDescription({ extra: {} }), null);
  assert.equal(templateDescription(null), null);
});

test("the pack's folder comes from the extension's URL", () => {
  assert.equal(packFolder("http://h:8188/extensions/pipeline-monitor/lib/templates.mjs"), "pipeline-monitor");
  assert.equal(packFolder("http://h/api/extensions/My%20Pack/pipeline_monitor.js"), "My Pack");
  assert.equal(packFolder("http://h/other/x.js"), null);
});

test("every example says on its card which models it needs, in the two lines the card shows", () => {
  const folder = new URL("../../example_workflows/", import.meta.url);
  for (const file of readdirSync(folder).filter((f) => f.endsWith(".json"))) {
    const text = templateDescription(JSON.parse(readFileSync(new URL(file, folder), "utf8")));
    assert.ok(text, file);
    const needs = text.indexOf("Needs ");
    assert.ok(needs >= 0 && needs < 220, `${file}: the models it needs are said early: ${text.slice(0, 240)}`);
  }
});

test("a card still showing the frontend's fallback is the one to describe", async () => {
  const { fallbackDescription } = await import("../../web/lib/templates.mjs");
  assert.equal(fallbackDescription("text_to_image-lora"), "text to image lora");
});

test("a card's title is the workflow's extra.title, else its file name as words", async () => {
  const { templateTitle } = await import("../../web/lib/templates.mjs");
  assert.equal(templateTitle("dump_and_compare", { extra: { title: "  Dump and compare  " } }), "Dump and compare");
  assert.equal(templateTitle("image_to-video", null), "Image to video");
  const folder = new URL("../../example_workflows/", import.meta.url);
  for (const file of readdirSync(folder).filter((f) => f.endsWith(".json"))) {
    const title = templateTitle(file.replace(/\.json$/, ""), JSON.parse(readFileSync(new URL(file, folder), "utf8")));
    assert.ok(/^[A-Z]/.test(title) && !title.includes("_"), `${file}: a title people read, not a file name: ${title}`);
  }
});

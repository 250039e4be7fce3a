// The template browser's cards for this pack's example workflows. ComfyUI's frontend (1.35) lists a
// pack's templates by file name only (GET /workflow_templates gives names) and shows that name,
// dashes and underscores as spaces, as each card's description. The description a workflow file
// carries in `extra.info` is what a user needs (what it shows, which models it needs), so this
// module puts it on the pack's cards (in place of the name on frontend 1.35, under the title on 1.49,
// which shows none): a MutationObserver notices cards as the dialog renders them
// (`[data-testid="template-workflow-<name>"]`, a name the pack lists, still showing the name as its
// description: thumbnails are blob URLs, so the name is what identifies a card), reads each
// workflow once through the API and sets the description's text and tooltip.
// Each card's title, the bare file name, becomes the workflow's `extra.title` (or the name as words).
// Text only (textContent / title), never markup. No timers: the observer runs on DOM changes.

const CARD_SELECTOR = '[data-testid^="template-workflow-"]';
const OWN_CLASS = "pm-template-description"; // the description this module adds where the card has none

/**
 * The card text of a workflow file: its extra.info, trimmed; null without one.
 * @param {any} workflow
 * @returns {string | null}
 */
export function templateDescription(workflow) {
  const info = workflow?.extra?.info;
  return typeof info === "string" && info.trim() ? info.trim() : null;
}

/**
 * The card title of a workflow file: its extra.title, else its file name as words ("dump_and_compare"
 * -> "Dump and compare"); the frontend shows the bare file name.
 * @param {string} name @param {any} workflow
 */
export function templateTitle(name, workflow) {
  const title = workflow?.extra?.title;
  if (typeof title === "string" && title.trim()) return title.trim();
  const words = fallbackDescription(name);
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/**
 * The element of a card that shows its file name as the title: the innermost one whose whole text
 * it is (an h3 since frontend 1.49).
 * @param {Element} card @param {string} name
 * @returns {Element | null}
 */
export function titleElement(card, name) {
  for (const el of card.querySelectorAll("h3, p, div, span")) {
    if (el.childElementCount === 0 && el.textContent?.trim() === name) return el;
  }
  return null;
}

/**
 * The pack's folder under custom_nodes, from this module's URL (/extensions/<folder>/lib/...): the
 * key of the pack's templates in GET /workflow_templates.
 * @param {string} moduleUrl
 */
export function packFolder(moduleUrl) {
  const match = /\/extensions\/([^/]+)\//.exec(new URL(moduleUrl).pathname);
  return match ? decodeURIComponent(match[1]) : null;
}

/**
 * The description the frontend gives a custom-node template: its name, dashes and underscores as
 * spaces (getTemplateDescription in the frontend's useTemplateWorkflows).
 * @param {string} name
 */
export function fallbackDescription(name) {
  return name.replace(/[-_]/g, " ").trim();
}

/**
 * The element of a card that shows the fallback description: the innermost one whose whole text it
 * is (a <p> in frontend 1.35; found by its text so a later card layout works too).
 * @param {Element} card @param {string} fallback
 * @returns {Element | null}
 */
export function descriptionElement(card, fallback) {
  for (const el of card.querySelectorAll("p, div, span")) {
    if (el.childElementCount === 0 && el.textContent?.trim() === fallback) return el;
  }
  return null;
}

/**
 * Watch the document for the pack's template cards and give each its workflow's description.
 * @param {Document} doc
 * @param {() => Promise<string[]>} fetchNames the pack's template names
 * @param {(name: string) => Promise<any>} fetchWorkflow reads one template's JSON
 * @returns {MutationObserver | null}
 */
export function describeTemplateCards(doc, fetchNames, fetchWorkflow) {
  if (typeof MutationObserver === "undefined" || !doc?.body) return null;
  /** @type {Promise<Set<string>> | null} */
  let names = null;
  /** @type {Map<string, Promise<any>>} */
  const workflows = new Map();
  const describe = async (/** @type {Element} */ card) => {
    const name = card.getAttribute("data-testid")?.slice("template-workflow-".length);
    if (!name || card.querySelector(`.${OWN_CLASS}`)) return;
    const fallback = descriptionElement(card, fallbackDescription(name));
    const title = fallback ? null : card.querySelector("h3");
    const named = titleElement(card, name);
    if (!fallback && !title && !named) return;
    names ??= fetchNames().then((list) => new Set(list)).catch(() => new Set());
    if (!(await names).has(name)) return;
    if (!workflows.has(name)) workflows.set(name, fetchWorkflow(name).catch(() => null));
    const workflow = await workflows.get(name);
    if (named && named.textContent?.trim() === name) {
      named.textContent = templateTitle(name, workflow);
      named.setAttribute("title", `${name}.json`);
    }
    const text = templateDescription(workflow);
    if (!text || (!fallback && !title)) return;
    if (fallback) {
      if (fallback.textContent?.trim() !== fallbackDescription(name)) return;
      fallback.textContent = text;
      fallback.setAttribute("title", text);
      return;
    }
    // frontend 1.49 shows no description for a pack's template: one goes under the title
    if (card.querySelector(`.${OWN_CLASS}`)) return;
    const own = card.ownerDocument.createElement("p");
    own.className = `${OWN_CLASS} m-0 line-clamp-2 text-sm text-muted`;
    own.textContent = text;
    own.setAttribute("title", text);
    /** @type {Element} */ (title).after(own);
  };
  const observer = new MutationObserver((records) => {
    for (const record of records) {
      for (const added of record.addedNodes) {
        if (!(added instanceof Element)) continue;
        if (added.matches(CARD_SELECTOR)) void describe(added);
        else if (added.firstElementChild) for (const card of added.querySelectorAll(CARD_SELECTOR)) void describe(card);
      }
    }
  });
  observer.observe(doc.body, { childList: true, subtree: true });
  return observer;
}

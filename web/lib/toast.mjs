// ComfyUI's toast as each frontend wants it: frontend 1.58 deprecates `toast.add` in favour of
// `toast.success/info/warning/error(title, {description, duration})`; earlier frontends (1.35,
// 1.49) only have `add({severity, summary, detail, life})`. The newer calls where present, `add`
// where not, nothing where there is no toast at all.

/** The panel's severities -> the newer frontends' method names. */
const METHODS = { success: "success", info: "info", warn: "warning", error: "error" };

/**
 * @param {any} toast `app.extensionManager.toast` (absent before the app is set up)
 * @param {"success" | "info" | "warn" | "error"} severity
 * @param {string} summary
 * @param {string} [detail]
 * @param {number} [life] milliseconds on screen
 */
export function showToast(toast, severity, summary, detail, life = 5000) {
  if (!toast) return;
  const method = toast[METHODS[severity]];
  if (typeof method === "function") method.call(toast, summary, { description: detail, duration: life });
  else if (typeof toast.add === "function") toast.add({ severity, summary, detail, life });
}

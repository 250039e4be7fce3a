// The page's live subscription: POST /pipeline_monitor/live {watching: true} when something that
// shows live figures is shown (the panel, the top-bar readout) and every `renewMs` while one stays
// shown, {watching: false} when none is.
// "Shown" is judged here, not from the frontend's tab callbacks: frontends 1.49 and 1.58 drop the
// tab's element on a switch to another sidebar tab without calling its destroy(), and call
// render() again on a new element when the tab comes back. So each viewer's root is followed: it
// leaving the document, becoming invisible (no box, scrolled out) or the browser tab being hidden
// pauses; showing it again resumes (with a backfill of what the server kept meanwhile). One
// renewal interval at most, whatever the frontend calls; the requests are sent one after another,
// so a quick hide-and-show cannot reach the server in the wrong order.

export const RENEW_MS = 10_000; // the server forgets a watcher after 30 s without renewal

/**
 * @typedef {{fetchApi: (route: string, init?: RequestInit) => Promise<Response>, clientId: () => string | undefined}} LiveHost
 */

export class LiveWatch {
  /**
   * @param {LiveHost} host
   * @param {(points: unknown[]) => void} onPoints the points a (re)start backfilled
   * @param {{renewals: number}} stats counts the watching requests
   */
  constructor(host, onPoints, stats) {
    this.host = host;
    this.onPoints = onPoints;
    this.stats = stats;
    this.renewMs = RENEW_MS;
    /** @type {ReturnType<typeof setInterval> | null} */
    this.timer = null;
    /** @type {Map<string, {root: HTMLElement, intersecting: boolean, disconnect: () => void}>} by viewer */
    this.viewers = new Map();
    this.session = 0; // bumps on every pause, so a late backfill of a paused session is dropped
    /** @type {Promise<void>} */
    this.sending = Promise.resolve();
  }

  /** Whether the server is being asked for samples now. */
  get active() {
    return this.timer !== null;
  }

  /**
   * Follow `root` (a viewer's freshly rendered element, e.g. "panel"): live while it is shown.
   * Replaces the element that viewer had before without a pause in between when that one was live.
   * @param {string} viewer @param {HTMLElement} root
   */
  attach(viewer, root) {
    this.viewers.get(viewer)?.disconnect();
    const doc = root.ownerDocument;
    const update = () => this.update();
    const mutations = new MutationObserver(update);
    mutations.observe(doc, { childList: true, subtree: true });
    const entry = {
      root,
      intersecting: true, // until the observer says otherwise
      disconnect: () => {
        mutations.disconnect();
        intersection.disconnect();
        doc.removeEventListener("visibilitychange", update);
      },
    };
    const intersection = new IntersectionObserver((entries) => {
      entry.intersecting = entries[entries.length - 1].isIntersecting;
      update();
    });
    intersection.observe(root);
    doc.addEventListener("visibilitychange", update);
    this.viewers.set(viewer, entry);
    update();
  }

  /** Stop following a viewer (the tab's destroy, the readout switched off). @param {string} viewer */
  detach(viewer) {
    this.viewers.get(viewer)?.disconnect();
    this.viewers.delete(viewer);
    this.update();
  }

  /** Whether a viewer's root can be seen now. @param {string} [viewer] any viewer when not given */
  shown(viewer) {
    const seen = (/** @type {{root: HTMLElement, intersecting: boolean}} */ v) =>
      v.root.isConnected && v.intersecting && !v.root.ownerDocument.hidden;
    if (viewer !== undefined) {
      const v = this.viewers.get(viewer);
      return Boolean(v && seen(v));
    }
    return [...this.viewers.values()].some(seen);
  }

  update() {
    const shown = this.shown();
    if (shown && this.timer === null) {
      const session = this.session;
      this.send(true, session, true);
      this.timer = setInterval(() => this.send(true, session, false), this.renewMs);
    } else if (!shown && this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
      this.session += 1;
      this.send(false, this.session, false);
    }
  }

  /**
   * @param {boolean} watching @param {number} session @param {boolean} backfill
   */
  send(watching, session, backfill) {
    const clientId = this.host.clientId();
    if (!clientId) return;
    if (watching) this.stats.renewals += 1;
    this.sending = this.sending.then(async () => {
      try {
        const response = await this.host.fetchApi("/pipeline_monitor/live", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ client_id: clientId, watching, backfill }),
        });
        const body = await response.json();
        if (watching && session === this.session && this.active && Array.isArray(body?.points)) this.onPoints(body.points);
      } catch (error) {
        console.warn("Pipeline Monitor: live view request failed", error);
      }
    });
  }
}

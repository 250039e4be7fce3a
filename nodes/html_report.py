"""`GET /pipeline_monitor/runs/{prompt_id}/report.html`: a run as a self-contained HTML page.

`?download=1` sends it as an attachment. The Content-Security-Policy forbids every load (the
page needs none: inline SVG and CSS only), so even a string that escaped escaping could not
fetch or run anything.
"""

from __future__ import annotations

import logging

from aiohttp import web

from ..monitors.exporters.html import CSP, render_html
from ..monitors.store import is_valid_run_id
from .runtime import get_runtime

log = logging.getLogger(__name__)

HTML_HEADERS = {
    "Content-Type": "text/html; charset=utf-8",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": CSP + "; frame-ancestors 'self'",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": message},
        status=status,
        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"},
    )


def _not_found() -> web.Response:
    return _json_error(404, "unknown run id")


async def get_report_html(request: web.Request) -> web.Response:
    run_id = request.match_info.get("prompt_id", "")
    if not is_valid_run_id(run_id):
        return _not_found()
    report = get_runtime().store.get(run_id)
    if report is None:
        return _not_found()
    try:
        # errors="replace": a prompt with undecodable bytes (lone surrogates) still renders
        body = render_html(report).encode("utf-8", errors="replace")
    except Exception as exc:  # a malformed report file must not become a 500 with a traceback page
        log.warning("pipeline monitor: HTML report of %s failed: %s: %s", run_id, type(exc).__name__, exc)
        return _json_error(500, "report could not be rendered")
    headers = dict(HTML_HEADERS)
    if request.query.get("download") in ("1", "true"):
        headers["Content-Disposition"] = f'attachment; filename="pipeline_monitor_{run_id}.html"'
    return web.Response(body=body, headers=headers)

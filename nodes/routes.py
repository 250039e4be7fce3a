"""HTTP routes under /pipeline_monitor/ (ComfyUI mirrors them under /api/): the pack's only routes.

Ids from requests are validated against a strict pattern and looked up in the store; no file
path is ever built from raw request text. Every JSON answer goes through json_response (nosniff,
no-store). What the routes serve is made in monitors/: the HTML report (exporters/html.py), the
Prometheus exposition (exporters/prometheus.py), settings (settings.py), the live view (live.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time

from aiohttp import web

from ..monitors.deep_profile import get_controller as deep_profile_controller
from ..monitors.dumps.files import DUMP_SUFFIX, NPY_SUFFIX, DumpError, list_dumps, resolve_file
from ..monitors.engine import live
from ..monitors.engine.settings import SettingsError, apply_settings, current_settings
from ..monitors.engine.store import is_valid_run_id
from ..monitors.exporters.html import CSP, render_html
from . import dump_paths, metrics
from .live import get_watchers
from .runtime import get_runtime

log = logging.getLogger(__name__)

ROUTE_PREFIX = "/pipeline_monitor"
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
MAX_LIST_LIMIT = 1000
METRICS_WAIT_FOR_RUNS_S = 2.0
MAX_WAIT_S = 600.0  # GET /runs/{prompt_id}?wait_s=: the longest a request waits for its run
WAIT_POLL_S = 0.1
# The HTML report needs no load at all (inline SVG and CSS): even a string that escaped escaping
# could not fetch or run anything.
HTML_HEADERS = {
    **SECURITY_HEADERS,
    "Content-Type": "text/html; charset=utf-8",
    "Content-Security-Policy": CSP + "; frame-ancestors 'self'",
    "Referrer-Policy": "no-referrer",
}


def json_response(data, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, headers=SECURITY_HEADERS)


def error_response(status: int, message: str) -> web.Response:
    return json_response({"error": message}, status=status)


async def list_runs(request: web.Request) -> web.Response:
    try:
        limit = int(request.query.get("limit", "100"))
    except ValueError:
        return error_response(400, "limit must be an integer")
    limit = min(max(limit, 1), MAX_LIST_LIMIT)
    runtime = get_runtime()
    return json_response(
        {
            "runs": runtime.store.summaries(limit),
            "active_prompt_id": runtime.recorder.active_prompt_id,
            "profile_enabled": runtime.recorder.profile_enabled,
        }
    )


async def get_run(request: web.Request) -> web.Response:
    """One run's report; `?wait_s=N` (at most MAX_WAIT_S) waits for a run that has not finished
    yet (a headless client that just queued it), then answers 404 if it still has not, and for a
    run whose steps are pending (`complete: false`), then answers it as it is."""
    run_id = request.match_info.get("prompt_id", "")
    if not is_valid_run_id(run_id):
        return error_response(404, "unknown run id")
    try:
        wait_s = float(request.query.get("wait_s", "0"))
    except ValueError:
        wait_s = math.nan
    if not math.isfinite(wait_s):
        return error_response(400, "wait_s must be a number of seconds")
    wait_s = min(max(wait_s, 0.0), MAX_WAIT_S)
    store = get_runtime().store
    deadline = time.monotonic() + wait_s
    report = store.get(run_id)
    while (report is None or report.get("complete") is False) and time.monotonic() < deadline:
        await asyncio.sleep(WAIT_POLL_S)
        report = store.get(run_id)
    if report is None:
        return error_response(404, "unknown run id")
    return json_response(report)


async def get_report_html(request: web.Request) -> web.Response:
    """A run as a self-contained HTML page; `?download=1` sends it as an attachment."""
    run_id = request.match_info.get("prompt_id", "")
    report = get_runtime().store.get(run_id) if is_valid_run_id(run_id) else None
    if report is None:
        return error_response(404, "unknown run id")
    try:
        # errors="replace": a prompt with undecodable bytes (lone surrogates) still renders
        body = render_html(report).encode("utf-8", errors="replace")
    except Exception as exc:  # a malformed report file must not become a 500 with a traceback page
        log.warning("pipeline monitor: HTML report of %s failed: %s: %s", run_id, type(exc).__name__, exc)
        return error_response(500, "report could not be rendered")
    headers = dict(HTML_HEADERS)
    if request.query.get("download") in ("1", "true"):
        headers["Content-Disposition"] = f'attachment; filename="pipeline_monitor_{run_id}.html"'
    return web.Response(body=body, headers=headers)


NOT_JSON = object()


async def read_json(request: web.Request):
    """The request's JSON body, or NOT_JSON."""
    try:
        return await request.json()
    except Exception:
        return NOT_JSON


def live_status(runtime) -> dict:
    return {**get_watchers().status(), "sample_interval_ms": round(runtime.sampler.interval_s * 1000)}


async def post_live(request: web.Request) -> web.Response:
    """{client_id, watching: bool} -> status, plus the recent samples when a watch starts."""
    body = await read_json(request)
    if body is NOT_JSON:
        return error_response(400, "body must be JSON")
    try:
        client_id, watching, backfill = live.watch_request(body)
    except live.WatchRequestError as exc:
        return error_response(400, str(exc))
    runtime = get_runtime()
    watchers = get_watchers()
    if watching and watchers.connected(client_id) is False:
        return error_response(404, "no websocket is open with this client_id")
    watchers.watch(client_id, watching, runtime.sampler, runtime.recorder)
    result = live_status(runtime)
    if watching and backfill:
        result["points"] = live.backfill_points(runtime.sampler)
    return json_response(result)


async def get_live(request: web.Request) -> web.Response:
    return json_response(live_status(get_runtime()))


async def get_settings(request: web.Request) -> web.Response:
    return json_response(current_settings(get_runtime()))


async def post_settings(request: web.Request) -> web.Response:
    body = await read_json(request)
    if body is NOT_JSON:
        return error_response(400, "body must be JSON")
    try:
        return json_response(apply_settings(get_runtime(), body))
    except SettingsError as exc:
        return error_response(400, str(exc))


async def deep_profile(request: web.Request) -> web.Response:
    """GET: whether the next prompt is to be deep-profiled; POST {armed: bool}: ask for it (one
    prompt, then it turns itself off) or take the request back."""
    controller = deep_profile_controller()
    if request.method == "POST":
        body = await read_json(request)
        if not isinstance(body, dict) or not isinstance(body.get("armed"), bool):
            return error_response(400, "body must be JSON {\"armed\": true|false}")
        controller.arm(body["armed"])
    return json_response(controller.state())


async def get_metrics(request: web.Request) -> web.Response:
    if metrics.PROMETHEUS_MISSING:
        return web.Response(status=503, text=metrics.PROMETHEUS_MISSING + "\n", headers=SECURITY_HEADERS)
    try:
        # Runs are counted where reports are written, in batches after the prompts: a scrape has
        # the pending ones counted (off the event loop) so it counts every run that has finished.
        await asyncio.to_thread(get_runtime().store.settle, METRICS_WAIT_FOR_RUNS_S)
        body, content_type = metrics.get_fleet_metrics().exposition(request.headers.get("Accept", ""))
    except Exception as exc:  # a scrape must never take the server down or leak a traceback
        log.warning("pipeline monitor: metrics failed: %s: %s", type(exc).__name__, exc)
        return web.Response(status=500, text="metrics unavailable\n", headers=SECURITY_HEADERS)
    return web.Response(body=body, headers={**SECURITY_HEADERS, "Content-Type": content_type})


async def list_dump_files(request: web.Request) -> web.Response:
    return json_response({"dumps": list_dumps(dump_paths.dumps_dir())})


async def get_dump(request: web.Request) -> web.StreamResponse:
    """A dump file, only by a validated plain name, only directly inside the dumps folder."""
    try:
        path = resolve_file(
            dump_paths.dumps_dir(), request.match_info.get("name", ""), (DUMP_SUFFIX, NPY_SUFFIX)
        )
    except DumpError:
        return error_response(404, "unknown dump")
    return web.FileResponse(
        path,
        headers={
            **SECURITY_HEADERS,
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'attachment; filename="{os.path.basename(path)}"',
        },
    )


def register(routes: web.RouteTableDef) -> None:
    routes.get(f"{ROUTE_PREFIX}/runs")(list_runs)
    routes.get(f"{ROUTE_PREFIX}/runs/{{prompt_id}}")(get_run)
    routes.get(f"{ROUTE_PREFIX}/runs/{{prompt_id}}/report.html")(get_report_html)
    routes.get(f"{ROUTE_PREFIX}/live")(get_live)
    routes.post(f"{ROUTE_PREFIX}/live")(post_live)
    routes.get(f"{ROUTE_PREFIX}/settings")(get_settings)
    routes.post(f"{ROUTE_PREFIX}/settings")(post_settings)
    routes.get(f"{ROUTE_PREFIX}/dumps")(list_dump_files)
    routes.get(f"{ROUTE_PREFIX}/dumps/{{name}}")(get_dump)
    routes.get(f"{ROUTE_PREFIX}/metrics")(get_metrics)
    routes.get(f"{ROUTE_PREFIX}/deep_profile")(deep_profile)
    routes.post(f"{ROUTE_PREFIX}/deep_profile")(deep_profile)


def register_with_server() -> bool:
    """Add the routes to ComfyUI's route table; they must exist before ComfyUI calls add_routes()."""
    try:
        from server import PromptServer

        routes = PromptServer.instance.routes
    except Exception as exc:  # imported outside a running ComfyUI (tools, tests): stay silent
        log.debug("pipeline monitor: routes not registered, no PromptServer (%s)", exc)
        return False
    register(routes)
    return True

"""HTTP routes under /pipeline_monitor/ (ComfyUI mirrors them under /api/).

Ids from requests are validated against a strict pattern and looked up in the store; no file
path is ever built from raw request text.
"""

from __future__ import annotations

import logging
import os

from aiohttp import web

from ..monitors.dumps.files import DUMP_SUFFIX, NPY_SUFFIX, DumpError, list_dumps, resolve_file
from ..monitors.store import is_valid_run_id
from . import dump_paths, html_report, live, metrics, settings
from .runtime import get_runtime

log = logging.getLogger(__name__)

ROUTE_PREFIX = "/pipeline_monitor"
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
MAX_LIST_LIMIT = 1000


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
    run_id = request.match_info.get("prompt_id", "")
    if not is_valid_run_id(run_id):
        return error_response(404, "unknown run id")
    report = get_runtime().store.get(run_id)
    if report is None:
        return error_response(404, "unknown run id")
    return json_response(report)


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
    routes.get(f"{ROUTE_PREFIX}/runs/{{prompt_id}}/report.html")(html_report.get_report_html)
    routes.get(f"{ROUTE_PREFIX}/live")(live.get_live)
    routes.post(f"{ROUTE_PREFIX}/live")(live.post_live)
    routes.get(f"{ROUTE_PREFIX}/settings")(settings.get_settings)
    routes.post(f"{ROUTE_PREFIX}/settings")(settings.post_settings)
    routes.get(f"{ROUTE_PREFIX}/dumps")(list_dump_files)
    routes.get(f"{ROUTE_PREFIX}/dumps/{{name}}")(get_dump)
    routes.get(f"{ROUTE_PREFIX}/metrics")(metrics.get_metrics)


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

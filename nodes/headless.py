"""Headless clients: every run's digest pushed to the client that queued the prompt.

A script that posts `{"prompt": ..., "client_id": "<its id>"}` and listens on `/ws?clientId=<its id>`
gets, at the end of each of its prompts, the websocket event `pipeline_monitor.run_digest`
(monitors/engine/run_digest.py): status, duration, peaks, the slowest nodes, the subgraph roll-ups,
the findings and the report's URLs. Only that client: ComfyUI passes the queuing client's id in the
prompt's `extra_data.client_id`, kept here (bounded) from the prompt's end until the store hands
the report to its listeners. A prompt queued without a client id gets no digest (the broadcast
`pipeline_monitor.run` and `GET /pipeline_monitor/runs/{prompt_id}?wait_s=` remain).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping

from ..monitors.engine.run_digest import DIGEST_EVENT, run_digest

log = logging.getLogger(__name__)

MAX_PENDING = 256  # prompts whose report is not yet announced (a store writes in batches)
MAX_CLIENT_ID_CHARS = 200

_lock = threading.Lock()
_client_of: OrderedDict[str, str] = OrderedDict()


def remember_client(prompt_id: str, extra_data) -> None:
    """At the prompt's end: which client queued it (None: a prompt queued without a client id)."""
    client_id = extra_data.get("client_id") if isinstance(extra_data, Mapping) else None
    if not isinstance(client_id, str) or not client_id or len(client_id) > MAX_CLIENT_ID_CHARS:
        return
    with _lock:
        _client_of[str(prompt_id)] = client_id
        while len(_client_of) > MAX_PENDING:
            _client_of.popitem(last=False)


def _send(event: str, data: dict, sid: str) -> None:
    from server import PromptServer

    PromptServer.instance.send_sync(event, data, sid)


def send_digest(report: Mapping, send=_send) -> bool:
    """A store listener: the run's digest to the client that queued it; whether one was sent."""
    with _lock:
        client_id = _client_of.pop(str(report.get("prompt_id")), None)
    if client_id is None:
        return False
    try:
        send(DIGEST_EVENT, run_digest(report), client_id)
        return True
    except Exception as exc:
        log.debug("pipeline monitor: run digest not sent: %s", exc)
        return False

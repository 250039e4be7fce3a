"""Live view, server side: sampler ticks pushed as `pipeline_monitor.sample` to watching clients only.

A browser tab declares that it watches (`POST /pipeline_monitor/live {"client_id", "watching"}`)
and renews that within WATCH_TTL_S while its panel is open. A tab that closes its panel says so;
one that dies stops renewing or drops its websocket, and its pushes stop. With no watcher left the
sink is taken off the sampler, so the sampler (which keeps running for sampled peaks) pays
nothing for the live view.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from aiohttp import web

from ..monitors.probes import Snapshot
from .runtime import get_runtime

log = logging.getLogger(__name__)

EVENT = "pipeline_monitor.sample"
WATCH_TTL_S = 30.0  # the panel renews every 10 s
MAX_WATCHERS = 64
BACKFILL_S = 600.0  # history returned when a watch starts (the chart shows the last minutes)
MAX_BACKFILL_POINTS = 1200
CLIENT_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class LiveWatchers:
    """Client ids that watch, with expiry times; owns the sampler sink while anyone watches.

    `send(event, data, sid)` delivers one event to one client; `connected(sid)` says whether that
    client still has a websocket (None: unknown, trust the expiry alone).
    """

    def __init__(
        self,
        send: Callable[[str, dict, str], None],
        connected: Callable[[str], bool | None] = lambda sid: None,
        ttl_s: float = WATCH_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._send = send
        self._connected = connected
        self._ttl_s = ttl_s
        self._clock = clock
        self._expiry: dict[str, float] = {}
        self._lock = threading.Lock()
        self._sampler = None  # the sampler our sink is attached to, None when detached
        self._recorder = None
        self.pushed = 0

    def watch(self, client_id: str, watching: bool, sampler, recorder=None) -> None:
        # Sink changes happen under our lock so a tick that detaches cannot undo a new watch; the
        # sampler calls sinks outside its own lock, so this cannot deadlock.
        with self._lock:
            if watching:
                if client_id not in self._expiry and len(self._expiry) >= MAX_WATCHERS:
                    del self._expiry[min(self._expiry, key=self._expiry.get)]
                self._expiry[client_id] = self._clock() + self._ttl_s
            else:
                self._expiry.pop(client_id, None)
            self._recorder = recorder
            wanted = sampler if self._expiry else None
            if wanted is not self._sampler:
                if self._sampler is not None:
                    self._sampler.remove_sink(self.on_sample)
                if wanted is not None:
                    wanted.add_sink(self.on_sample)
                self._sampler = wanted

    def connected(self, client_id: str) -> bool | None:
        return self._connected(client_id)

    def clients(self) -> list[str]:
        """Watchers still renewing and connected; drops the others."""
        now = self._clock()
        with self._lock:
            for client_id in list(self._expiry):
                if self._expiry[client_id] < now or self._connected(client_id) is False:
                    del self._expiry[client_id]
            return list(self._expiry)

    def on_sample(self, snapshot: Snapshot) -> None:
        clients = self.clients()
        if not clients:
            self._detach()
            return
        payload = sample_payload(snapshot, self._recorder)
        for client_id in clients:
            self._send(EVENT, payload, client_id)
            self.pushed += 1

    def _detach(self) -> None:
        with self._lock:
            if not self._expiry and self._sampler is not None:
                self._sampler.remove_sink(self.on_sample)
                self._sampler = None

    @property
    def attached(self) -> bool:
        return self._sampler is not None

    def status(self) -> dict:
        return {"n_watchers": len(self.clients()), "sink_attached": self.attached, "pushed": self.pushed}


def executing(recorder) -> dict | None:
    """The node running now, from the recorder; from ComfyUI's last `executing` when the profile is off."""
    found = None
    try:
        found = None if recorder is None else recorder.executing_node()
        if found is None and recorder is not None and recorder.active_prompt_id is not None:
            from server import PromptServer

            node_id = getattr(PromptServer.instance, "last_node_id", None)
            found = None if node_id is None else (str(node_id), None, None)
    except Exception:  # outside ComfyUI, or a recorder without it: no marker
        found = None
    if found is None:
        return None
    node_id, class_type, title = found
    return {"node_id": node_id, "class_type": class_type, "title": title}


def sample_payload(snapshot: Snapshot, recorder=None) -> dict:
    data = snapshot.to_dict()
    data["prompt_id"] = None if recorder is None else recorder.active_prompt_id
    data["node"] = executing(recorder)
    return data


# -- ComfyUI glue ----------------------------------------------------------------------------------


def _server_send(event: str, data: dict, sid: str) -> None:
    from server import PromptServer

    PromptServer.instance.send_sync(event, data, sid)


def _server_connected(sid: str) -> bool | None:
    try:
        from server import PromptServer

        sockets = getattr(PromptServer.instance, "sockets", None)
    except Exception:
        return None
    return None if sockets is None else sid in sockets


_watchers: LiveWatchers | None = None
_watchers_lock = threading.Lock()


def get_watchers() -> LiveWatchers:
    global _watchers
    with _watchers_lock:
        if _watchers is None:
            _watchers = LiveWatchers(_server_send, _server_connected)
        return _watchers


def set_watchers(watchers: LiveWatchers | None) -> LiveWatchers | None:
    """Replace the watcher registry (tests); returns the previous one."""
    global _watchers
    with _watchers_lock:
        previous, _watchers = _watchers, watchers
        return previous


# -- routes ----------------------------------------------------------------------------------------


def _json(data, status: int = 200) -> web.Response:
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"}
    return web.json_response(data, status=status, headers=headers)


async def post_live(request: web.Request) -> web.Response:
    """{client_id, watching: bool} -> status, plus the recent samples when a watch starts."""
    try:
        body = await request.json()
    except Exception:
        return _json({"error": "body must be JSON"}, 400)
    if not isinstance(body, dict):
        return _json({"error": "body must be a JSON object"}, 400)
    client_id, watching = body.get("client_id"), body.get("watching")
    if not isinstance(client_id, str) or not CLIENT_ID_PATTERN.fullmatch(client_id):
        return _json({"error": "client_id must be 1-128 letters, digits, '-' or '_'"}, 400)
    if not isinstance(watching, bool):
        return _json({"error": "watching must be true or false"}, 400)
    runtime = get_runtime()
    watchers = get_watchers()
    if watching and watchers.connected(client_id) is False:
        return _json({"error": "no websocket is open with this client_id"}, 404)
    watchers.watch(client_id, watching, runtime.sampler, runtime.recorder)
    result = {**watchers.status(), "sample_interval_ms": round(runtime.sampler.interval_s * 1000)}
    if watching and body.get("backfill", True) is not False:
        since = time.time() - BACKFILL_S
        points = runtime.sampler.points(since)[-MAX_BACKFILL_POINTS:]
        result["points"] = [p.to_dict() for p in points]
    return _json(result)


async def get_live(request: web.Request) -> web.Response:
    runtime = get_runtime()
    return _json({**get_watchers().status(), "sample_interval_ms": round(runtime.sampler.interval_s * 1000)})

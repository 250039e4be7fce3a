"""Live view, server side: sampler ticks pushed as `pipeline_monitor.sample` to watching clients only.

A browser tab declares that it watches (`POST /pipeline_monitor/live {"client_id", "watching"}`)
and renews that within WATCH_TTL_S while its panel is open. A tab that closes its panel says so;
one that dies stops renewing or drops its websocket, and its pushes stop. With no watcher left the
sink is taken off the sampler, so the sampler (which keeps running for sampled peaks) pays
nothing for the live view.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping

from ..probes import Snapshot

EVENT = "pipeline_monitor.sample"
WATCH_TTL_S = 30.0  # the panel renews every 10 s
MAX_WATCHERS = 64
BACKFILL_S = 600.0  # history returned when a watch starts (the chart shows the last minutes)
MAX_BACKFILL_POINTS = 1200
CLIENT_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class WatchRequestError(ValueError):
    pass


def watch_request(body: object) -> tuple[str, bool, bool]:
    """(client_id, watching, backfill) from a watch request's JSON body; WatchRequestError if malformed."""
    if not isinstance(body, Mapping):
        raise WatchRequestError("body must be a JSON object")
    client_id, watching = body.get("client_id"), body.get("watching")
    if not isinstance(client_id, str) or not CLIENT_ID_PATTERN.fullmatch(client_id):
        raise WatchRequestError("client_id must be 1-128 letters, digits, '-' or '_'")
    if not isinstance(watching, bool):
        raise WatchRequestError("watching must be true or false")
    return client_id, watching, body.get("backfill", True) is not False


def backfill_points(sampler) -> list[dict]:
    """The recent samples a new watcher's chart starts with."""
    points = sampler.points(time.time() - BACKFILL_S)[-MAX_BACKFILL_POINTS:]
    return [p.to_dict() for p in points]


class LiveWatchers:
    """Client ids that watch, with expiry times; owns the sampler sink while anyone watches.

    `send(event, data, sid)` delivers one event to one client; `connected(sid)` says whether that
    client still has a websocket (None: unknown, trust the expiry alone); `last_node_id()` is the
    framework's own idea of the running node, for when the profile is off.
    """

    def __init__(
        self,
        send: Callable[[str, dict, str], None],
        connected: Callable[[str], bool | None] = lambda sid: None,
        ttl_s: float = WATCH_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        last_node_id: Callable[[], str | None] = lambda: None,
    ):
        self._send = send
        self._connected = connected
        self._last_node_id = last_node_id
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
        payload = sample_payload(snapshot, self._recorder, self._last_node_id)
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


def executing(recorder, last_node_id: Callable[[], str | None] = lambda: None) -> dict | None:
    """The node running now, from the recorder; from `last_node_id()` when the profile is off."""
    found = None
    try:
        found = None if recorder is None else recorder.executing_node()
        if found is None and recorder is not None and recorder.active_prompt_id is not None:
            node_id = last_node_id()
            found = None if node_id is None else (str(node_id), None, None)
    except Exception:  # a recorder or framework without it: no marker
        found = None
    if found is None:
        return None
    node_id, class_type, title = found
    return {"node_id": node_id, "class_type": class_type, "title": title}


def sample_payload(
    snapshot: Snapshot, recorder=None, last_node_id: Callable[[], str | None] = lambda: None
) -> dict:
    data = snapshot.to_dict()
    data["prompt_id"] = None if recorder is None else recorder.active_prompt_id
    data["node"] = executing(recorder, last_node_id)
    return data

"""Live view glue: sampler ticks pushed as `pipeline_monitor.sample` through ComfyUI's websocket.

The watcher list and the payload are monitors/engine/live.py's; this file gives it ComfyUI's send, its
socket table and its last executing node. Routes: nodes/routes.py.
"""

from __future__ import annotations

from ..monitors.engine.live import LiveWatchers
from ..monitors.lazy import Lazy


def _server_send(event: str, data: dict, sid: str) -> None:
    from server import PromptServer

    PromptServer.instance.send_sync(event, data, sid)


def _server_connected(sid: str) -> bool | None:
    try:
        from server import PromptServer

        sockets = getattr(PromptServer.instance, "sockets", None)
    except Exception:  # outside a running ComfyUI: unknown, the watch expiry decides alone
        return None
    return None if sockets is None else sid in sockets


def _last_node_id() -> str | None:
    from server import PromptServer

    return getattr(PromptServer.instance, "last_node_id", None)


_watchers = Lazy(lambda: LiveWatchers(_server_send, _server_connected, last_node_id=_last_node_id))
get_watchers = _watchers.get
set_watchers = _watchers.set  # tests

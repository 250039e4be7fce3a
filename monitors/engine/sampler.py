"""One background sampling thread with a bounded ring buffer and callback sinks.

The thread starts lazily on first use (`ensure_started`, `add_sink`), never at import. Each
tick takes a full snapshot, offers it to every open span (so spans see sampled peaks with
their times), stores it, and calls the sinks. A sink that raises is logged once and kept.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from ..probes import DETAIL_FULL, Probes, Snapshot, get_probes
from .span import observe_open_spans

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.5  # 2 Hz
DEFAULT_MAX_POINTS = 1200  # 10 minutes at 2 Hz

Sink = Callable[[Snapshot], None]


class Sampler:
    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        max_points: int = DEFAULT_MAX_POINTS,
        probes: Probes | None = None,
    ):
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        if max_points < 1:
            raise ValueError(f"max_points must be at least 1, got {max_points}")
        self._interval_s = float(interval_s)
        self._points: deque[Snapshot] = deque(maxlen=int(max_points))
        self._probes = probes
        self._sinks: list[Sink] = []
        self._failed_sinks: set[int] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.tick_count = 0

    @property
    def probes(self) -> Probes:
        return self._probes if self._probes is not None else get_probes()

    @property
    def interval_s(self) -> float:
        return self._interval_s

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def configure(self, interval_s: float | None = None, max_points: int | None = None) -> None:
        with self._lock:
            if interval_s is not None:
                if interval_s <= 0:
                    raise ValueError(f"interval_s must be positive, got {interval_s}")
                self._interval_s = float(interval_s)
            if max_points is not None and max_points != self._points.maxlen:
                if max_points < 1:
                    raise ValueError(f"max_points must be at least 1, got {max_points}")
                self._points = deque(self._points, maxlen=int(max_points))
        self._wake.set()

    # -- sinks --------------------------------------------------------------------------------
    def add_sink(self, sink: Sink) -> None:
        with self._lock:
            if sink not in self._sinks:
                self._sinks.append(sink)
        self.ensure_started()

    def remove_sink(self, sink: Sink) -> None:
        with self._lock:
            if sink in self._sinks:
                self._sinks.remove(sink)

    def sink_count(self) -> int:
        with self._lock:
            return len(self._sinks)

    # -- thread -------------------------------------------------------------------------------
    def ensure_started(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stopping = False
            self._wake.clear()
            self._thread = threading.Thread(target=self._run, name="pipeline-monitor-sampler", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            thread = self._thread
            self._stopping = True
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        with self._lock:
            if self._thread is thread:
                self._thread = None

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopping:
                    return
                interval_s = self._interval_s
            self.sample_once()
            self._wake.wait(interval_s)
            self._wake.clear()

    def sample_once(self) -> Snapshot:
        snapshot = self.probes.snapshot(DETAIL_FULL)
        observe_open_spans(snapshot)
        with self._lock:
            self._points.append(snapshot)
            self.tick_count += 1
            sinks = list(self._sinks)
        for sink in sinks:
            try:
                sink(snapshot)
            except Exception:
                if id(sink) not in self._failed_sinks:
                    self._failed_sinks.add(id(sink))
                    log.exception(
                        "pipeline monitor: sampler sink %r failed (further failures not logged)", sink
                    )
        return snapshot

    def points(self, since_unix_s: float | None = None) -> list[Snapshot]:
        with self._lock:
            points = list(self._points)
        if since_unix_s is None:
            return points
        return [p for p in points if p.unix_time_s > since_unix_s]

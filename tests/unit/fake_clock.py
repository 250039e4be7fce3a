"""A clock that moves only when a test moves it, so durations in reports are exact numbers instead
of real sleeps that a loaded machine stretches.

`install` puts it in place of the `time` module inside every imported `monitors` module (they all
`import time` and call `time.monotonic()`, `time.time()`, `time.perf_counter()`), never in `time`
itself: pytest, threading and torch keep the real clock. A sampler thread still waits in real time;
the snapshots it takes carry fake timestamps."""

from __future__ import annotations

import sys
import threading
import time as real_time


class FakeClock:
    def __init__(self, start_s: float = 1000.0, unix_start_s: float | None = None, tick_s: float = 0.0):
        self._now_s = float(start_s)
        unix = real_time.time() if unix_start_s is None else unix_start_s
        self._unix_offset_s = unix - self._now_s
        self._tick_s = tick_s  # added at every read where a duration must never be exactly zero
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            self._now_s += self._tick_s
            return self._now_s

    perf_counter = monotonic

    def monotonic_ns(self) -> int:
        return int(self.monotonic() * 1e9)

    def time(self) -> float:
        return self.monotonic() + self._unix_offset_s

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now_s += seconds

    sleep = advance

    def move_to(self, now_s: float) -> None:
        """Forward only, to `now_s` (e.g. the latest clock among ranks leaving a collective)."""
        with self._lock:
            self._now_s = max(self._now_s, now_s)

    def __getattr__(self, name):  # strftime, gmtime, ...: the real ones
        return getattr(real_time, name)


def clock_modules() -> list:
    return [
        module
        for name, module in list(sys.modules.items())
        if (name == "monitors" or name.startswith("monitors.")) and getattr(module, "time", None) is real_time
    ]


def install(clock: FakeClock, monkeypatch=None) -> FakeClock:
    """Every imported monitors module reads `clock`; with `monkeypatch`, restored after the test."""
    for module in clock_modules():
        if monkeypatch is not None:
            monkeypatch.setattr(module, "time", clock)
        else:
            module.time = clock
    return clock

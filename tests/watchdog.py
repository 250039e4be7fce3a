"""The one polling wait of the tests: a watchdog that only catches a hang, never a speed check."""

from __future__ import annotations

import time


def wait_until(condition, what: str, watchdog_s: float = 60.0, poll_s: float = 0.01) -> None:
    """Poll `condition()` until it is true; raise TimeoutError(what) after watchdog_s."""
    deadline = time.monotonic() + watchdog_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll_s)
    raise TimeoutError(what)

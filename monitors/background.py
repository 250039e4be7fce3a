"""Work off the caller's path on one background thread that ends once idle.

The pack leaves no idle thread behind: the thread starts with the first task and ends after
`idle_exit_s` without one; the next task starts a new one. Tasks run in the order submitted, and
a task that raises is logged and does not end the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class BackgroundWorker:
    def __init__(self, name: str, idle_exit_s: float = 5.0):
        self.name = name
        self.idle_exit_s = idle_exit_s
        self._queue: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, task: Callable[[], object]) -> None:
        with self._lock:  # the thread decides to end under this lock: no task is ever stranded
            self._queue.put(task)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()

    def join(self) -> None:
        """Wait until every task submitted so far has run."""
        self._queue.join()

    def wait_idle(self, timeout_s: float) -> bool:
        """join() with a deadline: False when tasks are still pending after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def _loop(self) -> None:
        while True:
            try:
                task = self._queue.get(timeout=self.idle_exit_s)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            try:
                task()
            except Exception as exc:  # one failed task must not end the others
                log.warning("pipeline monitor: %s task failed: %s: %s", self.name, type(exc).__name__, exc)
            finally:
                self._queue.task_done()

"""Work off the caller's path on one background thread that ends once idle.

The pack leaves no idle thread behind: the thread starts with the first task and ends after
`idle_exit_s` without one; the next task starts a new one. The exception is work whose library
keeps state owned by the thread that did it (`stay()`): that thread, once started, stays. Tasks
run in the order submitted, a task submitted with a delay once its time has come (after the tasks
already due), and a task that raises is logged and does not end the thread.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

_NOW = 0.0  # the due time of a task without a delay: ahead of every delayed one, in order


class BackgroundWorker:
    def __init__(self, name: str, idle_exit_s: float | None = 5.0):
        self.name = name
        self.idle_exit_s = idle_exit_s
        self._cond = threading.Condition()
        self._tasks: list[tuple[float, int, Callable[[], object]]] = []  # heap: (due monotonic s, order, task)
        self._order = itertools.count()
        self._undone_now = 0  # tasks submitted without a delay that have not finished
        self._thread: threading.Thread | None = None

    def submit(self, task: Callable[[], object], delay_s: float = 0.0) -> None:
        """Run `task()` on the worker thread: after the tasks submitted before it, or with
        `delay_s` once that time has passed."""
        with self._cond:  # the thread decides to end under this lock: no task is ever stranded
            due = time.monotonic() + delay_s if delay_s > 0 else _NOW
            heapq.heappush(self._tasks, (due, next(self._order), task))
            if due == _NOW:
                self._undone_now += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            else:
                self._cond.notify_all()

    def join(self) -> None:
        """Wait until every task submitted so far without a delay has run."""
        with self._cond:
            while self._undone_now:
                self._cond.wait()

    def wait_idle(self, timeout_s: float) -> bool:
        """join() with a deadline: False when such tasks are still pending after timeout_s."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._undone_now:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    return False
                self._cond.wait(left_s)
        return True

    def stay(self) -> None:
        """From now on the thread never ends when idle (it waits, blocked, for the next task).
        Called by a task: the thread running it is the one that stays."""
        with self._cond:
            self.idle_exit_s = None

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._tasks and not self._wait_for_task():
                    return
                due, _, task = self._tasks[0]
                if due != _NOW and due > time.monotonic():
                    self._cond.wait(due - time.monotonic())
                    continue
                heapq.heappop(self._tasks)
            try:
                task()
            except Exception as exc:  # one failed task must not end the others
                log.warning("pipeline monitor: %s task failed: %s: %s", self.name, type(exc).__name__, exc)
            finally:
                if due == _NOW:
                    with self._cond:
                        self._undone_now -= 1
                        self._cond.notify_all()

    def _wait_for_task(self) -> bool:
        """With the lock held and no task: wait up to idle_exit_s for one; False (and the thread
        forgotten, under the lock) when none came; without idle_exit_s (stay), until one comes."""
        if self.idle_exit_s is None:
            while not self._tasks:
                self._cond.wait()
            return True
        self._cond.wait(self.idle_exit_s)
        if self._tasks:
            return True
        self._thread = None
        return False

"""One process-wide object made on first use, never at import; tests swap it (probes, runtime...)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Lazy(Generic[T]):
    def __init__(self, make: Callable[[], T]):
        self._make = make
        self._value: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        with self._lock:
            if self._value is None:
                self._value = self._make()
            return self._value

    def set(self, value: T | None) -> T | None:
        """Replace the object (None: make a fresh one on next use); returns the previous one."""
        with self._lock:
            previous, self._value = self._value, value
            return previous

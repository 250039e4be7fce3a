"""Seeing ComfyUI's own tiled retry inside a direct encode.

ComfyUI's `VAE.encode` (0.8 and 0.33 alike) catches an out-of-memory of its direct encode, logs
"Ran out of memory when regular VAE encoding, retrying with tiled VAE encoding." and encodes again
with its own tiler (`encode_tiled_`, `encode_tiled_1d`, `encode_tiled_3d`, or on 0.33
`_encode_tiled_owned` for VAEs that tile by themselves). The call then returns normally: without a
look inside, the chain would count a direct encode that worked.

Two independent signs, either enough:
- the warning in the log (any logger; the watch is a handler on the root logger);
- a call of one of the tiler methods during the direct call: the chain wraps them on that VAE object
  for the duration of the attempt (`*args, **kwargs`, restored afterwards; names that the VAE lacks
  are skipped), so the retry is seen even where the log level hides warnings.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

# The strategy name of ComfyUI's own retry in attempts and `strategy_used`.
RETRY_STRATEGY = "tiled (ComfyUI retry)"
# ComfyUI's VAE methods that its encode calls to retry tiled (feature-detected on the object).
COMFY_RETRY_TILERS = ("encode_tiled_", "encode_tiled_1d", "encode_tiled_3d", "_encode_tiled_owned")
CAUGHT_REASON = (
    "ComfyUI's VAE.encode caught this out-of-memory and retried tiled by itself in the same call "
    f"(next attempt, {RETRY_STRATEGY!r}); time and peaks here are the whole call's"
)
CAUGHT_MESSAGE = "ran out of memory; ComfyUI caught it and retried tiled"
RETRY_REASON = (
    "ComfyUI's own tiling inside the direct call above, after that ran out of memory; its time is "
    "from the retry's start (unknown when only the log showed it), its peaks are the direct row's"
)
MAX_NOTES = 10


class LogWatch(logging.Handler):
    """Collects log lines containing any of the watched texts while an attempt runs."""

    def __init__(self, texts: tuple[str, ...]):
        super().__init__(logging.DEBUG)
        self.texts = texts
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            return
        if any(text in message for text in self.texts) and len(self.seen) < MAX_NOTES:
            self.seen.append(message[:300])


@dataclass
class RetryWatch:
    """Context manager over one attempt: log lines seen, and when a tiler method was first called."""

    vae: object
    log_texts: tuple[str, ...] = ()
    tilers: tuple[str, ...] = ()
    tiler_called: str | None = None
    retry_started_s: float | None = None  # time.monotonic() at the first tiler call
    _log: LogWatch | None = None
    _restore: list = field(default_factory=list)

    @property
    def notes(self) -> tuple[str, ...]:
        return tuple(self._log.seen) if self._log is not None else ()

    @property
    def retried(self) -> bool:
        """Did ComfyUI retry tiled inside the call? (the warning was logged or a tiler was called)"""
        return self.tiler_called is not None or bool(self.notes)

    def __enter__(self) -> RetryWatch:
        if self.log_texts:
            self._log = LogWatch(self.log_texts)
            logging.getLogger().addHandler(self._log)
        for name in self.tilers:
            self._wrap(name)
        return self

    def __exit__(self, *exc_info) -> None:
        if self._log is not None:
            logging.getLogger().removeHandler(self._log)
        for name, had, previous in reversed(self._restore):
            try:
                if had:
                    setattr(self.vae, name, previous)
                else:
                    delattr(self.vae, name)
            except Exception:  # never let the watch change the encode's outcome
                logging.getLogger(__name__).debug("pipeline monitor: restoring %s failed", name)
        self._restore.clear()

    def _wrap(self, name: str) -> None:
        original = getattr(self.vae, name, None)
        if not callable(original):
            return  # this ComfyUI's VAE has no such tiler
        own = getattr(self.vae, "__dict__", {})
        had, previous = name in own, own.get(name)
        watch = self

        def observed(*args, **kwargs):
            if watch.tiler_called is None:
                watch.tiler_called, watch.retry_started_s = name, time.monotonic()
            return original(*args, **kwargs)

        try:
            setattr(self.vae, name, observed)
        except Exception:  # slots, read-only attributes: the log watch still sees the retry
            return
        self._restore.append((name, had, previous))

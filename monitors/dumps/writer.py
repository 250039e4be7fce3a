"""Dumps written off the prompt's path: the node takes host copies of the tensors (host_copies.py:
on a GPU a non-blocking copy into pinned memory on the current stream) and returns; a writer
thread waits for the copies (an event, on a GPU) and writes the file. A DumpTicket says when it
was written, or why not. The same thread runs other work on host copies after the dumps handed
over before it (`run_after_writes`: a comparison that reads a dump written earlier in the prompt).

Bounded: the host copies not yet written (pinned memory on a GPU) hold at most
PIPELINE_MONITOR_DUMP_MAX_IN_FLIGHT_BYTES (default 1 GiB). A dump that would go above it is
written in the prompt, as before, and says so (finding `written_in_prompt`); 0 writes every dump
in the prompt. One writer thread, ending once idle; dumps are written in the order they came.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..background import BackgroundWorker
from ..numeric.deferred_stats import finish_stats
from ..probes.device_copy import CudaCopyBackend
from ..report import format_bytes
from .collect import CollectedTensors
from .files import DumpPlan, DumpResult, cpu_tensors, write_planned
from .host_copies import HostBuffers, take_host_copies

log = logging.getLogger(__name__)

ENV_MAX_IN_FLIGHT = "PIPELINE_MONITOR_DUMP_MAX_IN_FLIGHT_BYTES"
DEFAULT_MAX_IN_FLIGHT_BYTES = 1 << 30
FINISH_WRITES_S = 30.0  # the longest a prompt's end waits for its dumps' files
BUFFERS_IDLE_S = 5.0  # host buffers of CPU copies are dropped once no dump came for this long


def max_in_flight_bytes() -> int:
    raw = os.environ.get(ENV_MAX_IN_FLIGHT, "").strip()
    try:
        value = int(raw) if raw else DEFAULT_MAX_IN_FLIGHT_BYTES
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        log.warning("pipeline monitor: %s=%r is not a byte count: %d", ENV_MAX_IN_FLIGHT, raw, DEFAULT_MAX_IN_FLIGHT_BYTES)
        return DEFAULT_MAX_IN_FLIGHT_BYTES


@dataclass(frozen=True)
class WriteOutcome:
    result: DumpResult | None  # None: not written, `error` says why
    error: Exception | None
    background: bool  # written by the writer thread (False: in the prompt)
    in_prompt_s: float  # the node's time on the write: the copies and a hand-over, or the whole write
    written_unix_s: float | None
    copy_wait_s: float | None  # the writer's wait for the copies (background only)
    in_prompt_reason: str | None  # why a dump meant for the writer was written in the prompt
    described: Mapping[str, dict] = field(default_factory=dict)  # deferred statistics, by tensor


class DumpTicket:
    """One dump being written (or one job run after the writes): `outcome` once done;
    `on_done(callback)` runs the callback with it (at once when already done, else on the writer
    thread); `wait(timeout_s)`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._callbacks: list[Callable[[WriteOutcome], object]] = []
        self.outcome: WriteOutcome | None = None

    def finish(self, outcome: WriteOutcome) -> None:
        with self._lock:
            self.outcome = outcome
            callbacks, self._callbacks = self._callbacks, []
        self._done.set()
        for callback in callbacks:
            _run_callback(callback, outcome)

    def on_done(self, callback: Callable[[WriteOutcome], object]) -> None:
        with self._lock:
            if self.outcome is None:
                self._callbacks.append(callback)
                return
        _run_callback(callback, self.outcome)

    def wait(self, timeout_s: float | None = None) -> WriteOutcome | None:
        self._done.wait(timeout_s)
        return self.outcome


def _run_callback(callback, outcome) -> None:
    try:
        callback(outcome)
    except Exception:  # a report that cannot take the outcome never stops the writer
        log.exception("pipeline monitor: a dump's outcome was not recorded")


class DumpWriter:
    """`write(plan, collected, metadata)` -> DumpTicket. `background=False` writes every dump in
    the caller's thread (tools, tests, the bench's before); `copier`: the device copy backend."""

    def __init__(
        self, background: bool = True, copier=None, max_bytes: int | None = None, buffers_idle_s: float = BUFFERS_IDLE_S
    ):
        self.background = background
        self.buffers_idle_s = buffers_idle_s
        self.copier = copier if copier is not None else CudaCopyBackend()
        self._max_bytes = max_bytes  # None: the setting, read at each dump
        self._lock = threading.Lock()
        self.in_flight_bytes = 0
        self._worker = BackgroundWorker("pipeline-monitor-dump-writer")
        self.host_buffers = HostBuffers()
        self._last_write = 0  # dumps handed over so far: the buffers' idle check compares it

    def write(
        self, plan: DumpPlan, collected: CollectedTensors, metadata: Mapping[str, Any], pending_stats=None
    ) -> DumpTicket:
        """Hand the dump over (or write it now, see the module docstring); `pending_stats`: name ->
        deferred_stats.PendingStats enqueued before this call, read back once the copies are done."""
        started = time.perf_counter()
        pending_stats = dict(pending_stats or {})
        ticket = DumpTicket()
        nbytes = plan.tensor_bytes
        reason = self._reserve(nbytes) if self.background else None
        if not self.background or reason is not None:
            ticket.finish(self._write_now(plan, collected, metadata, started, reason, pending_stats))
            return ticket
        try:
            copies = take_host_copies(collected.tensors, self.copier, self.host_buffers)
        except Exception as exc:  # no pinned memory, a copy refused: the plain write, in the prompt
            self._release(nbytes)
            why = f"host copies failed ({type(exc).__name__}: {exc})"
            ticket.finish(self._write_now(plan, collected, metadata, started, why, pending_stats))
            return ticket
        in_prompt_s = time.perf_counter() - started
        # The writer keeps the host copies, never the node's tensors (nothing kept alive on the device)
        names = CollectedTensors(extras=dict(collected.extras), skipped=dict(collected.skipped))
        self._worker.submit(lambda: self._finish(ticket, plan, copies, names, metadata, in_prompt_s, pending_stats))
        self._drop_buffers_later()
        return ticket

    def run_after_writes(self, work: Callable[[Mapping[str, Any]], Any], tensors: Mapping[str, Any]):
        """(ticket, None): `work(host copies of tensors)` runs on the writer thread after every dump
        handed over before it, and the ticket's outcome is what it returns (None when it raised:
        logged). (None, why not) where the caller must do the work itself: the writer is off, the
        copies would go above the cap on bytes in flight, or they failed. The copies are the
        tensors as they were at this call (a later in-place change cannot reach them)."""
        if not self.background:
            return None, "the writer thread is off"
        nbytes = sum(int(t.numel()) * int(t.element_size()) for t in tensors.values())
        reason = self._reserve(nbytes)
        if reason is not None:
            return None, reason
        try:
            copies = take_host_copies(tensors, self.copier, self.host_buffers)
        except Exception as exc:
            self._release(nbytes)
            return None, f"host copies failed ({type(exc).__name__}: {exc})"
        ticket = DumpTicket()
        self._worker.submit(lambda: self._run_job(ticket, work, copies, nbytes))
        self._drop_buffers_later()
        return ticket, None

    def _run_job(self, ticket: DumpTicket, work, copies, nbytes: int) -> None:
        outcome = None
        try:
            copies.wait()
            outcome = work(copies.tensors)
        except Exception:
            log.exception("pipeline monitor: work on the dump writer's thread failed")
        finally:
            self.host_buffers.give_back(copies.buffers, self._cap())
            self._release(nbytes)
        ticket.finish(outcome)

    def _drop_buffers_later(self) -> None:
        """The host buffers are dropped once no dump or job came for buffers_idle_s."""
        with self._lock:
            self._last_write += 1
            number = self._last_write
        self._worker.submit(lambda: self._drop_buffers_if_idle(number), delay_s=self.buffers_idle_s)

    def join(self, timeout_s: float) -> bool:
        """Wait until every dump handed to the writer so far is written; False on timeout."""
        return self._worker.wait_idle(timeout_s)

    def _drop_buffers_if_idle(self, number: int) -> None:
        with self._lock:
            idle = self._last_write == number
        if idle:  # no dump since this one: nothing kept once the writer has nothing to do
            self.host_buffers.clear()

    def _cap(self) -> int:
        return max_in_flight_bytes() if self._max_bytes is None else self._max_bytes

    def _reserve(self, nbytes: int) -> str | None:
        """Count `nbytes` in flight, or say why the dump must be written in the prompt."""
        cap = self._cap()
        with self._lock:
            if self.in_flight_bytes + nbytes <= cap:
                self.in_flight_bytes += nbytes
                return None
            in_flight = self.in_flight_bytes
        if cap == 0:
            return f"{ENV_MAX_IN_FLIGHT}=0: every dump is written in the prompt"
        return (
            f"{format_bytes(in_flight)} of earlier dumps still being written plus this one's "
            f"{format_bytes(nbytes)} is above the cap of {format_bytes(cap)} on host copies in flight "
            f"(set {ENV_MAX_IN_FLIGHT} to raise it)"
        )

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self.in_flight_bytes -= nbytes

    def _write_now(self, plan, collected, metadata, started: float, reason: str | None, pending_stats) -> WriteOutcome:
        # the tensors are as the node got them: the statistics read back from them, in the prompt
        described = read_stats(pending_stats, collected.tensors)
        try:
            result, error = write_planned(plan, cpu_tensors(collected.tensors), collected, metadata, started), None
        except Exception as exc:  # OSError, a full disk: the step says why
            result, error = None, exc
        return WriteOutcome(
            result, error, False, time.perf_counter() - started, time.time() if result else None, None, reason, described
        )

    def _finish(self, ticket, plan, copies, collected, metadata, in_prompt_s: float, pending_stats) -> None:
        result = error = waited = None
        described = {}
        try:
            wait_started = time.perf_counter()
            copies.wait()
            waited = time.perf_counter() - wait_started
            result = write_planned(plan, copies.tensors, collected, metadata)
            described = read_stats(pending_stats, copies.tensors)
        except Exception as exc:
            error = exc
        finally:
            self.host_buffers.give_back(copies.buffers, self._cap())
            self._release(plan.tensor_bytes)
        outcome = WriteOutcome(result, error, True, in_prompt_s, time.time() if result else None, waited, None, described)
        ticket.finish(outcome)


def read_stats(pending_stats: Mapping, tensors: Mapping) -> dict:
    """The deferred statistics read back: the stream has passed their reductions (queued before
    the copies); a fallback (NaN, Inf) or a CPU tensor's (from_copy) reads `tensors` (the host
    copies, the tensors as they were; or the node's own where nothing was handed over). A tensor
    whose statistics failed is left out (logged): the file is written all the same."""
    described = {}
    for name, pending in pending_stats.items():
        try:
            described[name] = finish_stats(pending, tensors[name])
        except Exception:
            log.exception("pipeline monitor: statistics of dumped tensor %s not read", name)
    return described


# The pack's one writer: dumps are written in the order their nodes ran.
DUMP_WRITER = DumpWriter()


def finish_pending_writes(timeout_s: float = FINISH_WRITES_S) -> bool:
    """At a prompt's end, before its report is made: wait for the dumps still being written (they
    were written beside the nodes that ran after theirs, so little is left), so that the report
    says they were. False, logged, when some are still being written after `timeout_s`."""
    if DUMP_WRITER.join(timeout_s):
        return True
    log.warning("pipeline monitor: dumps still being written %.0f s after the prompt ended", timeout_s)
    return False

"""Steps whose expensive first-time work runs after the prompt, off the executor's path.

A monitor node that would spend long on work done once (the LoRA step on a file not yet in its
caches) returns at once with a pending step (`StepReport.pending`, its `details.deferred.job_id`)
and hands the rest to `DEFERRED.submit` as a job: a generator that yields between slices of work
and returns the finished step. The job starts only once its prompt has ended and its run is
stored (`store_run`, the recorder's way to store a run) and, slice by slice, only while the
executor is idle (`busy`: a prompt runs or more are queued; set by the adapter): never inside the
executor's `finally`, and a queue of prompts runs first. A server that stays busy for MAX_YIELD_S gets the
job anyway (its slices are short). When the job ends, every report holding the pending step (its
own run's, and later runs' that repeated it from the cache) is stored again with the finished
step, and `complete` turns true; the store's listeners announce it (panel, Prometheus).

Nothing is lost and nothing raises: a prompt that failed or was interrupted cancels its jobs, a job
that raises or ends without a step leaves its step with `unfinished_reason`, and a full queue
(MAX_JOBS) makes the node do the work in the prompt instead (`submit` returns None). A job keeps
what it analyses alive until it ends, and no longer.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Mapping

from ..background import BackgroundWorker
from ..report import RunReport, StepReport

log = logging.getLogger(__name__)

MAX_JOBS = 16  # jobs waiting or running; past this a node does its work in the prompt
MAX_DONE = 64  # finished steps kept to complete later runs that repeated them from the cache
POLL_S = 0.05  # how often a waiting job looks whether the executor is idle
MAX_YIELD_S = 300.0  # a job waits at most this long for an idle executor, then runs anyway
IDLE_EXIT_S = 5.0

Work = Generator[None, None, StepReport]


def job_id_of(step) -> str | None:
    """The deferred job of a pending step (a StepReport or its dict), or None."""
    details = step.get("details") if isinstance(step, Mapping) else getattr(step, "details", None)
    deferred = details.get("deferred") if isinstance(details, Mapping) else None
    job_id = deferred.get("job_id") if isinstance(deferred, Mapping) else None
    return job_id if isinstance(job_id, str) else None


def unfinished(step: StepReport, reason: str) -> StepReport:
    """The pending step left as it is, marked not finished with the reason."""
    return dataclasses.replace(step, pending=False, unfinished_reason=reason)


@dataclasses.dataclass
class _Job:
    job_id: str
    prompt_id: str | None
    work: Callable[[], Work] | None
    submitted_monotonic_s: float
    context: dict = dataclasses.field(default_factory=dict)  # the adapter's (who queued the prompt)
    store: object = None
    targets: dict = dataclasses.field(default_factory=dict)  # prompt id -> node id of its pending step
    armed: bool = False  # its prompt ended successfully: it may start
    closed_reason: str | None = None  # set when it ended without a step: why


class DeferredSteps:
    """The jobs and the one worker thread that runs them. `busy()`: whether the executor is
    running a prompt or has more queued (the job yields meanwhile)."""

    def __init__(self, busy: Callable[[], bool] | None = None, poll_s: float = POLL_S,
                 max_yield_s: float = MAX_YIELD_S, max_jobs: int = MAX_JOBS) -> None:
        self.busy = busy or (lambda: False)
        self.poll_s, self.max_yield_s, self.max_jobs = poll_s, max_yield_s, max_jobs
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self._done: OrderedDict[str, StepReport] = OrderedDict()
        self._ids = itertools.count(1)
        self._worker = BackgroundWorker("pipeline-monitor-deferred-steps", IDLE_EXIT_S)
        self.events: list[tuple] = []  # (event, job id, monotonic s): started, yielded, finished (bounded)
        # on_finished(context, step): a job's step finished (the adapter updates the node's text)
        self.on_finished: Callable[[dict, StepReport], None] | None = None

    def submit(self, prompt_id: str | None, work: Callable[[], Work], context: dict | None = None) -> str | None:
        """Register a job of the running prompt; its id (for the step's details.deferred.job_id),
        or None when MAX_JOBS wait already (do the work now). `context` goes to on_finished."""
        with self._lock:
            if len(self._jobs) >= self.max_jobs:
                return None
            job_id = f"deferred-{next(self._ids)}-{int(time.time() * 1000)}"
            self._jobs[job_id] = _Job(
                job_id, None if prompt_id is None else str(prompt_id), work, time.monotonic(), dict(context or {})
            )
        return job_id

    def n_jobs(self) -> int:
        with self._lock:
            return len(self._jobs)

    def wait_idle(self, timeout_s: float) -> bool:
        """Until no job is left (tests): False when some still are after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while self.n_jobs():
            if time.monotonic() > deadline:
                return False
            time.sleep(self.poll_s)
        return True

    # -- the run's end ------------------------------------------------------------------------
    def store_run(self, report: RunReport, store) -> RunReport:
        """The recorder's `store.add(report)`: the report settled (settle_run), stored, and only
        then its jobs started (a job's step is stored again into a run the store holds)."""
        try:
            report, start = self.settle_run(report, store)
        except Exception as exc:  # the report is stored as it is
            log.warning("pipeline monitor: pending steps not settled: %s: %s", type(exc).__name__, exc)
            start = []
        try:
            store.add(report)
        finally:
            for job in start:
                self._worker.submit(lambda job=job: self._run(job))
        return report

    def settle_run(self, report: RunReport, store) -> tuple[RunReport, list]:
        """A run that ends: its pending steps armed (a successful prompt) or left unfinished (a
        failed or interrupted one), pending steps it repeated from the cache tied to their job or
        finished already; `complete` says whether any is still pending. Returns the report and
        the jobs it armed (to start once it is stored)."""
        steps, start = [], []
        with self._lock:
            if not self._jobs and not any(step.pending for step in report.steps):
                return report, []  # the usual run: nothing pending, nothing to settle
            for step in report.steps:
                steps.append(self._settle_step(step, report, store, start))
            for job_id, job in list(self._jobs.items()):  # a job whose step the run never held
                if job.prompt_id == report.prompt_id and not job.armed:
                    del self._jobs[job_id]
        complete = not any(step.pending for step in steps)
        return dataclasses.replace(report, steps=tuple(steps), complete=complete), start

    def _settle_step(self, step: StepReport, report: RunReport, store, start: list) -> StepReport:
        """(Under the lock.) One step of a run that ends."""
        job_id = job_id_of(step) if step.pending else None
        if job_id is None:
            return step
        done = self._done.get(job_id)
        if done is not None:
            return _as_target(done, step)
        job = self._jobs.get(job_id)
        if job is not None and job.closed_reason is not None:  # ended, its runs being stored again
            return unfinished(step, job.closed_reason)
        if job is None:
            return unfinished(step, "its work after the prompt was dropped (the prompt that ran it did not succeed)")
        if job.prompt_id == report.prompt_id and not job.armed:
            if report.status != "success":
                del self._jobs[job_id]
                return unfinished(step, f"the prompt ended {report.status}: the figures were not computed")
            job.armed, job.store = True, store
            start.append(job)
        job.targets[report.prompt_id] = step.node_id
        return step

    # -- the worker ---------------------------------------------------------------------------
    def _note(self, event: str, job_id: str) -> None:
        self.events = (self.events + [(event, job_id, time.monotonic())])[-200:]

    def _wait_idle_executor(self, job: _Job, waited_since: float) -> None:
        """Yield while the executor is busy, at most until max_yield_s after the job was armed."""
        noted = False
        while time.monotonic() - waited_since < self.max_yield_s:
            try:
                if not self.busy():
                    return
            except Exception as exc:
                log.debug("pipeline monitor: executor state unknown: %s", exc)
                return
            if not noted:
                self._note("yielded", job.job_id)
                noted = True
            time.sleep(self.poll_s)

    def _run(self, job: _Job) -> None:
        step, reason = None, None
        armed_s = time.monotonic()
        try:
            self._wait_idle_executor(job, armed_s)
            self._note("started", job.job_id)
            work = job.work()
            job.work = None  # the generator holds what it needs; nothing else is kept
            while True:
                try:
                    next(work)
                except StopIteration as stop:
                    step = stop.value
                    break
                self._wait_idle_executor(job, armed_s)
        except Exception as exc:  # never a crash, never a lost step
            log.warning("pipeline monitor: work after the prompt failed: %s: %s", type(exc).__name__, exc)
            reason = f"the work after the prompt failed: {type(exc).__name__}: {exc}"
        if not isinstance(step, StepReport) and reason is None:
            reason = "the work after the prompt gave no step"
        self._finish(job, step, reason)

    def _finish(self, job: _Job, step: StepReport | None, reason: str | None) -> None:
        """Every run holding the job's step stored again; the job forgotten only then (wait_idle)."""
        with self._lock:
            targets = dict(job.targets)  # a run that ends from now on finds the outcome here
            if step is not None and reason is None:
                self._done[job.job_id] = step
                while len(self._done) > MAX_DONE:
                    self._done.popitem(last=False)
            else:
                job.closed_reason = reason
        self._note("finished", job.job_id)
        if self.on_finished is not None and step is not None and reason is None:
            try:
                self.on_finished(job.context, step)
            except Exception as exc:
                log.debug("pipeline monitor: finished step not handed on: %s", exc)
        for prompt_id in targets:
            try:
                _store_again(job.store, prompt_id, job.job_id, step, reason)
            except Exception as exc:
                log.warning("pipeline monitor: run %s not stored again: %s: %s", prompt_id, type(exc).__name__, exc)
        with self._lock:
            self._jobs.pop(job.job_id, None)


def _as_target(done: StepReport, pending: StepReport) -> StepReport:
    """The finished step in the place of a pending one (a cached repeat keeps its flag and id)."""
    return dataclasses.replace(done, cached=pending.cached, node_id=pending.node_id)


def _store_again(store, prompt_id: str, job_id: str, step: StepReport | None, reason: str | None) -> None:
    """The stored run with the job's pending steps finished (or not, with the reason)."""

    def change(report: dict) -> dict:
        steps = []
        for old in report.get("steps") or ():
            if isinstance(old, Mapping) and old.get("pending") and job_id_of(old) == job_id:
                if step is not None and reason is None:
                    new = {**step.to_dict(), "cached": bool(old.get("cached")), "node_id": old.get("node_id")}
                else:
                    new = {**old, "pending": False, "unfinished_reason": reason}
                steps.append(new)
            else:
                steps.append(old)
        complete = not any(isinstance(s, Mapping) and s.get("pending") for s in steps)
        return {**report, "steps": steps, "complete": complete}

    if store is not None:
        store.replace(prompt_id, change)


def left_unfinished(report: dict, reason: str) -> dict:
    """A stored report whose pending steps can no longer finish (read back after a restart): each
    marked not finished with the reason, the report complete."""
    if report.get("complete") is not False:
        return report
    steps = [
        {**s, "pending": False, "unfinished_reason": reason} if isinstance(s, Mapping) and s.get("pending") else s
        for s in report.get("steps") or ()
    ]
    return {**report, "steps": steps, "complete": True}


DEFERRED = DeferredSteps()


def store_run(report: RunReport, store) -> RunReport:
    """DEFERRED.store_run, for the recorder."""
    return DEFERRED.store_run(report, store)

"""The last N run reports in memory, and their JSON files on disk with the oldest pruned first.

Report ids come from requests, so they are validated before any path is built from them.

In a server (background writes) a prompt's end only hands its report over. The report is
logged, counted by the listeners and written in batches on the writer thread: once no report
has come for WRITE_QUIET_S, or WRITE_LATEST_S after the first of a batch on a server that never
pauses. Creating a file costs 0.01-0.9 ms of CPU depending on the folder (measured on one ext4
disk); between back-to-back prompts that is charged to the next prompt, while on a quiet server
it costs nobody anything. The routes read the reports from memory meanwhile.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import threading
import time
import weakref
from collections import OrderedDict

from ..background import BackgroundWorker
from ..report import RunReport, format_run_summary, run_summary, write_json_atomic
from .deferred_steps import left_unfinished
from .input_changes import MAX_WORKFLOWS, InputFiles

log = logging.getLogger(__name__)

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
DEFAULT_MAX_RUNS = 50
DEFAULT_MAX_FILES = 500
PRUNE_SLACK_DIVISOR = 10  # a pruned folder keeps max_files - max_files // 10 reports
WRITER_IDLE_EXIT_S = 5.0
WRITE_QUIET_S = 0.25
WRITE_LATEST_S = 1.0
INPUTS_DIR_NAME = ".last_inputs"


def _started_unix_s(kept) -> float:
    started = kept.started_unix_s if isinstance(kept, RunReport) else kept.get("started_unix_s")
    return started or 0


def is_valid_run_id(run_id: object) -> bool:
    return isinstance(run_id, str) and RUN_ID_PATTERN.fullmatch(run_id) is not None


class RunStore:
    """`background_writes` moves the work after `add` (log line, listeners, file) off the
    caller's thread, ComfyUI's execution thread, in batches (see the module's docstring);
    `flush()` does what is pending and waits for it."""

    def __init__(
        self,
        reports_dir: str | None = None,
        max_runs: int = DEFAULT_MAX_RUNS,
        max_files: int = DEFAULT_MAX_FILES,
        background_writes: bool = False,
        write_quiet_s: float = WRITE_QUIET_S,
        write_latest_s: float = WRITE_LATEST_S,
    ):
        self.reports_dir = reports_dir
        self.max_runs = max(1, int(max_runs))
        self.max_files = max(1, int(max_files))
        self._runs: OrderedDict[str, dict] = OrderedDict()  # prompt_id -> report dict, oldest first
        self._summaries: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.write_errors: list[str] = []
        self._background_writes = background_writes
        self.write_quiet_s, self.write_latest_s = write_quiet_s, write_latest_s
        self._writer = BackgroundWorker("pipeline-monitor-report-writer", WRITER_IDLE_EXIT_S)
        self._files_on_disk: int | None = None  # reports on disk as last listed, plus those written since
        self._listeners: list = []  # called with each added report's dict (e.g. the fleet metrics)
        self._unfinished: list[RunReport] = []  # added, not yet logged, counted and written
        self._first_unfinished_s = 0.0  # monotonic
        self._last_add_s = 0.0
        self._batch_scheduled = False
        if background_writes:
            atexit.register(_finish_at_exit, weakref.ref(self))

    def add(self, report: RunReport) -> str | None:
        """Keep the report; returns the JSON file path, or None when it could not be written
        (with background writes: None when it will not be written).

        The report is kept as it is and converted to its dict when first needed: by a reader
        (`get`, `summaries`) or when it is logged, counted by the listeners and written."""
        with self._lock:
            self._runs.pop(report.prompt_id, None)
            self._runs[report.prompt_id] = report
            self._summaries.pop(report.prompt_id, None)
            while len(self._runs) > self.max_runs:
                old_id, _ = self._runs.popitem(last=False)
                self._summaries.pop(old_id, None)
            schedule = self._background_writes and self._pend(report)
        if not self._background_writes:
            return self._finish_adding(report)
        if schedule:
            self._writer.submit(self._finish_when_quiet, delay_s=min(self.write_quiet_s, self.write_latest_s))
        return self._path(report.prompt_id)

    def _pend(self, report: RunReport) -> bool:
        """(Under the lock.) Queue the report for the next batch; True when no batch is due yet."""
        now = time.monotonic()
        if not self._unfinished:
            self._first_unfinished_s = now
        self._unfinished.append(report)
        self._last_add_s = now
        schedule, self._batch_scheduled = not self._batch_scheduled, True
        return schedule

    def _finish_when_quiet(self) -> None:
        """The batch task: finish every pending report once the store is quiet, else look again
        when it may be."""
        with self._lock:
            if not self._unfinished:
                self._batch_scheduled = False
                return
            due_s = min(self._last_add_s + self.write_quiet_s, self._first_unfinished_s + self.write_latest_s)
            wait_s = due_s - time.monotonic()
            if wait_s > 0:
                self._writer.submit(self._finish_when_quiet, delay_s=wait_s)
                return
            self._batch_scheduled = False
        self._finish_pending()

    def _finish_pending(self) -> None:
        with self._lock:
            reports, self._unfinished = self._unfinished, []
        for report in reports:
            self._finish_adding(report)

    def _finish_adding(self, report: RunReport) -> str | None:
        """Log the report's line, write its file, then hand it to the listeners (a listener that
        announces the run announces a report that is on disk)."""
        with self._lock:
            kept = self._runs.get(report.prompt_id)
        # A reader may have converted it already: the dict kept in its place (ids are unique)
        data, _ = self._converted(report.prompt_id, report if kept is None else kept)
        log.info("%s", format_run_summary(report))
        path = self._write(report.prompt_id, data)
        for listener in list(self._listeners):
            try:
                listener(data)
            except Exception as exc:  # a listener must never cost the report
                log.warning(
                    "pipeline monitor: run listener %r failed: %s: %s", listener, type(exc).__name__, exc
                )
        return path

    def _converted(self, run_id: str, kept) -> tuple[dict, dict]:
        """(JSON dict, run-list row) of a kept run, a RunReport until first needed: converted once
        and kept. Two threads converting the same run at once both get equal dicts."""
        if isinstance(kept, RunReport):
            data = kept.to_dict()
            summary = run_summary(data)  # the same as summary_dict(), from the dict made anyway
            with self._lock:
                if self._runs.get(run_id) is kept:
                    self._runs[run_id] = data  # an existing key keeps its place in the order
                    self._summaries[run_id] = summary
            return data, summary
        with self._lock:
            summary = self._summaries.get(run_id)
        return kept, summary if summary is not None else run_summary(kept)

    def replace(self, run_id: str, change) -> bool:
        """Store a kept run again as `change(its dict)` returns it, in its place (a step finished
        after the prompt: monitors/engine/deferred_steps.py): written and handed to the listeners
        after the reports queued before it. False when the run is no longer kept."""
        with self._lock:
            kept = self._runs.get(run_id)
        if kept is None:
            return False
        data = change(self._converted(run_id, kept)[0])
        with self._lock:
            if run_id not in self._runs:
                return False
            self._runs[run_id] = data
            self._summaries[run_id] = run_summary(data)
        self.submit(lambda: self._announce(run_id, data))
        return True

    def _announce(self, run_id: str, data: dict) -> None:
        self._write(run_id, data)
        for listener in list(self._listeners):
            try:
                listener(data)
            except Exception as exc:
                log.warning("pipeline monitor: run listener %r failed: %s: %s", listener, type(exc).__name__, exc)

    def settle(self, timeout_s: float) -> bool:
        """Finish the pending reports now (listeners, files) and wait for them, at most
        timeout_s; False when some are still pending: a metrics scrape counts every finished run."""
        if not self._background_writes:
            return True
        self._writer.submit(self._finish_pending)
        return self._writer.wait_idle(timeout_s)

    def add_listener(self, callback) -> None:
        """Call `callback(report_dict)` after every add (where reports are written: on the writer
        thread with background writes; exceptions are logged)."""
        with self._lock:
            if callback not in self._listeners:
                self._listeners.append(callback)

    def remove_listener(self, callback) -> None:
        with self._lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def submit(self, task) -> None:
        """Run `task()` where reports are written: on the writer thread with background writes
        (after the reports queued before it), else now."""
        if not self._background_writes:
            task()
            return
        self._writer.submit(task)

    @property
    def inputs_dir(self) -> str | None:
        """Where the last widget inputs per workflow name are kept (monitors/engine/input_changes.py):
        a hidden folder beside the reports, which the reports' listing and pruning skip."""
        return None if self.reports_dir is None else os.path.join(self.reports_dir, INPUTS_DIR_NAME)

    def input_files(self):
        """The store's InputFiles (None without a reports folder): one file per workflow name,
        at most as many as report files are kept (and the in-memory history's bound)."""
        if self.inputs_dir is None:
            return None
        return InputFiles(self.inputs_dir, max_files=lambda: min(self.max_files, MAX_WORKFLOWS), submit=self.submit)

    def flush(self) -> None:
        """Finish every pending report now and wait until it is on disk."""
        if self._background_writes:
            self._writer.submit(self._finish_pending)
        self._writer.join()

    def _path(self, run_id: str) -> str | None:
        if self.reports_dir is None or not is_valid_run_id(run_id):
            return None
        return os.path.join(self.reports_dir, f"{run_id}.json")

    def _write(self, run_id: str, data: dict) -> str | None:
        path = self._path(run_id)
        if path is None:
            return None
        try:
            write_json_atomic(path, data, compact=True, durable=False)
            self._prune_disk()
            return path
        except Exception as exc:
            reason = f"could not write report {run_id}: {type(exc).__name__}: {exc}"
            self.write_errors = (self.write_errors + [reason])[-20:]
            log.warning("pipeline monitor: %s", reason)
            return None

    def _prune_disk(self) -> None:
        """Keep at most max_files reports on disk, oldest removed first. The folder is listed (a stat
        per file, up to max_files of them) only when the count of files written since the last
        listing may have passed max_files, and then pruned a tenth below it: a server at its cap
        lists the folder once every tenth report, not after each one."""
        self._files_on_disk = None if self._files_on_disk is None else self._files_on_disk + 1
        if self._files_on_disk is not None and self._files_on_disk <= self.max_files:
            return
        entries = []
        with os.scandir(self.reports_dir) as it:
            for entry in it:
                if entry.is_file() and entry.name.endswith(".json") and not entry.name.startswith("."):
                    entries.append((entry.stat().st_mtime, entry.path))
        keep = len(entries)
        if keep > self.max_files:
            keep = self.max_files - self.max_files // PRUNE_SLACK_DIVISOR
            entries.sort()
            for _, path in entries[: len(entries) - keep]:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        self._files_on_disk = keep

    def load_from_disk(self) -> int:
        """Fill the list with the newest reports on disk (at most max_runs), so a restarted server
        shows its history; reports already in memory win. Unreadable files are logged and skipped.
        Returns how many were loaded."""
        if self.reports_dir is None or not os.path.isdir(self.reports_dir):
            return 0
        entries = []
        with os.scandir(self.reports_dir) as it:
            for entry in it:
                run_id = entry.name[: -len(".json")]
                if entry.is_file() and entry.name.endswith(".json") and is_valid_run_id(run_id):
                    entries.append((entry.stat().st_mtime, run_id, entry.path))
        entries.sort(reverse=True)
        loaded = []
        for _, run_id, path in entries:
            if len(loaded) >= self.max_runs:
                break
            try:
                with open(path, encoding="utf-8") as f:
                    data = json.load(f)
                if not isinstance(data, dict) or data.get("prompt_id") != run_id:
                    raise ValueError("not a run report of this name")
                data = left_unfinished(data, "the server stopped before its figures came after the prompt")
                loaded.append((run_id, data, run_summary(data)))
            except (OSError, ValueError) as exc:
                log.warning("pipeline monitor: report %s not loaded: %s", path, exc)
        with self._lock:
            for run_id, data, summary in reversed(loaded):  # oldest first, as add() keeps them
                if run_id in self._runs:
                    continue
                self._runs[run_id] = data
                self._summaries[run_id] = summary
            ordered = sorted(self._runs.items(), key=lambda item: _started_unix_s(item[1]))
            self._runs = OrderedDict(ordered[-self.max_runs :])
            self._summaries = {k: self._summaries[k] for k in self._runs if k in self._summaries}
        return len(loaded)

    def configure(self, max_runs: int | None = None, max_files: int | None = None) -> None:
        with self._lock:
            if max_runs is not None:
                self.max_runs = max(1, int(max_runs))
                while len(self._runs) > self.max_runs:
                    old_id, _ = self._runs.popitem(last=False)
                    self._summaries.pop(old_id, None)
            if max_files is not None:
                self.max_files = max(1, int(max_files))
                self._files_on_disk = None  # list the folder at the next write

    def summaries(self, limit: int | None = None) -> list[dict]:
        """Newest first."""
        with self._lock:
            kept = [(k, self._runs[k], self._summaries.get(k)) for k in reversed(self._runs)]
        if limit is not None:
            kept = kept[:limit]
        return [summary or self._converted(run_id, data)[1] for run_id, data, summary in kept]

    def latest_run_of_workflow(self, workflow_name: str, other_than: str | None = None) -> str | None:
        """The prompt id of the newest run kept in memory that was queued from `workflow_name`
        (besides `other_than`), or None; converts nothing."""
        with self._lock:
            kept = [(k, self._runs[k], self._summaries.get(k)) for k in reversed(self._runs) if k != other_than]
        for run_id, data, summary in kept:
            if isinstance(data, RunReport):
                name = (data.workflow or {}).get("name")
            else:
                name = (summary if summary is not None else run_summary(data)).get("workflow_name")
            if name == workflow_name:
                return run_id
        return None

    def summary(self, run_id: str) -> dict | None:
        """The run-list row of a run still in memory (made once per run), or None."""
        with self._lock:
            data, summary = self._runs.get(run_id), self._summaries.get(run_id)
        if data is None or summary is not None:
            return summary
        return self._converted(run_id, data)[1]

    def get(self, run_id: str) -> dict | None:
        if not is_valid_run_id(run_id):
            return None
        with self._lock:
            data = self._runs.get(run_id)
        if data is not None:
            return self._converted(run_id, data)[0]
        path = self._path(run_id)
        if path is None or not os.path.isfile(path):
            return None
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError) as exc:
            log.warning("pipeline monitor: report %s unreadable: %s", run_id, exc)
            return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)


def _finish_at_exit(store_ref) -> None:
    """At interpreter exit the writer thread (a daemon) may never run again: the reports still
    pending are written by the exiting thread."""
    store = store_ref()
    if store is not None:
        try:
            store._finish_pending()
        except Exception as exc:
            log.warning("pipeline monitor: reports not written at exit: %s: %s", type(exc).__name__, exc)

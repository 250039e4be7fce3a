"""The last N run reports in memory, and their JSON files on disk with the oldest pruned first.

Report ids come from requests, so they are validated before any path is built from them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections import OrderedDict

from .background import BackgroundWorker
from .input_changes import MAX_WORKFLOWS, InputFiles
from .report import RunReport, format_run_summary, run_summary, write_json_atomic

log = logging.getLogger(__name__)

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
DEFAULT_MAX_RUNS = 50
DEFAULT_MAX_FILES = 500
PRUNE_SLACK_DIVISOR = 10  # a pruned folder keeps max_files - max_files // 10 reports
WRITER_IDLE_EXIT_S = 5.0
INPUTS_DIR_NAME = ".last_inputs"


def is_valid_run_id(run_id: object) -> bool:
    return isinstance(run_id, str) and RUN_ID_PATTERN.fullmatch(run_id) is not None


class RunStore:
    """`background_writes` moves file writes off the caller's thread (ComfyUI's execution thread),
    so a prompt does not wait for the disk; `flush()` waits for them."""

    def __init__(
        self,
        reports_dir: str | None = None,
        max_runs: int = DEFAULT_MAX_RUNS,
        max_files: int = DEFAULT_MAX_FILES,
        background_writes: bool = False,
    ):
        self.reports_dir = reports_dir
        self.max_runs = max(1, int(max_runs))
        self.max_files = max(1, int(max_files))
        self._runs: OrderedDict[str, dict] = OrderedDict()  # prompt_id -> report dict, oldest first
        self._summaries: dict[str, dict] = {}
        self._lock = threading.Lock()
        self.write_errors: list[str] = []
        self._background_writes = background_writes
        self._writer = BackgroundWorker("pipeline-monitor-report-writer", WRITER_IDLE_EXIT_S)
        self._files_on_disk: int | None = None  # reports on disk as last listed, plus those written since
        self._listeners: list = []  # called with each added RunReport (e.g. the metrics route)

    def add(self, report: RunReport) -> str | None:
        """Keep the report; returns the JSON file path, or None when it could not be written."""
        data = report.to_dict()
        with self._lock:
            self._runs.pop(report.prompt_id, None)
            self._runs[report.prompt_id] = data
            self._summaries[report.prompt_id] = run_summary(data)  # the same as summary_dict(), converted once
            while len(self._runs) > self.max_runs:
                old_id, _ = self._runs.popitem(last=False)
                self._summaries.pop(old_id, None)
        log.info("%s", format_run_summary(report))
        for listener in list(self._listeners):
            try:
                listener(report)
            except Exception as exc:  # a listener must never cost the report
                log.warning(
                    "pipeline monitor: run listener %r failed: %s: %s", listener, type(exc).__name__, exc
                )
        if not self._background_writes:
            return self._write(report.prompt_id, data)
        path = self._path(report.prompt_id)
        if path is not None:
            self._writer.submit(lambda: self._write(report.prompt_id, data))
        return path

    def add_listener(self, callback) -> None:
        """Call `callback(report)` after every add (on the adding thread; exceptions are logged)."""
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
        """Where the last widget inputs per workflow name are kept (monitors/input_changes.py):
        a hidden folder beside the reports, which the reports' listing and pruning skip."""
        return None if self.reports_dir is None else os.path.join(self.reports_dir, INPUTS_DIR_NAME)

    def input_files(self):
        """The store's InputFiles (None without a reports folder): one file per workflow name,
        at most as many as report files are kept (and the in-memory history's bound)."""
        if self.inputs_dir is None:
            return None
        return InputFiles(self.inputs_dir, max_files=lambda: min(self.max_files, MAX_WORKFLOWS), submit=self.submit)

    def flush(self) -> None:
        """Wait until every queued report is on disk."""
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
            write_json_atomic(path, data, compact=True)
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
                loaded.append((run_id, data, run_summary(data)))
            except (OSError, ValueError) as exc:
                log.warning("pipeline monitor: report %s not loaded: %s", path, exc)
        with self._lock:
            for run_id, data, summary in reversed(loaded):  # oldest first, as add() keeps them
                if run_id in self._runs:
                    continue
                self._runs[run_id] = data
                self._summaries[run_id] = summary
            ordered = sorted(self._runs.items(), key=lambda item: item[1].get("started_unix_s") or 0)
            self._runs = OrderedDict(ordered[-self.max_runs :])
            self._summaries = {k: self._summaries[k] for k in self._runs}
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
            rows = [self._summaries[k] for k in reversed(self._runs)]
        return rows if limit is None else rows[:limit]

    def summary(self, run_id: str) -> dict | None:
        """The run-list row of a run still in memory (made once, when it was added), or None."""
        with self._lock:
            return self._summaries.get(run_id)

    def get(self, run_id: str) -> dict | None:
        if not is_valid_run_id(run_id):
            return None
        with self._lock:
            data = self._runs.get(run_id)
        if data is not None:
            return data
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

"""Which widget inputs changed since the last run of the same workflow ("seed 1 -> 2, steps 20 -> 30").

Works on API-format prompts ({node_id: {class_type, inputs}}): only literal values count, never
links (`[node_id, output_index]`, ComfyUI's own link test). Values are kept as fingerprints plus a
short text, so a long prompt text costs little memory and a change after its first characters is
still seen. Framework-neutral: the recorder calls `snapshot` at a run's start and `InputHistory.compare`
at its end, when the workflow's name is known. With `InputFiles` the last snapshot per workflow
name also lives on disk (the report store's folder), so changes are known across a server restart.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from ..report import write_json_atomic

log = logging.getLogger(__name__)

MAX_CHANGES = 50  # listed per run; the rest is counted
MAX_VALUE_CHARS = 80  # shown per value; the comparison uses the whole value
MAX_INPUTS_PER_SNAPSHOT = 2000
MAX_WORKFLOWS = 32  # workflows remembered, least recently run forgotten first
# Longer values are compared by their hash: what is kept stays a few hundred bytes per input
# (at most MAX_WORKFLOWS * MAX_INPUTS_PER_SNAPSHOT inputs, about 20 MB; a usual graph, a few KB).
_FULL_FINGERPRINT_CHARS = 64

NO_NAME_REASON = (
    "the prompt's workflow carries no name (queued without the panel), so no earlier run to compare with"
)
NOT_RECORDED_REASON = "no inputs were recorded at this run's start"


def is_link(value: Any) -> bool:
    """ComfyUI's test (execution.is_link): a two-item list of a node id and an output index."""
    return (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
    )


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    # The widget values of nearly every input: what json.dumps writes, without its machinery
    # (a graph's snapshot is taken at every prompt's start).
    if value is None or value is True or value is False:
        return _JSON_CONSTANTS[value]
    if type(value) is int or (type(value) is float and math.isfinite(value)):
        return repr(value)
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


_JSON_CONSTANTS = {None: "null", True: "true", False: "false"}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown(value: Any, limit: int = MAX_VALUE_CHARS) -> str:
    """The value as a reader sees it, cut to `limit` characters with an ellipsis."""
    return _cut(_text(value), limit)


def _fingerprint(value: Any, text: str | None = None) -> str:
    # The type is part of it: 1 and "1" are different inputs to a node.
    text = f"{type(value).__name__}:{_text(value) if text is None else text}"
    if len(text) <= _FULL_FINGERPRINT_CHARS:
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


# (node_id, input name) -> (class_type, fingerprint, shown value)
Snapshot = dict


def snapshot(prompt: Mapping | None) -> Snapshot | None:
    """The literal widget inputs of an API-format prompt; None when it is not one."""
    if not isinstance(prompt, Mapping):
        return None
    taken: Snapshot = {}
    for node_id, node in prompt.items():
        if not isinstance(node, Mapping) or not isinstance(node.get("inputs"), Mapping):
            continue
        class_type = node.get("class_type") if isinstance(node.get("class_type"), str) else None
        for name, value in node["inputs"].items():
            if is_link(value):
                continue
            if len(taken) >= MAX_INPUTS_PER_SNAPSHOT:
                return taken
            text = _text(value)
            taken[(str(node_id), str(name))] = (class_type, _fingerprint(value, text), _cut(text, MAX_VALUE_CHARS))
    return taken


def _node_order(key: tuple[str, str]) -> tuple:
    node_id, name = key
    parts = tuple(int(p) if p.isdigit() else p for p in node_id.split("."))
    return (tuple((0, p) if isinstance(p, int) else (1, p) for p in parts), name)


def diff(before: Snapshot, after: Snapshot) -> dict:
    """Changed values of inputs present in both (same node id, same class), in node order, plus
    how many inputs appeared or disappeared (nodes added, removed or replaced)."""
    changes = []
    for key in sorted(set(before) & set(after), key=_node_order):
        old, new = before[key], after[key]
        if old[0] != new[0]:
            continue  # another node class under the same id: counted below, not a value change
        if old[1] != new[1]:
            changes.append(
                {"node_id": key[0], "node_type": new[0], "input": key[1], "before": old[2], "after": new[2]}
            )
    replaced = sum(1 for key in set(before) & set(after) if before[key][0] != after[key][0])
    return {
        "changes": changes[:MAX_CHANGES],
        "n_changes": len(changes),
        "n_inputs_added": len(set(after) - set(before)) + replaced,
        "n_inputs_removed": len(set(before) - set(after)) + replaced,
    }


def unknown(reason: str) -> dict:
    return {
        "compared_with_prompt_id": None,
        "first_run": None,
        "changes": None,
        "n_changes": None,
        "n_inputs_added": None,
        "n_inputs_removed": None,
        "unknown_reason": reason,
    }


INPUTS_FILE_VERSION = 1
MAX_INPUTS_FILE_BYTES = 4 * 1024 * 1024  # a file past this is not ours (or damaged): not read
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


def inputs_file_name(workflow_name: str) -> str:
    """A plain file name for a workflow name: its safe characters (for a person listing the folder)
    and a hash of the whole name (so 'a/b' and 'a_b' never share a file)."""
    stem = _UNSAFE_NAME_CHARS.sub("_", workflow_name).strip("_")[:48] or "workflow"
    digest = hashlib.sha256(workflow_name.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{stem}-{digest}.json"


class InputFiles:
    """The last run's snapshot per workflow name on disk, one small JSON per name in `directory`,
    so the first run after a server restart still shows its real changes. Written atomically (by
    `submit`, e.g. the report store's writer thread, so a prompt does not wait for the disk); the
    oldest files beyond `max_files()` are removed after each write. Every failure is logged and
    costs only the comparison, never the run."""

    def __init__(
        self,
        directory: str,
        max_files: Callable[[], int] | int = MAX_WORKFLOWS,
        submit: Callable[[Callable[[], None]], None] | None = None,
    ):
        self.directory = directory
        self._max_files = max_files
        self._submit = submit

    @property
    def max_files(self) -> int:
        value = self._max_files() if callable(self._max_files) else self._max_files
        return max(1, int(value))

    def path(self, workflow_name: str) -> str:
        return os.path.join(self.directory, inputs_file_name(workflow_name))

    def load(self, workflow_name: str) -> tuple[str, Snapshot] | None:
        """(prompt id, snapshot) of the workflow's last recorded run, or None (no file, another
        name under the same file name, or a file this version does not read)."""
        path = self.path(workflow_name)
        try:
            if not os.path.isfile(path) or os.path.getsize(path) > MAX_INPUTS_FILE_BYTES:
                return None
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            if (
                not isinstance(data, dict)
                or data.get("version") != INPUTS_FILE_VERSION
                or data.get("workflow_name") != workflow_name
                or not isinstance(data.get("prompt_id"), str)
                or not isinstance(data.get("inputs"), list)
            ):
                return None
            taken: Snapshot = {}
            for entry in data["inputs"][:MAX_INPUTS_PER_SNAPSHOT]:
                if (
                    isinstance(entry, list)
                    and len(entry) == 5
                    and all(isinstance(v, str) for v in (entry[0], entry[1], entry[3], entry[4]))
                    and (entry[2] is None or isinstance(entry[2], str))
                ):
                    taken[(entry[0], entry[1])] = (entry[2], entry[3], entry[4])
            return data["prompt_id"], taken
        except (OSError, ValueError) as exc:
            log.warning("pipeline monitor: last inputs of workflow %r not read: %s", workflow_name, exc)
            return None

    def save(self, workflow_name: str, prompt_id: str, taken: Snapshot) -> None:
        data = {
            "version": INPUTS_FILE_VERSION,
            "workflow_name": workflow_name,
            "prompt_id": prompt_id,
            "inputs": [[k[0], k[1], v[0], v[1], v[2]] for k, v in taken.items()],
        }
        if self._submit is None:
            self._write(workflow_name, data)
        else:
            self._submit(lambda: self._write(workflow_name, data))

    def _write(self, workflow_name: str, data: dict) -> None:
        try:
            write_json_atomic(self.path(workflow_name), data)
            self._prune()
        except Exception as exc:  # the comparison after a restart is lost, nothing else
            log.warning("pipeline monitor: last inputs of workflow %r not written: %s", workflow_name, exc)

    def _prune(self) -> None:
        entries = []
        with os.scandir(self.directory) as it:
            for entry in it:
                if entry.is_file() and entry.name.endswith(".json") and not entry.name.startswith("."):
                    entries.append((entry.stat().st_mtime_ns, entry.path))
        entries.sort()
        for _, path in entries[: max(0, len(entries) - self.max_files)]:
            try:
                os.unlink(path)
            except OSError:
                pass


class InputHistory:
    """The last run's snapshot per workflow name, in memory (bounded) and, with `files`, on disk:
    after a restart a workflow's first run is compared with its last run before it."""

    def __init__(self, max_workflows: int = MAX_WORKFLOWS, files: InputFiles | None = None):
        self.max_workflows = max_workflows
        self.files = files
        self._last: OrderedDict[str, tuple[str, Snapshot]] = OrderedDict()

    def compare(
        self,
        workflow_name: str | None,
        prompt_id: str,
        taken: Snapshot | None,
        earlier_prompt_id: str | None = None,
    ) -> dict:
        """The report's `input_changes` for this run, and this run becomes the workflow's last.
        `earlier_prompt_id`: a run of this workflow the store knows from before (reports read back
        from disk after a restart), whose inputs this history never saw."""
        if not workflow_name:
            return unknown(NO_NAME_REASON)
        if taken is None:
            return unknown(NOT_RECORDED_REASON)
        previous = self._last.pop(workflow_name, None)
        if previous is None and self.files is not None:
            previous = self.files.load(workflow_name)
        self._last[workflow_name] = (prompt_id, taken)
        while len(self._last) > self.max_workflows:
            self._last.popitem(last=False)
        if self.files is not None:
            self.files.save(workflow_name, prompt_id, taken)
        if previous is None and earlier_prompt_id is not None:
            return {
                **unknown(
                    f"the last run of this workflow ({earlier_prompt_id}) ran before the server restarted: its inputs were not kept"
                ),
                "compared_with_prompt_id": earlier_prompt_id,
                "first_run": False,
            }
        if previous is None:
            return {
                "compared_with_prompt_id": None,
                "first_run": True,
                "changes": [],
                "n_changes": 0,
                "n_inputs_added": None,
                "n_inputs_removed": None,
                "unknown_reason": None,
            }
        return {
            "compared_with_prompt_id": previous[0],
            "first_run": False,
            **diff(previous[1], taken),
            "unknown_reason": None,
        }

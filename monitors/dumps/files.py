"""Tensor dumps: every tensor of a CONDITIONING / LATENT / IMAGE value in one .safetensors file.

- Names (names.py): a dump is named by the user, so a name is a plain file name or it is refused.
  Files are only ever looked up directly inside the dumps folder given by the caller.
- Writing: sizes are checked against a cap (PIPELINE_MONITOR_DUMP_MAX_BYTES, default 2 GiB) and the
  free disk space before anything is written; files are written to a temporary name and renamed.
- Reading: safetensors only (never pickle or torch.load); an unreadable file is a DumpCorruptError.
- Metadata values are strings (the safetensors format); structured values are JSON strings.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..background import BackgroundWorker
from ..report import format_bytes
from .collect import CollectedTensors
from .names import (  # noqa: F401 (the names and errors are imported from here too)
    DUMP_SUFFIX,
    DumpCorruptError,
    DumpError,
    DumpNameError,
    DumpNotFoundError,
    DumpTooLargeError,
    check_file_name,
    dump_file_name,
    is_safe_file_name,
)

log = logging.getLogger(__name__)

ENV_MAX_BYTES = "PIPELINE_MONITOR_DUMP_MAX_BYTES"
DEFAULT_MAX_BYTES = 2 * 1024**3
NPY_SUFFIX = ".npy"
FORMAT = "pipeline_monitor.dump"
FORMAT_VERSION = "1"


def max_dump_bytes() -> int:
    raw = os.environ.get(ENV_MAX_BYTES)
    if raw is None or raw.strip() == "":
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        log.warning(
            "pipeline monitor: %s=%r is not a byte count, using %d", ENV_MAX_BYTES, raw, DEFAULT_MAX_BYTES
        )
        return DEFAULT_MAX_BYTES


@dataclass(frozen=True)
class DumpResult:
    file_name: str
    path: str
    n_tensors: int
    tensor_bytes: int
    file_bytes: int
    npy_files: tuple[str, ...]
    tensors: dict  # name -> {shape, dtype, device}
    metadata: dict  # what was written in the header (strings)
    replaced: bool
    write_s: float


def tensor_meta(tensor) -> dict:
    return {
        "shape": [int(s) for s in tensor.shape],
        "dtype": str(tensor.dtype).replace("torch.", ""),
        "device": str(tensor.device),
    }


def _npy_bytes(tensor) -> int:
    # numpy has no bfloat16 / float8: those are exported as float32
    size = 4 if not _numpy_native(tensor) else int(tensor.element_size())
    return int(tensor.numel()) * size


def _numpy_native(tensor) -> bool:
    import torch

    return tensor.dtype in (
        torch.float16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
        torch.int64, torch.uint8, torch.bool,
    )  # fmt: skip


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


@dataclass(frozen=True)
class DumpPlan:
    """A dump that passed every check (name, size cap, free space) and can be written."""

    directory: str
    file_name: str
    npy_names: Mapping[str, str]  # tensor name -> .npy file name
    tensor_bytes: int
    tensors_meta: Mapping[str, dict]  # name -> {shape, dtype, device} of the tensors as they were


def write_dump(
    directory: str,
    name: str,
    collected: CollectedTensors,
    metadata: Mapping[str, Any] | None = None,
    npy: bool = False,
    max_bytes: int | None = None,
) -> DumpResult:
    """Write the collected tensors to <directory>/<name>.safetensors (and .npy files), or raise
    DumpError before writing anything when the name, size or free space is not acceptable."""
    started = time.perf_counter()
    plan = plan_dump(directory, name, collected, npy, max_bytes)
    return write_planned(plan, cpu_tensors(collected.tensors), collected, metadata, started)


def plan_dump(
    directory: str, name: str, collected: CollectedTensors, npy: bool = False, max_bytes: int | None = None
) -> DumpPlan:
    """Every check of write_dump, nothing written: a DumpPlan, or DumpError."""
    file_name = dump_file_name(name)
    stem = file_name[: -len(DUMP_SUFFIX)]
    if not collected.tensors:
        raise DumpError("Nothing to dump: the connected values hold no tensors.")
    tensor_bytes = collected.total_bytes
    npy_names = {t: f"{stem}.{t}{NPY_SUFFIX}" for t in collected.tensors} if npy else {}
    for npy_name in npy_names.values():
        check_file_name(npy_name)
    planned = tensor_bytes + sum(_npy_bytes(collected.tensors[t]) for t in npy_names)
    cap = max_dump_bytes() if max_bytes is None else max_bytes
    if planned > cap:
        raise DumpTooLargeError(
            f"Dump refused: it would take {format_bytes(planned)}, above the cap of {format_bytes(cap)} "
            f"(set {ENV_MAX_BYTES} to raise it)."
        )
    os.makedirs(directory, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if planned > free:
        raise DumpError(f"Dump refused: it needs {format_bytes(planned)}, {format_bytes(free)} free on disk.")
    tensors_meta = {t: tensor_meta(v) for t, v in collected.tensors.items()}
    return DumpPlan(directory, file_name, npy_names, tensor_bytes, tensors_meta)


def write_planned(
    plan: DumpPlan,
    cpu_tensors: Mapping[str, Any],
    collected: CollectedTensors,
    metadata: Mapping[str, Any] | None = None,
    started: float | None = None,
) -> DumpResult:
    """Write a planned dump from host tensors holding its values (contiguous, no two sharing
    storage: cpu_tensors' or host_copies' tensors); `collected` gives the extras and skipped."""
    started = time.perf_counter() if started is None else started
    now = time.time()
    header = {k: _as_text(v) for k, v in (metadata or {}).items() if v is not None}
    header.update(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        created_unix_s=f"{now:.3f}",
        created_utc=datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds"),
        tensors=json.dumps(plan.tensors_meta),
        extras=json.dumps(collected.extras),
        skipped=json.dumps(collected.skipped),
    )
    path = os.path.join(plan.directory, plan.file_name)
    replaced = os.path.lexists(path)
    _write_atomic(path, lambda tmp: _save_safetensors(dict(cpu_tensors), tmp, header))
    written_npy = []
    for tensor_name, npy_name in plan.npy_names.items():
        array = _to_numpy(cpu_tensors[tensor_name])
        _write_atomic(os.path.join(plan.directory, npy_name), lambda tmp, a=array: _save_npy(a, tmp))
        written_npy.append(npy_name)
    return DumpResult(
        file_name=plan.file_name,
        path=path,
        n_tensors=len(cpu_tensors),
        tensor_bytes=plan.tensor_bytes,
        file_bytes=os.path.getsize(path),
        npy_files=tuple(written_npy),
        tensors=dict(plan.tensors_meta),
        metadata=header,
        replaced=replaced,
        write_s=time.perf_counter() - started,
    )


def cpu_tensors(tensors: Mapping[str, Any]) -> dict[str, Any]:
    """Detached, contiguous CPU tensors; safetensors refuses tensors sharing storage, so repeats
    (the same tensor in two conditioning entries, or views of one buffer) are copied."""
    out, seen = {}, set()
    for name, tensor in tensors.items():
        t = tensor.detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        t = t.contiguous()
        pointer = t.untyped_storage().data_ptr() if t.numel() else None
        if pointer is not None and pointer in seen:
            t = t.clone()
            pointer = t.untyped_storage().data_ptr()
        if pointer is not None:
            seen.add(pointer)
        out[name] = t
    return out


def _save_safetensors(tensors, path, header) -> None:
    from safetensors.torch import save_file

    save_file(tensors, path, metadata=header)


def _to_numpy(tensor):
    return tensor.numpy() if _numpy_native(tensor) else tensor.float().numpy()


def _save_npy(array, path) -> None:
    import numpy as np

    with open(path, "wb") as f:
        np.save(f, array, allow_pickle=False)


def _write_atomic(path: str, write) -> None:
    """Write to a temporary file beside `path`, then rename it there: a reader never sees a partial
    file. An older file of that name is first renamed aside and deleted on a background thread:
    renaming over it makes ext4 (auto_da_alloc) write the new data out before the rename returns,
    and deleting it frees its pages, each 0.2-1 ms or more, most of a small dump's time in the
    prompt's path. Between the two renames a reader finds no file."""
    directory = os.path.dirname(path)
    suffix = os.path.splitext(path)[1]
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=directory)
    os.close(fd)
    aside = None
    try:
        write(tmp)
        if os.path.lexists(path):
            # mkstemp's random part has no ".": no other temporary file can have this name
            aside = tmp[: -len(suffix)] + ".replaced" + suffix if suffix else tmp + ".replaced"
            os.rename(path, aside)
        os.rename(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        if aside is not None and not os.path.lexists(path):
            os.rename(aside, path)  # the older file back where it was
            aside = None
        raise
    if aside is not None:
        _DELETER.submit(lambda: _unlink_quietly(aside))


# Deletes the older files of rewritten dumps off the prompt's path.
_DELETER = BackgroundWorker("pipeline-monitor-dump-delete")


def finish_deletions() -> None:
    """Wait until the older files of rewritten dumps are deleted (tests)."""
    _DELETER.join()


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# -- finding and reading -------------------------------------------------------------------------


def resolve_file(directory: str, name: str, suffixes: tuple[str, ...] = (DUMP_SUFFIX,)) -> str:
    """Path of an existing regular file directly inside `directory`, or DumpError."""
    check_file_name(name)
    if not name.endswith(suffixes):
        raise DumpNameError(f"Not a dump file name: {name!r} (expected {' or '.join(suffixes)}).")
    path = os.path.join(directory, name)
    try:
        info = os.lstat(path)
    except OSError:
        raise DumpNotFoundError(f"No dump named {name!r} in the dumps folder.") from None
    if not stat.S_ISREG(info.st_mode):  # a symlink or folder could lead out of the dumps folder
        raise DumpNotFoundError(f"{name!r} in the dumps folder is not a regular file.")
    return path


def list_dumps(directory: str) -> list[dict]:
    """Dump files in `directory`, newest first: name, size_bytes, modified_unix_s."""
    rows = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return rows
    for entry in entries:
        if not entry.name.endswith(DUMP_SUFFIX) or not is_safe_file_name(entry.name):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            rows.append({"name": entry.name, "size_bytes": info.st_size, "modified_unix_s": info.st_mtime})
    rows.sort(key=lambda r: (-r["modified_unix_s"], r["name"]))
    return rows


class DumpReader:
    """An open dump: metadata, tensor names, one tensor at a time (memory stays bounded)."""

    def __init__(self, name: str, handle):
        self.name = name
        self._handle = handle
        self.raw_metadata = dict(handle.metadata() or {})
        self.names = list(handle.keys())

    @property
    def metadata(self) -> dict:
        """The header with the JSON-valued entries decoded."""
        decoded = dict(self.raw_metadata)
        for key in ("tensors", "extras", "skipped", "source_nodes"):
            if key in decoded:
                try:
                    decoded[key] = json.loads(decoded[key])
                except ValueError:
                    pass
        return decoded

    def get(self, tensor_name: str):
        try:
            return self._handle.get_tensor(tensor_name)
        except Exception as exc:
            raise DumpCorruptError(
                f"Dump {self.name!r}: tensor {tensor_name!r} unreadable ({type(exc).__name__}: {exc})."
            ) from exc


@contextmanager
def open_dump(directory: str, name: str) -> Iterator[DumpReader]:
    path = resolve_file(directory, name)
    try:
        from safetensors import safe_open

        handle_cm = safe_open(path, framework="pt", device="cpu")
        handle = handle_cm.__enter__()
    except Exception as exc:
        raise DumpCorruptError(
            f"Dump {name!r} is not a readable safetensors file ({type(exc).__name__}: {exc})."
        ) from exc
    try:
        yield DumpReader(name, handle)
    finally:
        handle_cm.__exit__(None, None, None)


def load_dump(directory: str, name: str) -> tuple[dict, dict]:
    """(tensors, metadata) of a whole dump; for small dumps and tests."""
    with open_dump(directory, name) as reader:
        return {t: reader.get(t) for t in reader.names}, reader.metadata

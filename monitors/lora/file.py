"""LoRA file status: exists, size, and the safetensors header, read without loading a tensor.

A safetensors file starts with an 8-byte little-endian header length N and N bytes of JSON:
{"__metadata__": {str: str}, "<tensor>": {"dtype", "shape", "data_offsets": [begin, end]}, ...}.
Only those bytes are read. Anything inconsistent is reported as a corrupt header (a finding for the
user), never raised.
"""

from __future__ import annotations

import json
import os
import struct
from collections import Counter
from typing import Any

from .caches import FILE_STATUSES, file_identity

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit
MAX_METADATA_VALUE_CHARS = 500  # kohya's tag frequencies can be megabytes: keep reports small
MAX_METADATA_ENTRIES = 100
SAFETENSORS_SUFFIXES = (".safetensors", ".sft")

# Metadata fields that say what the LoRA is (kohya sd-scripts, modelspec, diffusers/PEFT trainers).
NETWORK_FIELDS = {
    "dim": ("ss_network_dim", "lora_rank", "rank"),
    "alpha": ("ss_network_alpha", "lora_alpha", "alpha"),
    "module": ("ss_network_module",),
    "args": ("ss_network_args",),
    "base_model": ("ss_base_model_version", "modelspec.architecture", "base_model"),
    "base_model_name": ("ss_sd_model_name", "ss_base_model_name", "modelspec.title"),
    "resolution": ("ss_resolution", "modelspec.resolution"),
    "training_comment": ("ss_training_comment",),
}


class CorruptHeader(ValueError):
    """The file is not a readable safetensors file."""


class TruncatedData(CorruptHeader):
    """The header is whole but the tensor data it describes is cut off (an incomplete download)."""


def read_safetensors_header(path: str) -> tuple[dict[str, dict], dict[str, str]]:
    """(tensor name -> {dtype, shape, data_offsets}, __metadata__) from the header alone."""
    file_size = os.path.getsize(path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise CorruptHeader(f"file has {len(prefix)} bytes, fewer than the 8-byte header length")
        (length,) = struct.unpack("<Q", prefix)
        if length == 0 or length > MAX_HEADER_BYTES or 8 + length > file_size:
            raise CorruptHeader(f"header length {length} does not fit a {file_size}-byte file")
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptHeader(f"header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise CorruptHeader("header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise CorruptHeader("__metadata__ is not an object")
    data_size = file_size - 8 - length
    tensors = {}
    for name, info in header.items():
        _check_tensor_entry(name, info, data_size)
        tensors[name] = info
    return tensors, {str(k): str(v) for k, v in metadata.items()}


def _check_tensor_entry(name: str, info, data_size: int) -> None:
    if not isinstance(info, dict):
        raise CorruptHeader(f"entry {name!r} is not an object")
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if not isinstance(info.get("dtype"), str):
        raise CorruptHeader(f"entry {name!r} has no dtype")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise CorruptHeader(f"entry {name!r} has an invalid shape {shape!r}")
    if (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
        and offsets[1] > data_size
    ):
        raise TruncatedData(
            f"the file is cut short: tensor {name!r} needs {offsets[1]} bytes of data, "
            f"the file holds {data_size} (an incomplete download or copy)"
        )
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_size
    ):
        raise CorruptHeader(f"entry {name!r} has data offsets {offsets!r} outside the {data_size}-byte data")


def _short(value: str) -> str:
    if len(value) <= MAX_METADATA_VALUE_CHARS:
        return value
    return value[:MAX_METADATA_VALUE_CHARS] + f"... ({len(value)} characters)"


def network_info(metadata: dict[str, str]) -> dict[str, Any]:
    """dim, alpha, module, base model... from well-known metadata fields (None when absent)."""
    found = {}
    for field, names in NETWORK_FIELDS.items():
        value = next((metadata[n] for n in names if n in metadata), None)
        found[field] = None if value is None else _short(value)
    for field in ("dim", "alpha"):
        try:
            found[field] = None if found[field] is None else float(found[field])
        except ValueError:
            pass  # e.g. "Dynamic": keep the text
    return found


def lora_file_status(name: str | None, path: str | None) -> tuple[dict[str, Any], dict | None]:
    """(what the report says about one LoRA file, the header's tensor index or None).

    The index (name -> dtype, shape, offsets) is for the caller to read and drop, not to report
    or change. A file read before with the same identity (path, size, mtime) is not read again."""
    ident = file_identity(path) if path and os.path.isfile(path) else None
    cached = FILE_STATUSES.get(ident)
    if cached is not None:
        status, index = cached
        status["name"] = name
        return status, index
    status, index = _read_file_status(name, path)
    FILE_STATUSES.put(ident, status, index)
    return status, index


def _read_file_status(name: str | None, path: str | None) -> tuple[dict[str, Any], dict | None]:
    status: dict[str, Any] = {
        "name": name,
        "path": path,
        "exists": False,
        "size_bytes": None,
        "format": None,
        "header_ok": None,
        "error": None,
        "n_tensors": None,
        "tensor_bytes": None,
        "dtypes": {},
        "network": {},
        "metadata": {},
        "n_metadata_entries": 0,
    }
    if not path or not os.path.isfile(path):
        status["error"] = "file not found"
        return status, None
    status["exists"] = True
    try:
        status["size_bytes"] = os.path.getsize(path)
    except OSError as exc:
        status["error"] = f"unreadable: {exc.strerror or exc}"
        return status, None
    if not path.lower().endswith(SAFETENSORS_SUFFIXES):
        status["format"] = os.path.splitext(path)[1].lstrip(".").lower() or "unknown"
        return status, None
    status["format"] = "safetensors"
    try:
        tensors, metadata = read_safetensors_header(path)
    except TruncatedData as exc:
        status["header_ok"] = True
        status["data_ok"] = False
        status["error"] = str(exc)
        return status, None
    except CorruptHeader as exc:
        status["header_ok"] = False
        status["error"] = f"corrupt safetensors header: {exc}"
        return status, None
    except OSError as exc:
        status["header_ok"] = False
        status["error"] = f"unreadable: {exc.strerror or exc}"
        return status, None
    status["header_ok"] = True
    status["n_tensors"] = len(tensors)
    status["tensor_bytes"] = sum(t["data_offsets"][1] - t["data_offsets"][0] for t in tensors.values())
    status["dtypes"] = dict(Counter(t["dtype"] for t in tensors.values()))
    status["network"] = network_info(metadata)
    status["n_metadata_entries"] = len(metadata)
    status["metadata"] = {k: _short(v) for k, v in sorted(metadata.items())[:MAX_METADATA_ENTRIES]}
    return status, tensors


VALUE_READ_MAX_ELEMENTS = 16  # alpha scalars, reshape_weight shapes: read for real
SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
}


def placeholder_state_dict(path: str, index: dict[str, dict]) -> dict:
    """File key -> meta tensor of the header's shape and dtype; the few tiny ones read for real.

    Enough for ComfyUI's key mapping and load_lora (which read values only from alpha and
    reshape_weight entries) without reading the file's weights.
    """
    import torch
    from safetensors import safe_open

    placeholders = {}
    small = []
    for name, info in index.items():
        shape = info["shape"]
        dtype = getattr(torch, SAFETENSORS_DTYPES.get(info["dtype"], "float32"), torch.float32)
        n = 1
        for dim in shape:
            n *= dim
        if n <= VALUE_READ_MAX_ELEMENTS:
            small.append(name)
        else:
            placeholders[name] = torch.empty(shape, dtype=dtype, device="meta")
    if small:
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in small:
                placeholders[name] = f.get_tensor(name)
    return placeholders

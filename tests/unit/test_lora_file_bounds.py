"""The bounds of a LoRA file's header check (monitors/lora/file.py): the length prefix, the 100 MiB
header limit, data offsets at the data's end (truncated data against a corrupt entry), shapes,
metadata values kept short and few, the format from the suffix, and the tiny tensors of the
placeholder state dict read for real."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors.torch import save_file

from monitors.lora.caches import clear_caches
from monitors.lora.file import (
    MAX_HEADER_BYTES,
    CorruptHeader,
    TruncatedData,
    lora_file_status,
    network_info,
    placeholder_state_dict,
    read_safetensors_header,
)


@pytest.fixture(autouse=True)
def no_cached_statuses():
    clear_caches()
    yield
    clear_caches()


def write(path, header, data: bytes = b"", length: int | None = None):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return str(path)


def entry(offsets, shape=(2,), dtype="F32") -> dict:
    return {"dtype": dtype, "shape": list(shape), "data_offsets": offsets}


def corrupt_message(path: str) -> str:
    with pytest.raises(CorruptHeader) as caught:
        read_safetensors_header(path)
    return str(caught.value)


def test_the_length_prefix_needs_eight_bytes(tmp_path):
    seven = tmp_path / "seven.safetensors"
    seven.write_bytes(b"\x02" + b"\0" * 6)
    assert corrupt_message(str(seven)) == "file has 7 bytes, fewer than the 8-byte header length"
    eight = tmp_path / "eight.safetensors"
    eight.write_bytes(struct.pack("<Q", 2))
    assert corrupt_message(str(eight)) == "header length 2 does not fit a 8-byte file"


def test_a_header_that_ends_the_file_is_read(tmp_path):
    path = write(tmp_path / "empty.safetensors", {"__metadata__": {"n": 5, "s": "x"}})
    assert read_safetensors_header(path) == ({}, {"n": "5", "s": "x"})
    path = write(tmp_path / "null.safetensors", {"__metadata__": None})
    assert read_safetensors_header(path) == ({}, {})
    too_long = write(tmp_path / "long.safetensors", b"{}", length=3)
    assert corrupt_message(too_long) == "header length 3 does not fit a 10-byte file"


def test_headers_up_to_the_format_limit_are_read(tmp_path):
    """100 MiB is the safetensors limit: a header of that length is parsed, one byte more is not
    (sparse files: nothing of that size is written)."""
    assert MAX_HEADER_BYTES == 100 * 1024 * 1024
    at_limit = tmp_path / "limit.safetensors"
    with open(at_limit, "wb") as f:
        f.write(struct.pack("<Q", MAX_HEADER_BYTES) + b"{}")
        f.truncate(8 + MAX_HEADER_BYTES)
    assert corrupt_message(str(at_limit)).startswith("header is not valid JSON")
    above = tmp_path / "above.safetensors"
    with open(above, "wb") as f:
        f.write(struct.pack("<Q", MAX_HEADER_BYTES + 1))
        f.truncate(8 + MAX_HEADER_BYTES + 1)
    assert corrupt_message(str(above)) == (
        f"header length {MAX_HEADER_BYTES + 1} does not fit a {8 + MAX_HEADER_BYTES + 1}-byte file"
    )


def test_data_offsets_up_to_the_end_of_the_data(tmp_path):
    whole = write(tmp_path / "whole.safetensors", {"t": entry([0, 8])}, b"12345678")
    tensors, _ = read_safetensors_header(whole)
    assert tensors == {"t": entry([0, 8])}
    empty = write(tmp_path / "empty.safetensors", {"t": entry([8, 8], shape=(0,))}, b"12345678")
    assert read_safetensors_header(empty)[0]["t"]["shape"] == [0]
    cut = write(tmp_path / "cut.safetensors", {"t": entry([0, 9])}, b"12345678")
    with pytest.raises(TruncatedData) as caught:
        read_safetensors_header(cut)
    assert str(caught.value) == (
        "the file is cut short: tensor 't' needs 9 bytes of data, the file holds 8 (an incomplete download or copy)"
    )
    # an empty tensor placed past the end: the data is cut short all the same
    empty_past = write(tmp_path / "past.safetensors", {"t": entry([10, 10], shape=(0,))}, b"12345678")
    with pytest.raises(TruncatedData, match="needs 10 bytes of data, the file holds 8"):
        read_safetensors_header(empty_past)


@pytest.mark.parametrize(
    "offsets",
    [[4, 2], [9, 8], [20, 10], [-1, 20], [0, 4, 8], [0], "0-8", ["0", "8"], [0.0, 8], None],
)
def test_malformed_offsets_are_a_corrupt_entry_not_truncated_data(tmp_path, offsets):
    path = write(tmp_path / "bad.safetensors", {"t": entry(offsets)}, b"12345678")
    with pytest.raises(CorruptHeader) as caught:
        read_safetensors_header(path)
    assert type(caught.value) is CorruptHeader
    assert str(caught.value) == f"entry 't' has data offsets {offsets!r} outside the 8-byte data"


@pytest.mark.parametrize("shape", [[2.0], ["2"], "2", None, [2, -1]])
def test_a_shape_is_a_list_of_sizes(tmp_path, shape):
    path = write(
        tmp_path / "bad.safetensors", {"t": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}}
    )
    assert corrupt_message(path) == f"entry 't' has an invalid shape {shape!r}"


def test_a_dtype_is_text(tmp_path):
    path = write(tmp_path / "bad.safetensors", {"t": {"dtype": 1, "shape": [], "data_offsets": [0, 0]}})
    assert corrupt_message(path) == "entry 't' has no dtype"


def test_metadata_values_are_cut_after_500_characters():
    info = network_info({"ss_network_module": "m" * 500, "ss_training_comment": "c" * 501})
    assert info["module"] == "m" * 500
    assert info["training_comment"] == "c" * 500 + "... (501 characters)"


def test_network_fields_take_the_first_known_name():
    info = network_info(
        {
            "rank": "4",
            "lora_rank": "8",
            "ss_network_dim": "32",
            "alpha": "1",
            "lora_alpha": "16",
            "modelspec.title": "title",
            "ss_base_model_name": "base name",
            "modelspec.resolution": "1024",
            "ss_network_args": '{"conv_dim": 4}',
        }
    )
    assert info == {
        "dim": 32.0,
        "alpha": 16.0,
        "module": None,
        "args": '{"conv_dim": 4}',
        "base_model": None,
        "base_model_name": "base name",
        "resolution": "1024",
        "training_comment": None,
    }
    assert network_info({"rank": "4", "alpha": "x"})["dim"] == 4.0


def test_the_format_comes_from_the_suffix(tmp_path):
    for name in ("upper.SAFETENSORS", "short.sft"):
        path = write(tmp_path / name, {"t": entry([0, 8])}, b"12345678")
        status, index = lora_file_status(name, path)
        assert status["format"] == "safetensors" and status["header_ok"] is True and list(index) == ["t"]
    (tmp_path / "noext").write_bytes(b"123")
    (tmp_path / "model.PT").write_bytes(b"123")
    assert lora_file_status("noext", str(tmp_path / "noext"))[0]["format"] == "unknown"
    status, index = lora_file_status("model.PT", str(tmp_path / "model.PT"))
    assert status["format"] == "pt" and status["size_bytes"] == 3 and index is None
    assert status["header_ok"] is None and status["error"] is None and status["n_tensors"] is None


def test_a_status_counts_every_metadata_entry_and_keeps_the_first_hundred_by_name(tmp_path):
    metadata = {f"key{i:03d}": str(i) for i in range(150, -1, -1)}
    header = {"__metadata__": metadata, "a": entry([0, 8], dtype="F16"), "b": entry([8, 20], dtype="F16")}
    path = write(tmp_path / "many.safetensors", header, b"0" * 20)
    status, index = lora_file_status("many", path)
    assert status["n_metadata_entries"] == 151
    assert list(status["metadata"]) == [f"key{i:03d}" for i in range(100)]
    assert status["tensor_bytes"] == 20
    assert status["dtypes"] == {"F16": 2}
    assert status["n_tensors"] == 2 and sorted(index) == ["a", "b"]
    assert status["exists"] is True and status["error"] is None


def test_an_unreadable_file_is_said_so(tmp_path, monkeypatch):
    path = write(tmp_path / "a.safetensors", {})

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("monitors.lora.file.read_safetensors_header", refuse)
    status, index = lora_file_status("a", path)
    assert status["header_ok"] is False and index is None
    assert status["error"] == "unreadable: Permission denied"


def test_a_file_whose_size_cannot_be_read(tmp_path, monkeypatch):
    import os

    path = write(tmp_path / "a.safetensors", {})
    real_getsize = os.path.getsize

    def failing(name):
        if name == path:
            raise OSError(5, "Input/output error")
        return real_getsize(name)

    monkeypatch.setattr(os.path, "getsize", failing)
    status, index = lora_file_status("a", path)
    assert index is None
    assert status["exists"] is True and status["size_bytes"] is None and status["format"] is None
    assert status["error"] == "unreadable: Input/output error"


def test_an_error_without_its_text_is_named_by_itself(tmp_path, monkeypatch):
    path = write(tmp_path / "a.safetensors", {})

    def refuse(*args, **kwargs):
        raise OSError("the disk went away")

    monkeypatch.setattr("monitors.lora.file.read_safetensors_header", refuse)
    status, _ = lora_file_status("a", path)
    assert status["error"] == "unreadable: the disk went away"


def test_a_missing_file_has_nothing_counted():
    status, index = lora_file_status("gone", None)
    assert index is None
    assert status == {
        "name": "gone",
        "path": None,
        "exists": False,
        "size_bytes": None,
        "format": None,
        "header_ok": None,
        "error": "file not found",
        "n_tensors": None,
        "tensor_bytes": None,
        "dtypes": {},
        "network": {},
        "metadata": {},
        "n_metadata_entries": 0,
    }


def test_tiny_tensors_are_read_for_real_the_others_are_placeholders(tmp_path):
    path = str(tmp_path / "p.safetensors")
    save_file(
        {
            "alpha": torch.tensor(8.0),
            "sixteen": torch.arange(16, dtype=torch.float16).reshape(4, 4),
            "seventeen": torch.zeros(17, dtype=torch.bfloat16),
            "big": torch.zeros(3, 8, dtype=torch.int8),
        },
        path,
    )
    index, _ = read_safetensors_header(path)
    index["odd"] = {"dtype": "F8_UNKNOWN", "shape": [5, 6], "data_offsets": [0, 0]}
    tensors = placeholder_state_dict(path, index)
    assert tensors["alpha"].item() == 8.0 and tensors["alpha"].device.type == "cpu"
    assert torch.equal(tensors["sixteen"], torch.arange(16, dtype=torch.float16).reshape(4, 4))
    assert tensors["seventeen"].is_meta and tensors["seventeen"].dtype == torch.bfloat16
    assert tensors["seventeen"].shape == (17,)
    assert tensors["big"].is_meta and tensors["big"].dtype == torch.int8 and tensors["big"].shape == (3, 8)
    assert tensors["odd"].is_meta and tensors["odd"].dtype == torch.float32 and tensors["odd"].shape == (5, 6)

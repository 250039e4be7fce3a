"""A LoRA file's header is read once per file identity (path, size, mtime): a repeated prompt does
not parse and check its ~800 entries again, and a changed file is read again."""

from __future__ import annotations

import os

import pytest
import torch
from safetensors.torch import save_file

from monitors.lora import file as lora_file
from monitors.lora.caches import FILE_STATUSES, FileStatuses, clear_caches


@pytest.fixture
def reads(monkeypatch):
    clear_caches()
    calls = []
    original = lora_file.read_safetensors_header

    def counting(path):
        calls.append(path)
        return original(path)

    monkeypatch.setattr(lora_file, "read_safetensors_header", counting)
    yield calls
    clear_caches()


def test_a_file_seen_before_is_not_read_again_and_its_status_is_served_without_a_deep_copy(tmp_path, reads):
    path = str(tmp_path / "a.safetensors")
    save_file({"x.lora_up.weight": torch.zeros(4, 2)}, path, metadata={"ss_network_dim": "2"})
    first, index = lora_file.lora_file_status("a", path)
    again, index_again = lora_file.lora_file_status("renamed", path)
    assert reads == [path]
    assert first["name"] == "a" and again["name"] == "renamed"  # each caller's own top-level dict
    assert again["metadata"] == {"ss_network_dim": "2"}
    assert again["metadata"] is lora_file.lora_file_status("a", path)[0]["metadata"]  # shared, read-only
    assert again["n_tensors"] == 1 and index_again is index
    save_file({"x.lora_up.weight": torch.zeros(8, 2), "y": torch.zeros(1)}, path)
    os.utime(path, ns=(1, 1))  # another size and mtime: another identity
    changed, _ = lora_file.lora_file_status("a", path)
    assert reads == [path, path] and changed["n_tensors"] == 2


def test_unreadable_files_are_not_kept_and_the_cache_is_bounded(tmp_path, reads):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00notjson!")
    for _ in range(2):
        status, index = lora_file.lora_file_status("bad", str(bad))
        assert status["header_ok"] is False and index is None
    assert reads == [str(bad)] * 2
    assert lora_file.lora_file_status("missing", str(tmp_path / "none.safetensors"))[0]["error"] == "file not found"
    statuses = FileStatuses(max_files=2)
    for i in range(3):
        statuses.put(("p", i, 0), {"n": i}, {})
    assert statuses.get(("p", 0, 0)) is None and statuses.get(("p", 2, 0)) == ({"n": 2}, {})
    statuses.get(("p", 1, 0))  # the least recently used goes first
    statuses.put(("p", 3, 0), {"n": 3}, {})
    assert statuses.get(("p", 2, 0)) is None and statuses.get(("p", 1, 0)) is not None
    assert FILE_STATUSES.get(None) is None

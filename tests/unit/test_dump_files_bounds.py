"""monitors/dumps/files.py at its bounds: the size cap and free space at equality, the npy bytes
planned per dtype, a zero cap, the write time from the clock, and which tensors are copied."""

from __future__ import annotations

import dataclasses
import types
from collections import namedtuple

import numpy as np
import pytest
import torch

from monitors.dumps import files
from monitors.dumps.collect import CollectedTensors
from monitors.dumps.files import DumpError, DumpTooLargeError, max_dump_bytes, write_dump


def collected(**tensors) -> CollectedTensors:
    return CollectedTensors(tensors=dict(tensors))


def test_a_cap_of_zero_bytes_is_a_cap_and_a_negative_one_is_refused(monkeypatch, caplog):
    monkeypatch.setenv(files.ENV_MAX_BYTES, "0")
    assert max_dump_bytes() == 0
    monkeypatch.setenv(files.ENV_MAX_BYTES, "-1")
    assert max_dump_bytes() == files.DEFAULT_MAX_BYTES
    assert "is not a byte count" in caplog.text


@pytest.mark.parametrize(
    ("dtype", "npy_dtype", "npy_bytes_per_element"),
    [(torch.float16, np.float16, 2), (torch.int8, np.int8, 1), (torch.bfloat16, np.float32, 4)],
)
def test_the_cap_holds_the_dump_and_its_npy_files_exactly(tmp_path, dtype, npy_dtype, npy_bytes_per_element):
    """Planned = the tensors' bytes + each npy file's (numpy has no bfloat16: float32, 4 bytes);
    a dump of exactly the cap is written, one byte less refuses it."""
    values = collected(x=torch.ones(6, dtype=dtype))
    planned = values.total_bytes + 6 * npy_bytes_per_element
    with pytest.raises(DumpTooLargeError, match="above the cap"):
        write_dump(str(tmp_path), "over", values, npy=True, max_bytes=planned - 1)
    result = write_dump(str(tmp_path), "exact", values, npy=True, max_bytes=planned)
    assert result.npy_files == ("exact.x.npy",)
    assert np.load(tmp_path / "exact.x.npy", allow_pickle=False).dtype == npy_dtype


def test_free_space_equal_to_the_dump_is_enough(tmp_path, monkeypatch):
    values = collected(x=torch.ones(4))
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(files.shutil, "disk_usage", lambda _: usage(10**9, 0, values.total_bytes - 1))
    with pytest.raises(DumpError, match="free on disk"):
        write_dump(str(tmp_path), "short", values)
    monkeypatch.setattr(files.shutil, "disk_usage", lambda _: usage(10**9, 0, values.total_bytes))
    assert write_dump(str(tmp_path), "fits", values).n_tensors == 1


def test_the_write_time_is_the_clocks_difference_and_the_result_is_frozen(tmp_path, monkeypatch):
    clock = iter([10.0, 10.25])
    fake_time = types.SimpleNamespace(perf_counter=lambda: next(clock), time=lambda: 1_700_000_000.0)
    monkeypatch.setattr(files, "time", fake_time)  # the module's own clock only
    result = write_dump(str(tmp_path), "timed", collected(x=torch.zeros(2)))
    assert result.write_s == 0.25 and result.metadata["created_unix_s"] == "1700000000.000"
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.replaced = True


def test_only_tensors_sharing_memory_are_copied_and_other_devices_are_moved_to_the_cpu():
    base = torch.arange(6.0)
    other = torch.ones(3)
    out = files.cpu_tensors({"a": base, "view": base[:3], "b": other, "empty": torch.zeros(0)})
    assert out["a"].data_ptr() == base.data_ptr() and out["b"].data_ptr() == other.data_ptr()
    assert out["view"].data_ptr() != base.data_ptr() and out["view"].tolist() == [0.0, 1.0, 2.0]

    class OnAnotherDevice:  # what a CUDA tensor shows of itself here: its device, and .to()
        device = types.SimpleNamespace(type="cuda")
        moved_to = []

        def detach(self):
            return self

        def to(self, device):
            self.moved_to.append(device)
            return torch.full((2,), 7.0)

    assert files.cpu_tensors({"g": OnAnotherDevice()})["g"].tolist() == [7.0, 7.0]
    assert OnAnotherDevice.moved_to == ["cpu"]

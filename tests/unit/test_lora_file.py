"""LoRA file status from the safetensors header alone; corrupt files are findings, not crashes."""

import json
import struct

import pytest
import torch
from safetensors.torch import save_file

from monitors.lora.file import CorruptHeader, lora_file_status, network_info, read_safetensors_header

METADATA = {
    "ss_network_dim": "16",
    "ss_network_alpha": "8.0",
    "ss_network_module": "networks.lora",
    "ss_base_model_version": "sdxl_base_v1-0",
    "ss_sd_model_name": "sd_xl_base_1.0.safetensors",
    "ss_tag_frequency": "x" * 10_000,
}


@pytest.fixture
def lora_file(tmp_path):
    path = tmp_path / "style.safetensors"
    save_file(
        {
            "lora_unet_a.lora_down.weight": torch.zeros(16, 32, dtype=torch.float16),
            "lora_unet_a.lora_up.weight": torch.zeros(64, 16, dtype=torch.float16),
            "lora_unet_a.alpha": torch.tensor(8.0),
        },
        str(path),
        metadata=METADATA,
    )
    return path


def raw_file(path, header: bytes, data: bytes = b"", length: int | None = None):
    path.write_bytes(struct.pack("<Q", len(header) if length is None else length) + header + data)
    return path


def test_status_of_a_good_file(lora_file):
    status, index = lora_file_status("style.safetensors", str(lora_file))
    assert status["exists"] and status["header_ok"] and status["error"] is None
    assert status["size_bytes"] == lora_file.stat().st_size and status["format"] == "safetensors"
    assert status["n_tensors"] == 3 and status["dtypes"] == {"F16": 2, "F32": 1}
    assert status["tensor_bytes"] == (16 * 32 + 64 * 16) * 2 + 4
    assert status["network"]["dim"] == 16.0 and status["network"]["alpha"] == 8.0
    assert status["network"]["base_model"] == "sdxl_base_v1-0"
    assert status["network"]["base_model_name"] == "sd_xl_base_1.0.safetensors"
    long_value = status["metadata"]["ss_tag_frequency"]
    assert len(long_value) < 600 and long_value.endswith("(10000 characters)")
    assert index["lora_unet_a.lora_up.weight"]["shape"] == [64, 16]
    json.dumps(status)


def test_header_is_read_without_the_tensor_data(lora_file, monkeypatch):
    """Only 8 + header-length bytes are read, whatever the file size."""
    reads = []
    real_open = open

    def counting_open(*args, **kwargs):
        handle = real_open(*args, **kwargs)
        real_read = handle.read

        def read(n=-1):
            reads.append(n)
            return real_read(n)

        handle.read = read
        return handle

    monkeypatch.setattr("builtins.open", counting_open)
    tensors, metadata = read_safetensors_header(str(lora_file))
    assert len(tensors) == 3 and metadata["ss_network_dim"] == "16"
    assert reads[0] == 8 and all(n > 0 for n in reads) and len(reads) == 2


def test_missing_file():
    status, index = lora_file_status("gone.safetensors", None)
    assert status["exists"] is False and status["error"] == "file not found" and index is None
    status, _ = lora_file_status("gone.safetensors", "/nonexistent/gone.safetensors")
    assert status["exists"] is False


def test_other_formats_are_described_but_not_parsed(tmp_path):
    path = tmp_path / "old.ckpt"
    path.write_bytes(b"\0" * 100)
    status, index = lora_file_status("old.ckpt", str(path))
    assert status["exists"] and status["format"] == "ckpt" and status["header_ok"] is None and index is None


@pytest.mark.parametrize(
    "header, data, length, message",
    [
        (b"", b"", None, "header length 0"),
        (b'{"a": 1', b"", None, "not valid JSON"),
        (b"[1, 2]", b"", None, "not a JSON object"),
        # the header is whole, the data is cut: the message says so and never blames the header
        (b'{"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', b"1234", None, "cut short"),
        (b'{"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}', b"", None, "invalid shape"),
        (b'{"t": {"shape": [1], "data_offsets": [0, 0]}}', b"", None, "no dtype"),
        (b'{"t": 3}', b"", None, "not an object"),
        (b'{"__metadata__": [1]}', b"", None, "__metadata__"),
        (b"{}", b"", 1 << 40, "does not fit"),
        (b"\xff\xfe{}", b"", None, "not valid JSON"),
    ],
)
def test_corrupt_headers_are_clear_findings(tmp_path, header, data, length, message):
    path = raw_file(tmp_path / "bad.safetensors", header, data, length)
    with pytest.raises(CorruptHeader, match=message):
        read_safetensors_header(str(path))
    status, index = lora_file_status("bad.safetensors", str(path))
    if message == "cut short":
        assert status["header_ok"] is True and status["data_ok"] is False and index is None
        assert "header" not in status["error"] and message in status["error"]
        return
    assert status["exists"] and status["header_ok"] is False and index is None
    assert status["error"].startswith("corrupt safetensors header") and message in status["error"]


def test_file_shorter_than_the_length_prefix(tmp_path):
    path = tmp_path / "tiny.safetensors"
    path.write_bytes(b"\x01\x02")
    status, _ = lora_file_status("tiny.safetensors", str(path))
    assert status["header_ok"] is False and "fewer than" in status["error"]


def test_network_info_keeps_non_numeric_values():
    info = network_info(
        {"ss_network_dim": "Dynamic", "modelspec.architecture": "stable-diffusion-xl-v1-base/lora"}
    )
    assert info["dim"] == "Dynamic" and info["alpha"] is None
    assert info["base_model"] == "stable-diffusion-xl-v1-base/lora"

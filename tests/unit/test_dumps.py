"""monitors/dumps/files.py: collecting, writing, listing and reading dumps; names, cap, corrupt files."""

import json
import os
import struct

import numpy as np
import pytest
import safetensors.torch
import torch

from monitors.dumps import files as dumps
from monitors.dumps.collect import collect_tensors
from monitors.dumps.compare import compare_dump_with, compare_dumps
from monitors.dumps.files import (
    DumpCorruptError,
    DumpError,
    DumpNameError,
    DumpNotFoundError,
    DumpTooLargeError,
    dump_file_name,
    list_dumps,
    load_dump,
    write_dump,
)


class HookGroup:  # a non-tensor conditioning extra, like comfy.hooks.HookGroup
    pass


def conditioning():
    cond = torch.randn(1, 77, 32)
    return [
        [
            cond,
            {
                "pooled_output": torch.randn(1, 32),
                "guidance": 3.5,
                "hooks": HookGroup(),
                "area": (64, 64, 0, 0),
            },
        ],
        [cond * 2, {"pooled_output": None, "reference_latents": [torch.zeros(1, 4, 8, 8)], "weird key!": 1}],
    ]


def latent():
    return {"samples": torch.randn(2, 4, 8, 8), "noise_mask": torch.ones(2, 1, 64, 64), "batch_index": [0, 1]}


def all_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_collect_names_every_tensor_stably():
    collected = collect_tensors(conditioning=conditioning(), latent=latent(), image=torch.rand(1, 8, 8, 3))
    assert list(collected.tensors) == [
        "cond.0.tensor",
        "cond.0.pooled_output",
        "cond.1.tensor",
        "cond.1.reference_latents.0",
        "latent.samples",
        "latent.noise_mask",
        "image",
    ]
    assert collected.extras == {
        "cond.0.guidance": "3.5",
        "cond.0.area": "[64, 64, 0, 0]",
        "cond.1.weird_key_": "1",
        "latent.batch_index": "[0, 1]",
    }
    assert collected.skipped == {"cond.0.hooks": "HookGroup"}


def test_collect_bad_values_are_skipped_not_raised():
    collected = collect_tensors(conditioning="text", latent=torch.zeros(1), image={"a": 1})
    assert collected.tensors == {}
    assert collected.skipped == {"cond": "str", "latent": "Tensor", "image": "dict"}
    collected = collect_tensors(conditioning=[None, [torch.zeros(1)], ("a", "b")])
    assert collected.skipped == {"cond.0": "NoneType", "cond.1": "list", "cond.2": "tuple"}


def test_round_trip_with_metadata(tmp_path):
    values = {"conditioning": conditioning(), "latent": latent()}
    collected = collect_tensors(**values)
    result = write_dump(
        str(tmp_path),
        "round_trip",
        collected,
        {"prompt_id": "p-1", "dump_node_id": "7", "source_nodes": {"latent": {"node_id": "3"}}, "none": None},
    )
    assert result.file_name == "round_trip.safetensors" and not result.replaced
    assert result.n_tensors == len(collected.tensors)
    assert result.file_bytes == os.path.getsize(tmp_path / "round_trip.safetensors") > result.tensor_bytes
    tensors, meta = load_dump(str(tmp_path), "round_trip.safetensors")
    assert set(tensors) == set(collected.tensors)
    for name, original in collected.tensors.items():
        assert torch.equal(tensors[name], original), name
    assert meta["format"] == "pipeline_monitor.dump" and meta["format_version"] == "1"
    assert meta["prompt_id"] == "p-1" and meta["dump_node_id"] == "7"
    assert meta["source_nodes"] == {"latent": {"node_id": "3"}}
    assert meta["tensors"]["latent.samples"] == {"shape": [2, 4, 8, 8], "dtype": "float32", "device": "cpu"}
    assert meta["extras"]["cond.0.guidance"] == "3.5"
    assert meta["skipped"] == {"cond.0.hooks": "HookGroup"}
    assert meta["created_utc"].endswith("+00:00") and float(meta["created_unix_s"]) > 0
    assert "none" not in meta
    # every metadata value in the file is a string, as the safetensors format requires
    from safetensors import safe_open

    with safe_open(str(tmp_path / "round_trip.safetensors"), framework="pt") as f:
        assert all(isinstance(v, str) for v in f.metadata().values())
    assert all_files(tmp_path) == ["round_trip.safetensors"]  # no temporary file left


def test_shared_storage_and_dtypes_round_trip(tmp_path):
    base = torch.randn(4, 4)
    collected = collect_tensors(
        conditioning=[[base, {"pooled_output": base[0]}], [base, {}]],
        image=torch.ones(1, 2, 2, 3, dtype=torch.bfloat16),
    )
    write_dump(str(tmp_path), "shared", collected)
    tensors, _ = load_dump(str(tmp_path), "shared.safetensors")
    assert torch.equal(tensors["cond.0.pooled_output"], base[0])
    assert torch.equal(tensors["cond.1.tensor"], base)
    assert tensors["image"].dtype == torch.bfloat16


def test_npy_export_next_to_the_dump(tmp_path):
    collected = collect_tensors(
        latent={"samples": torch.arange(8.0).reshape(1, 2, 2, 2)},
        image=torch.ones(1, 1, 1, 3, dtype=torch.bfloat16),
    )
    result = write_dump(str(tmp_path), "with_npy", collected, npy=True)
    assert result.npy_files == ("with_npy.latent.samples.npy", "with_npy.image.npy")
    array = np.load(tmp_path / "with_npy.latent.samples.npy", allow_pickle=False)
    assert array.shape == (1, 2, 2, 2) and array.dtype == np.float32 and array[0, 1, 1, 1] == 7
    assert np.load(tmp_path / "with_npy.image.npy").dtype == np.float32  # bfloat16 exported as float32
    assert [row["name"] for row in list_dumps(str(tmp_path))] == ["with_npy.safetensors"]


def test_rewrite_replaces_atomically(tmp_path):
    write_dump(str(tmp_path), "same", collect_tensors(image=torch.zeros(1, 2, 2, 3)))
    result = write_dump(str(tmp_path), "same.safetensors", collect_tensors(image=torch.ones(1, 2, 2, 3)))
    assert result.replaced
    tensors, _ = load_dump(str(tmp_path), "same.safetensors")
    assert tensors["image"].sum() == 12
    dumps.finish_deletions()  # the older file is deleted off the caller's path
    assert all_files(tmp_path) == ["same.safetensors"]


BAD_NAMES = [
    "../../etc/passwd",
    "..",
    "a..b",
    "/abs",
    "/etc/passwd",
    "C:\\Windows\\x",
    "C:x",
    "sub/name",
    "sub\\name",
    "a\x00b",
    "",
    ".hidden",
    "-rf",
    "name.",
    "CON",
    "con",
    "NUL.safetensors",
    "com1",
    "LPT9.txt",
    "aux.tar.gz",
    "x" * 101,
    "sp ace",
    "naïve",
    "a*b",
    "a?b",
    "new\nline",
    "%2e%2e%2fetc",
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_unsafe_names_are_refused_and_nothing_is_written(tmp_path, name):
    dumps_dir = tmp_path / "out" / "dumps"
    with pytest.raises(DumpNameError, match="refused") as info:
        write_dump(str(dumps_dir), name, collect_tensors(image=torch.zeros(1, 2, 2, 3)))
    assert "plain file name" in str(info.value) or "longer than" in str(info.value)
    assert all_files(tmp_path) == []


@pytest.mark.parametrize("name", [None, 3, b"abc"])
def test_non_text_names_are_refused(name):
    with pytest.raises(DumpNameError):
        dump_file_name(name)


@pytest.mark.parametrize("name", ["a", "my_latent", "run-2.fp16", "CONSOLE", "x" * 100, "A1.b_c-d"])
def test_plain_names_are_accepted(tmp_path, name):
    result = write_dump(str(tmp_path), name, collect_tensors(image=torch.zeros(1)))
    assert result.file_name == name + ".safetensors"
    assert os.path.dirname(result.path) == str(tmp_path)


def test_size_cap_is_checked_before_writing(tmp_path, monkeypatch):
    collected = collect_tensors(latent={"samples": torch.zeros(1, 4, 16, 16)})  # 4096 bytes
    monkeypatch.setenv(dumps.ENV_MAX_BYTES, "4000")
    with pytest.raises(DumpTooLargeError, match="above the cap .*PIPELINE_MONITOR_DUMP_MAX_BYTES"):
        write_dump(str(tmp_path / "dumps"), "big", collected)
    assert not (tmp_path / "dumps").exists()
    monkeypatch.setenv(dumps.ENV_MAX_BYTES, "5000")
    write_dump(str(tmp_path / "dumps"), "big", collected)
    with pytest.raises(DumpTooLargeError):  # the .npy copies count too
        write_dump(str(tmp_path / "dumps"), "big2", collected, npy=True)
    assert all_files(tmp_path) == ["dumps/big.safetensors"]


def test_huge_tensor_over_the_cap_allocates_nothing(tmp_path):
    huge = torch.zeros(1).expand(1, 16, 1000, 1000, 1000)  # 64 GB as float32, one real element
    with pytest.raises(DumpTooLargeError, match="GiB"):
        write_dump(str(tmp_path), "huge", collect_tensors(latent={"samples": huge}))
    assert all_files(tmp_path) == []


def test_cap_setting_falls_back_on_garbage(monkeypatch):
    for raw, expected in (
        ("", dumps.DEFAULT_MAX_BYTES),
        ("abc", dumps.DEFAULT_MAX_BYTES),
        ("-5", dumps.DEFAULT_MAX_BYTES),
        ("123", 123),
    ):
        monkeypatch.setenv(dumps.ENV_MAX_BYTES, raw)
        assert dumps.max_dump_bytes() == expected
    monkeypatch.delenv(dumps.ENV_MAX_BYTES)
    assert dumps.max_dump_bytes() == 2 * 1024**3


def test_nothing_to_dump_is_an_error(tmp_path):
    with pytest.raises(DumpError, match="no tensors"):
        write_dump(str(tmp_path), "empty", collect_tensors(conditioning=[[None, {}]]))
    assert all_files(tmp_path) == []


def test_empty_and_zero_d_tensors_round_trip(tmp_path):
    collected = collect_tensors(latent={"samples": torch.zeros(0, 4, 8, 8), "scale": torch.tensor(0.5)})
    write_dump(str(tmp_path), "edge", collected)
    tensors, _ = load_dump(str(tmp_path), "edge.safetensors")
    assert tensors["latent.samples"].shape == (0, 4, 8, 8)
    assert tensors["latent.scale"].shape == () and float(tensors["latent.scale"]) == 0.5


def test_failed_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    def boom(tensors, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", boom)  # the backend fails half-way
    with pytest.raises(OSError, match="disk full"):
        write_dump(str(tmp_path), "broken", collect_tensors(image=torch.zeros(1)))
    assert all_files(tmp_path) == []


def test_list_dumps_skips_temporaries_symlinks_and_other_files(tmp_path):
    write_dump(str(tmp_path), "b_second", collect_tensors(image=torch.zeros(1)))
    write_dump(str(tmp_path), "a_first", collect_tensors(image=torch.zeros(1)))
    os.utime(tmp_path / "a_first.safetensors", (1, 1))
    (tmp_path / ".tmp-123.safetensors").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "dir.safetensors").mkdir()
    outside = tmp_path.parent / "outside.safetensors"
    outside.write_bytes(b"x")
    (tmp_path / "link.safetensors").symlink_to(outside)
    assert [row["name"] for row in list_dumps(str(tmp_path))] == [
        "b_second.safetensors",
        "a_first.safetensors",
    ]
    assert list_dumps(str(tmp_path / "missing")) == []
    with pytest.raises(DumpNotFoundError):
        load_dump(str(tmp_path), "link.safetensors")
    with pytest.raises(DumpNotFoundError):
        load_dump(str(tmp_path), "dir.safetensors")
    with pytest.raises(DumpNotFoundError, match="No dump named"):
        load_dump(str(tmp_path), "missing.safetensors")
    with pytest.raises(DumpNameError):
        load_dump(str(tmp_path), "../outside.safetensors")


def _write_raw(path, header: dict | bytes, data: bytes = b""):
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00" * 4,
        struct.pack("<Q", 10**12) + b"{}",  # header length beyond the file
        struct.pack("<Q", 8) + b"not json",
        "bad_offsets",
        "truncated_data",
        "pickle",
    ],
)
def test_corrupt_files_are_a_clear_error(tmp_path, content):
    path = tmp_path / "corrupt.safetensors"
    if content == "bad_offsets":
        _write_raw(path, {"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 999]}}, b"\x00" * 16)
    elif content == "truncated_data":
        _write_raw(path, {"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\x00" * 8)
    elif content == "pickle":
        import pickle

        path.write_bytes(pickle.dumps({"t": [1, 2, 3]}))
    else:
        path.write_bytes(content)
    with pytest.raises(DumpCorruptError, match="corrupt.safetensors"):
        tensors, _ = load_dump(str(tmp_path), "corrupt.safetensors")
    good = write_dump(str(tmp_path), "good", collect_tensors(image=torch.zeros(1)))
    with pytest.raises(DumpCorruptError, match="not a readable safetensors file"):
        compare_dumps(str(tmp_path), good.file_name, "corrupt.safetensors", 1e-5, 1e-8)


def test_loading_never_uses_pickle(tmp_path, monkeypatch):
    import pickle

    def refuse(*args, **kwargs):
        raise AssertionError("pickle used")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    write_dump(str(tmp_path), "safe", collect_tensors(latent=latent()))
    tensors, _ = load_dump(str(tmp_path), "safe.safetensors")
    assert "latent.samples" in tensors
    compare_dumps(str(tmp_path), "safe.safetensors", "safe.safetensors", 0, 0)


def test_compare_two_dumps(tmp_path):
    a = collect_tensors(conditioning=conditioning(), latent=latent())
    write_dump(str(tmp_path), "a", a)
    write_dump(str(tmp_path), "a_copy", a, {"prompt_id": "other"})
    result = compare_dumps(str(tmp_path), "a.safetensors", "a_copy.safetensors", 1e-5, 1e-8)
    assert result["status"] == "identical" and result["n_compared"] == len(a.tensors)
    assert result["verdict"].startswith("identical:")
    assert result["b"]["prompt_id"] == "other" and result["a"]["n_tensors"] == len(a.tensors)

    samples = latent()["samples"]
    write_dump(str(tmp_path), "shifted", collect_tensors(latent={"samples": samples + 1e-7}))
    write_dump(str(tmp_path), "lat", collect_tensors(latent={"samples": samples}))
    result = compare_dumps(str(tmp_path), "lat.safetensors", "shifted.safetensors", 1e-3, 1e-5)
    assert result["status"] == "close"


def test_compare_dumps_of_different_shapes_is_incompatible(tmp_path):
    write_dump(str(tmp_path), "small", collect_tensors(latent={"samples": torch.zeros(1, 4, 8, 8)}))
    write_dump(str(tmp_path), "large", collect_tensors(latent={"samples": torch.zeros(1, 4, 16, 16)}))
    result = compare_dumps(str(tmp_path), "small.safetensors", "large.safetensors", 1e-5, 1e-8)
    assert result["status"] == "incompatible"
    assert (
        result["verdict"] == "incompatible: shapes differ for latent.samples: [1, 4, 8, 8] vs [1, 4, 16, 16]"
    )
    row = result["tensors"]["latent.samples"]
    assert row["shape_match"] is False and row["max_abs_diff"] is None and row["allclose"] is False


def test_compare_dump_with_a_live_value(tmp_path):
    samples = torch.randn(1, 16, 3, 8, 8)
    write_dump(
        str(tmp_path), "ref", collect_tensors(latent={"samples": samples}, image=torch.zeros(1, 8, 8, 3))
    )
    live = collect_tensors(latent={"samples": samples.clone()})
    result = compare_dump_with(str(tmp_path), "ref.safetensors", live.tensors, 1e-5, 1e-8)
    assert result["status"] == "identical" and result["only_in_a"] == ["image"]
    assert result["verdict"] == "identical: 1 tensors bitwise equal (1 only in dump_a)"
    assert result["b"] == {"name": None, "live": True, "n_tensors": 1}
    live = collect_tensors(latent={"samples": samples.half()})
    result = compare_dump_with(str(tmp_path), "ref.safetensors", live.tensors, 1e-3, 1e-3)
    assert result["status"] == "close" and "dtypes differ" in result["verdict"]
    nothing = compare_dump_with(str(tmp_path), "ref.safetensors", {"cond.0.tensor": torch.zeros(1)}, 0, 0)
    assert nothing["status"] == "nothing_to_compare" and "no tensor names in common" in nothing["verdict"]


def test_a_failed_rewrite_keeps_the_older_dump(tmp_path, monkeypatch):
    write_dump(str(tmp_path), "kept", collect_tensors(image=torch.zeros(1, 2, 2, 3)))

    def disk_full(tensors, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", disk_full)
    with pytest.raises(OSError):
        write_dump(str(tmp_path), "kept", collect_tensors(image=torch.ones(1, 2, 2, 3)))
    monkeypatch.undo()
    tensors, _ = load_dump(str(tmp_path), "kept.safetensors")
    assert tensors["image"].sum() == 0
    assert all_files(tmp_path) == ["kept.safetensors"]


def test_a_rewrite_that_cannot_take_the_name_puts_the_older_dump_back(tmp_path, monkeypatch):
    write_dump(str(tmp_path), "kept", collect_tensors(image=torch.zeros(1, 2, 2, 3)))
    real_rename = os.rename

    def refuse_the_new_file(source, target):
        if os.path.basename(source).startswith(".tmp-") and not source.endswith(".replaced.safetensors"):
            raise PermissionError(13, "Permission denied")
        real_rename(source, target)

    monkeypatch.setattr(os, "rename", refuse_the_new_file)
    with pytest.raises(PermissionError):
        write_dump(str(tmp_path), "kept", collect_tensors(image=torch.ones(1, 2, 2, 3)))
    monkeypatch.undo()
    dumps.finish_deletions()
    tensors, _ = load_dump(str(tmp_path), "kept.safetensors")
    assert tensors["image"].sum() == 0
    assert all_files(tmp_path) == ["kept.safetensors"]

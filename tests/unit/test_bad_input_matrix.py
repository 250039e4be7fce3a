"""Bad input matrix for the analysers in monitors/: every bad value gets a clear finding or a clear
error (never a crash deep inside), and nothing is written outside the pack's folders.

Each case runs in a sandbox: the working directory is an empty tmp folder next to the pack's own
output folder (<out>/pipeline_monitor/{dumps,reports}); the whole tmp tree is listed before and
after, and only files under <out>/pipeline_monitor may appear. Huge shapes are meta tensors or
expanded views: nothing large is allocated.
"""

from __future__ import annotations

import json
import os
import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitors.conditioning.analysis import analyse_conditioning
from monitors.conditioning.prompt_text import trace_text_encoders
from monitors.dumps.collect import collect_tensors
from monitors.dumps.files import (
    DumpCorruptError,
    DumpError,
    DumpNameError,
    load_dump,
    resolve_file,
    write_dump,
)
from monitors.engine.store import RunStore, is_valid_run_id
from monitors.exporters.html import render_html
from monitors.latent.analysis import analyse_latent
from monitors.lora.file import lora_file_status
from monitors.numeric.tensor_stats import describe_tensor

HUGE_META = (1 << 20, 77, 4096)  # 330 G elements, shape only
NAN, INF = float("nan"), float("inf")
TEXT_TYPES = {"CLIPTextEncode": {"text": "STRING", "clip": "CLIP"}}


# -- sandbox ---------------------------------------------------------------------------------------


def tree(root) -> set[str]:
    found = set()
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(folder, name), root))
    return found


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    out = tmp_path / "output"
    pack = out / "pipeline_monitor"
    (pack / "dumps").mkdir(parents=True)
    (pack / "reports").mkdir()
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    before = tree(tmp_path)
    yield pack
    written = tree(tmp_path) - before
    outside = sorted(p for p in written if not p.startswith(os.path.join("output", "pipeline_monitor")))
    assert outside == [], f"written outside the pack's folders: {outside}"


def codes(result) -> set[str]:
    findings = result.findings if hasattr(result, "findings") else result[2]
    return {f.code for f in findings}


# -- conditioning and latent: expected finding codes -----------------------------------------------


def cond(tensor, extras=()):
    return [[tensor, {} if extras == () else extras]]


CONDITIONING_CASES = [
    ("cond_none", None, "not_a_list"),
    ("cond_str", "a photo of a cat", "not_a_list"),
    ("cond_int", 5, "not_a_list"),
    ("cond_dict", {"samples": torch.zeros(1)}, "not_a_list"),
    ("cond_empty_list", [], "no_entries"),
    ("cond_entry_not_pair", [1], "entry_not_pair"),
    ("cond_entry_triple", [[torch.zeros(1, 77, 768), {}, None]], "entry_not_pair"),
    ("cond_tensor_none", cond(None), "cond_not_tensor"),
    ("cond_tensor_str", cond("text"), "cond_not_tensor"),
    ("cond_empty_batch", cond(torch.zeros(0, 77, 768)), "empty_tensor"),
    ("cond_zero_tokens", cond(torch.zeros(1, 0, 768)), "empty_tensor"),
    ("cond_0d", cond(torch.tensor(1.0)), "bad_shape"),
    ("cond_1d", cond(torch.ones(768)), "bad_shape"),
    ("cond_nan", cond(torch.full((1, 77, 768), NAN)), "nan_values"),
    ("cond_inf", cond(torch.full((1, 77, 768), INF)), "inf_values"),
    (
        "cond_minus_inf_some",
        cond(torch.ones(1, 77, 768).index_fill_(1, torch.tensor([3]), -INF)),
        "inf_values",
    ),
    ("cond_huge_meta", cond(torch.empty(HUGE_META, device="meta")), "stats_skipped"),
    ("cond_huge_expand", cond(torch.zeros(1, 1, 1).expand(1 << 14, 77, 4096)), "stats_skipped"),
    ("cond_extras_str", cond(torch.ones(1, 77, 768), "not a dict"), "extras_not_dict"),
    ("cond_extras_none", [[torch.ones(1, 77, 768), None]], "extras_not_dict"),
    ("cond_pooled_str", cond(torch.ones(1, 77, 768), {"pooled_output": "x"}), "pooled_not_tensor"),
    (
        "cond_pooled_nan",
        cond(torch.ones(1, 77, 768), {"pooled_output": torch.full((1, 768), NAN)}),
        "pooled_nan",
    ),
]

LATENT_CASES = [
    ("latent_none", None, "not_a_latent"),
    ("latent_bare_tensor", torch.zeros(1, 4, 8, 8), "not_a_latent"),
    ("latent_list", [torch.zeros(1, 4, 8, 8)], "not_a_latent"),
    ("latent_no_samples", {}, "no_samples"),
    ("latent_samples_str", {"samples": "x"}, "no_samples"),
    ("latent_empty", {"samples": torch.zeros(0, 4, 8, 8)}, "empty"),
    ("latent_zero_width", {"samples": torch.zeros(1, 4, 8, 0)}, "empty"),
    ("latent_0d", {"samples": torch.tensor(3.0)}, "unusual_rank"),
    ("latent_nan", {"samples": torch.full((1, 4, 8, 8), NAN)}, "non_finite"),
    ("latent_inf", {"samples": torch.full((1, 4, 8, 8), -INF)}, "non_finite"),
    ("latent_huge_meta", {"samples": torch.empty((64, 16, 21, 1024, 1024), device="meta")}, "stats_skipped"),
    (
        "latent_huge_expand",
        {"samples": torch.zeros(1, 1, 1, 1).expand(4096, 16, 1024, 1024)},
        "stats_skipped",
    ),
    ("latent_mask_str", {"samples": torch.ones(1, 4, 8, 8), "noise_mask": "x"}, "bad_noise_mask"),
    ("latent_batch_index_str", {"samples": torch.ones(1, 4, 8, 8), "batch_index": "y"}, "bad_batch_index"),
]


@pytest.mark.parametrize(
    ("case", "value", "code"), CONDITIONING_CASES, ids=[c[0] for c in CONDITIONING_CASES]
)
def test_conditioning_bad_input(sandbox, case, value, code):
    # Huge shapes (meta, expanded views) say `stats_skipped`: they are never scanned, which is what
    # keeps them from taking minutes; no timing needed to know it.
    step = analyse_conditioning("7", value)
    assert code in codes(step), (case, sorted(codes(step)))
    assert step.monitor_errors == ()
    json.dumps(step.to_dict() if hasattr(step, "to_dict") else {}, allow_nan=False, default=str)


def test_conditioning_non_tensor_extras_are_described_not_raised(sandbox):
    extras = {"control": lambda: 1, "obj": object(), "hooks": [1, 2], "guidance": 3.5, "big": "x" * 100_000}
    step = analyse_conditioning("7", cond(torch.ones(1, 77, 768), extras))
    entry = step.details["positive"]["entries"][0]
    assert entry["valid"] and entry["n_extra_keys"] == 5
    assert entry["extras"]["control"] == {"type": "function"}
    assert entry["extras"]["hooks"] == {"type": "list", "length": 2}
    assert len(entry["extras"]["big"]["value"]) < 1000  # long strings are cut


@pytest.mark.parametrize(("case", "value", "code"), LATENT_CASES, ids=[c[0] for c in LATENT_CASES])
def test_latent_bad_input(sandbox, case, value, code):
    assert code in codes(analyse_latent(value)), case


# -- prompt text: 100 kB, non-UTF-8 (lone surrogates), not a string --------------------------------

PROMPT_TEXT_CASES = [
    ("prompt_100kB", "a" * 100_000, "long_prompt"),
    ("prompt_script", "<img src=x onerror=alert(1)><script>alert(1)</script>", "script_in_prompt"),
    ("prompt_blank", "   ", "empty_prompt"),
    ("prompt_bytes", b"\xff\xfe not utf-8", "text_unresolved"),
    ("prompt_int", 12345, "text_unresolved"),
]


@pytest.mark.parametrize(("case", "text", "code"), PROMPT_TEXT_CASES, ids=[c[0] for c in PROMPT_TEXT_CASES])
def test_prompt_text_bad_input(sandbox, case, text, code):
    prompt = {
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": text, "clip": ["3", 0]}},
        "7": {"class_type": "PipelineMonitorConditioning", "inputs": {"positive": ["2", 0]}},
    }
    trace = trace_text_encoders(prompt, "7", "positive", input_types=TEXT_TYPES.get)
    step = analyse_conditioning("7", cond(torch.ones(1, 77, 768)), traces={"positive": trace})
    assert code in codes(step), (case, sorted(codes(step)))
    text_entry = step.details["positive"]["encoders"][0]["texts"][0]
    assert text_entry["text"] is None or len(text_entry["text"]) <= 2000


def test_non_utf8_prompt_survives_json_and_html(sandbox):
    """Lone surrogates (how Python carries undecodable bytes) must not break the report file or page."""
    text = "bad \udcff\udcfe bytes"
    prompt = {
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": text, "clip": ["3", 0]}},
        "7": {"class_type": "X", "inputs": {"positive": ["2", 0]}},
    }
    trace = trace_text_encoders(prompt, "7", "positive", input_types=TEXT_TYPES.get)
    step = analyse_conditioning("7", cond(torch.ones(1, 77, 768)), traces={"positive": trace})
    assert step.summary["positive_n_characters"] == len(text)
    from monitors.engine.recorder import RunRecorder

    store = RunStore(str(sandbox / "reports"))
    recorder = RunRecorder(store)
    recorder.begin_run("run-utf8", {"7": {"class_type": "X", "_meta": {"title": text}}})
    recorder.add_step(step)
    recorder.end_run("success")
    assert os.path.isfile(sandbox / "reports" / "run-utf8.json") and store.write_errors == []
    page = render_html(store.get("run-utf8"))
    page.encode("utf-8", errors="replace")


# -- LoRA files: missing, zero-byte, corrupt headers ------------------------------------------------


def raw_file(path, content: bytes):
    path.write_bytes(content)
    return path


def header_file(path, header_bytes: bytes, data: bytes = b"", length: int | None = None):
    n = len(header_bytes) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + header_bytes + data)
    return path


LORA_FILE_CASES = [
    ("lora_missing", lambda d: d / "missing.safetensors", "file not found"),
    ("lora_path_none", lambda d: None, "file not found"),
    ("lora_is_folder", lambda d: d, "file not found"),
    ("lora_zero_byte", lambda d: raw_file(d / "zero.safetensors", b""), "corrupt"),
    ("lora_short", lambda d: raw_file(d / "s.safetensors", b"\x01\x02"), "corrupt"),
    ("lora_header_len_huge", lambda d: header_file(d / "h.safetensors", b"{}", length=1 << 62), "corrupt"),
    ("lora_header_len_zero", lambda d: header_file(d / "z.safetensors", b"", length=0), "corrupt"),
    ("lora_header_not_json", lambda d: header_file(d / "j.safetensors", b"{not json"), "corrupt"),
    ("lora_header_not_utf8", lambda d: header_file(d / "u.safetensors", b"\xff\xfe\xfd"), "corrupt"),
    ("lora_header_array", lambda d: header_file(d / "a.safetensors", b"[1, 2]"), "corrupt"),
    (
        "lora_offsets_past_end",
        lambda d: header_file(
            d / "o.safetensors",
            json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode(),
        ),
        "cut short",  # the header is whole: the data is what is missing
    ),
    (
        "lora_metadata_not_object",
        lambda d: header_file(d / "m.safetensors", json.dumps({"__metadata__": [1]}).encode()),
        "corrupt",
    ),
]


@pytest.mark.parametrize(("case", "make", "error"), LORA_FILE_CASES, ids=[c[0] for c in LORA_FILE_CASES])
def test_lora_file_bad_input(sandbox, tmp_path, case, make, error):
    folder = tmp_path / "output" / "pipeline_monitor" / "loras"  # inside the pack folder: allowed
    folder.mkdir()
    path = make(folder)
    status, index = lora_file_status("x", None if path is None else str(path))
    assert index is None
    assert status["error"] and error in status["error"], status


def test_pickle_checkpoint_is_never_opened(sandbox, tmp_path):
    path = tmp_path / "output" / "pipeline_monitor" / "evil.ckpt"
    path.write_bytes(b"\x80\x04cos\nsystem\n(S'touch pwned'\ntR.")
    status, index = lora_file_status("evil.ckpt", str(path))
    assert status["format"] == "ckpt" and status["header_ok"] is None and index is None


# -- dump names, dump files, report ids ------------------------------------------------------------

BAD_DUMP_NAMES = [
    ("dotdot", "../evil"),
    ("dotdot_only", ".."),
    ("dotdot_backslash", "..\\evil"),
    ("absolute_posix", "/tmp/evil"),
    ("absolute_windows", "C:\\evil"),
    ("drive_relative", "C:evil"),
    ("nul_byte", "evil\x00.safetensors"),
    ("reserved_con", "CON"),
    ("reserved_nul_ext", "nul.txt"),
    ("reserved_com1", "com1"),
    ("empty", ""),
    ("none", None),
    ("int", 123),
    ("bytes", b"evil"),
    ("too_long", "a" * 300),
    ("hidden", ".hidden"),
    ("dash", "-rf"),
    ("space_and_slash", "a b/c"),
    ("newline", "a\nb"),
    ("trailing_dot", "evil."),
    ("encoded_traversal", "%2e%2e%2fevil"),
]


@pytest.mark.parametrize(("case", "name"), BAD_DUMP_NAMES, ids=[c[0] for c in BAD_DUMP_NAMES])
def test_bad_dump_names_write_nothing(sandbox, case, name):
    collected = collect_tensors(latent={"samples": torch.ones(1, 4, 8, 8)})
    with pytest.raises(DumpNameError, match="refused"):
        write_dump(str(sandbox / "dumps"), name, collected)
    assert tree(sandbox / "dumps") == set()
    with pytest.raises(DumpError):
        resolve_file(str(sandbox / "dumps"), name if isinstance(name, str) else str(name))


def test_dump_of_nothing_is_refused(sandbox):
    with pytest.raises(DumpError, match="Nothing to dump"):
        write_dump(str(sandbox / "dumps"), "ok", collect_tensors(conditioning="x", latent=5, image=None))


@pytest.mark.parametrize(
    ("case", "content"),
    [
        ("dump_zero_byte", b""),
        ("dump_garbage", b"\x00" * 64),
        ("dump_header_len_huge", struct.pack("<Q", 1 << 60) + b"{}"),
        ("dump_header_not_json", struct.pack("<Q", 5) + b"{bad}"),
        ("dump_pickle", b"\x80\x04cos\nsystem\n(S'touch pwned'\ntR."),
    ],
)
def test_corrupt_dump_files_are_refused(sandbox, case, content):
    (sandbox / "dumps" / f"{case}.safetensors").write_bytes(content)
    with pytest.raises(DumpCorruptError, match="not a readable safetensors file"):
        load_dump(str(sandbox / "dumps"), f"{case}.safetensors")


BAD_RUN_IDS = [
    "",
    "..",
    "../reports/x",
    "a/b",
    "a\\b",
    "%2e%2e%2f",
    "a\x00b",
    "x" * 200,
    "/etc/passwd",
    "id with space",
    None,
    5,
    ["abc"],
]


@pytest.mark.parametrize("run_id", BAD_RUN_IDS, ids=[repr(r)[:20] for r in BAD_RUN_IDS])
def test_report_ids_that_are_not_ids(sandbox, run_id):
    store = RunStore(str(sandbox / "reports"))
    assert not is_valid_run_id(run_id)
    assert store.get(run_id) is None
    assert store._path(run_id) is None  # no path is ever built from it


# -- tensor statistics on odd tensors ---------------------------------------------------------------

ODD_TENSORS = [
    ("empty", torch.zeros(0), None),
    ("0d", torch.tensor(2.0), 2.0),
    ("bool", torch.tensor([True, False]), 1.0),
    ("int", torch.arange(4), 3.0),
    ("complex", torch.zeros(2, dtype=torch.complex64), None),
    ("meta", torch.empty(HUGE_META, device="meta"), None),
    ("all_nan", torch.full((3,), NAN), None),
    ("half_inf", torch.tensor([1.0, INF, -INF, NAN], dtype=torch.float16), 1.0),
]


@pytest.mark.parametrize(("case", "tensor", "expected_max"), ODD_TENSORS, ids=[c[0] for c in ODD_TENSORS])
def test_describe_tensor_odd_tensors(case, tensor, expected_max):
    info = describe_tensor(tensor)
    assert info["max"] == expected_max
    json.dumps(info, allow_nan=False)


def test_the_matrix_has_at_least_40_bad_inputs():
    n = (
        len(CONDITIONING_CASES)
        + len(LATENT_CASES)
        + len(PROMPT_TEXT_CASES)
        + len(LORA_FILE_CASES)
        + len(BAD_DUMP_NAMES)
        + 5  # corrupt dump files
        + len(BAD_RUN_IDS)
        + len(ODD_TENSORS)
    )
    assert n >= 40, n


# -- property tests -----------------------------------------------------------------------------------

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)
specials = st.sampled_from([NAN, INF, -INF])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.one_of(finite, specials), max_size=64))
def test_describe_tensor_property(values):
    tensor = torch.tensor(values, dtype=torch.float32)
    info = describe_tensor(tensor)
    n_nan = sum(v != v for v in values)
    n_inf = sum(v in (INF, -INF) for v in values)
    kept = [v for v in values if v == v and v not in (INF, -INF)]
    assert (info["n_nan"], info["n_inf"], info["n_elements"]) == (n_nan, n_inf, len(values))
    if not kept:
        assert info["min"] is info["max"] is info["mean"] is info["std"] is None
    else:
        assert info["min"] == min(kept) and info["max"] == max(kept)
        assert info["min"] <= info["mean"] <= info["max"] or abs(info["mean"] - info["min"]) < 1e-3
        assert info["std"] >= 0
    json.dumps(info, allow_nan=False)


shapes = st.lists(st.integers(0, 5), min_size=0, max_size=4)
extras_values = st.one_of(
    st.none(), st.integers(), st.floats(), st.text(max_size=50), st.lists(st.integers(), max_size=3)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=shapes,
    fill=st.one_of(finite, specials),
    extras=st.dictionaries(st.text(max_size=10), extras_values, max_size=4),
    n_entries=st.integers(0, 3),
)
def test_analyse_conditioning_property(shape, fill, extras, n_entries):
    value = [[torch.full(shape, fill), dict(extras)] for _ in range(n_entries)]
    step = analyse_conditioning("7", value, value if n_entries % 2 else None)
    assert step.kind == "conditioning" and step.monitor_errors == ()
    assert all(f.level in ("info", "warning", "error") for f in step.findings)
    found = codes(step)
    if n_entries == 0:
        assert "no_entries" in found
    elif 0 in shape:
        assert "empty_tensor" in found
    elif fill != fill:
        assert "nan_values" in found
    elif fill in (INF, -INF):
        assert "inf_values" in found
    json.dumps(step.to_dict(), allow_nan=False, default=str)

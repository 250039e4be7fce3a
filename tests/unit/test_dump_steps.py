"""The `tensor_dump` and `tensor_compare` steps (monitors/dumps/report.py) on real files in a
temporary folder: the summary's exact figures, each finding's level and code, the name checks made
when the prompt is validated, and the listing of dumps."""

from __future__ import annotations

import os

import pytest
import torch

from monitors.dumps.report import (
    LIVE_VALUE,
    NO_DUMPS,
    build_compare_step,
    build_dump_step,
    compare_inputs_problem,
    dump_names,
    file_state,
    no_dump_message,
    upstream_sources,
    written_file_name,
)
from monitors.report import StepReport

PROMPT = {
    "2": {"class_type": "EmptyLatentImage", "inputs": {}},
    "3": "not a node",
    "9": {"class_type": "Dump", "inputs": {"latent": ["2", 0], "image": ["3", 0], "conditioning": "text"}},
}


def dump(directory, name="d", npy=False, **values):
    return build_dump_step("9", PROMPT, values, name, npy, directory=str(directory), prompt_id="p")


def finding_codes(step):
    return [(f.level, f.code) for f in step.findings]


def test_the_dump_steps_summary_and_details(tmp_path):
    latent = {"samples": torch.ones(1, 4, 2, 2), "batch_index": [0], "hook": object()}
    step = dump(tmp_path, "first", npy=True, latent=latent)
    s = step.summary
    assert (s["file_name"], s["written"], s["n_tensors"], s["tensor_bytes"]) == (
        "first.safetensors",
        True,
        1,
        64,
    )
    assert s["file_bytes"] == os.path.getsize(tmp_path / "first.safetensors")
    assert s["write_s"] >= 0 and s["n_npy_files"] == 1
    assert (s["value_kinds"], s["encoder_family"]) == (["latent"], None)
    assert step.details["download_url"] == "/pipeline_monitor/dumps/first.safetensors"
    assert step.details["npy_files"] == ["first.latent.samples.npy"]
    assert step.details["metadata"]["prompt_id"] == "p" and "tensors" not in step.details["metadata"]
    assert step.details["metadata"]["value_kinds"] == "latent"
    assert step.details["extras"] == {"latent.batch_index": "[0]"}
    assert step.details["skipped"] == {"latent.hook": "object"}
    assert step.details["sources"] == {
        "latent": {"node_id": "2", "class_type": "EmptyLatentImage"},
        "image": {"node_id": "3", "class_type": None},
    }
    assert finding_codes(step) == [("info", "not_dumped")]
    assert step.findings[0].message == "Not tensors, not dumped: latent.hook (object)."
    assert written_file_name(step) == "first.safetensors"


def test_a_rewritten_dump_says_it_replaced_the_earlier_one(tmp_path):
    dump(tmp_path, "same", image=torch.zeros(1, 2, 2, 3))
    step = dump(tmp_path, "same", image=torch.zeros(1, 2, 2, 3))
    assert finding_codes(step) == [("info", "replaced")]
    assert step.findings[0].message == "Replaced the earlier dump same.safetensors."


def test_nothing_connected_writes_nothing(tmp_path):
    step = build_dump_step("9", None, {}, "x", False, directory=str(tmp_path), prompt_id_unknown_reason="why")
    assert finding_codes(step) == [("info", "nothing_connected")]
    assert step.monitor_errors == ()  # no dump, no metadata: the prompt id is not missed
    s = step.summary
    assert (s["written"], s["file_name"], s["file_bytes"], s["write_s"], s["n_npy_files"]) == (
        False,
        None,
        None,
        None,
        None,
    )
    assert (s["n_tensors"], s["tensor_bytes"], s["value_kinds"]) == (0, 0, [])
    assert "download_url" not in step.details and written_file_name(step) is None
    assert not os.listdir(tmp_path)


def test_only_the_first_eight_skipped_values_are_listed(tmp_path):
    latent = {f"k{i}": object() for i in range(10)}
    step = dump(tmp_path, "x", latent=latent)
    listed = [f.message for f in step.findings if f.code == "not_dumped"][0]
    assert listed.count("(object)") == 8 and "latent.k7 (object)." in listed and "k8" not in listed
    assert ("error", "not_written") in finding_codes(step)  # values but no tensor


def test_non_finite_tensors_are_a_warning_each(tmp_path):
    bad = torch.tensor([float("nan"), float("inf"), float("-inf"), 1.0])
    step = dump(
        tmp_path, "x", latent={"samples": bad, "fine": torch.ones(2), "inf": torch.tensor([float("inf")])}
    )
    warnings = [f.message for f in step.findings if f.code == "non_finite"]
    assert warnings == [
        "latent.samples holds 1 NaN and 2 Inf values.",
        "latent.inf holds 0 NaN and 1 Inf values.",
    ]


def test_the_reasons_nothing_was_written(tmp_path, monkeypatch):
    refused = dump(tmp_path, "../x", image=torch.zeros(1))
    assert finding_codes(refused) == [("error", "name_refused")] and not refused.summary["written"]
    monkeypatch.setenv("PIPELINE_MONITOR_DUMP_MAX_BYTES", "3")
    too_large = dump(tmp_path, "x", image=torch.zeros(1))
    assert finding_codes(too_large) == [("error", "too_large")]
    monkeypatch.delenv("PIPELINE_MONITOR_DUMP_MAX_BYTES")
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    step = dump(blocked, "x", image=torch.zeros(1))
    ((level, code),) = finding_codes(step)
    assert (level, code) == ("error", "not_written")
    assert step.findings[0].message.startswith("Dump not written: FileExistsError")


def test_the_encoder_family_of_a_conditioning(tmp_path):
    cond = [[torch.zeros(1, 77, 2048), {"pooled_output": torch.zeros(1, 1280)}]]
    step = dump(tmp_path, "c", conditioning=cond)
    assert step.summary["encoder_family"] == "SDXL (exact)"
    assert step.details["metadata"]["encoder_family"] == "SDXL (exact)"
    assert step.summary["value_kinds"] == ["conditioning"]
    assert dump(tmp_path, "e", conditioning=[], image=torch.zeros(1)).summary["encoder_family"] is None


def test_written_file_name_needs_written():
    step = StepReport(kind="tensor_dump", node_id="1", summary={"file_name": "a", "written": False})
    assert written_file_name(step) is None
    assert written_file_name(StepReport(kind="tensor_dump", node_id="1", summary=None)) is None


def test_dump_names_are_sorted_and_a_failed_listing_says_why(tmp_path, monkeypatch):
    dump(tmp_path, "b", image=torch.zeros(1))
    dump(tmp_path, "a", image=torch.zeros(1))
    assert dump_names(str(tmp_path)) == (["a", "b"], None)
    assert no_dump_message("lead", str(tmp_path)) == "lead"

    def broken(directory):
        raise PermissionError("denied")

    monkeypatch.setattr("monitors.dumps.report.list_dumps", broken)
    assert dump_names(str(tmp_path)) == ([], "dumps not listed: PermissionError: denied")
    assert no_dump_message("lead", str(tmp_path)) == "lead (dumps not listed: PermissionError: denied)"


def test_file_state_changes_when_the_file_is_rewritten(tmp_path):
    dump(tmp_path, "s", image=torch.zeros(1))
    info = os.stat(tmp_path / "s.safetensors")
    assert file_state(str(tmp_path), "s") == f"s:{info.st_mtime_ns}:{info.st_size}"
    assert file_state(str(tmp_path), "s.safetensors").endswith(f":{info.st_size}")
    assert file_state(str(tmp_path), "none") == "none:missing:FileNotFoundError"
    assert file_state(str(tmp_path), "../x") == "../x:missing:DumpNameError"


def test_compare_inputs_problem_checks_dump_b_only_when_it_names_a_dump(tmp_path):
    directory = str(tmp_path)
    assert compare_inputs_problem("a", LIVE_VALUE, directory) is None
    assert compare_inputs_problem("a", "b", directory) is None
    assert "'../b'" in compare_inputs_problem("a", "../b", directory)
    assert "'../a'" in compare_inputs_problem("../a", "../b", directory)  # the first problem
    assert compare_inputs_problem(NO_DUMPS, "b", directory) == (
        "No dump to compare yet: write one with Pipeline Monitor: Tensor Dump first."
    )


def test_upstream_sources_of_no_prompt():
    assert upstream_sources("9", None) == {}
    assert upstream_sources("9", {"9": {"inputs": {"latent": ["7", 0]}}}) == {
        "latent": {"node_id": "7", "class_type": None}
    }


def compare(directory, a, b, values=None, rtol=1e-5, atol=1e-8):
    return build_compare_step("10", a, b, rtol, atol, values or {}, directory=str(directory))


def test_compare_two_dumps_summary_details_and_levels(tmp_path):
    dump(tmp_path, "a", latent={"samples": torch.ones(4)})
    dump(tmp_path, "b", latent={"samples": torch.ones(4)})
    dump(tmp_path, "c", latent={"samples": torch.ones(4) * 2})
    dump(tmp_path, "d", latent={"samples": torch.ones(4) + 1e-7})
    same = compare(tmp_path, "a", "b.safetensors", values={"image": torch.zeros(1)})
    assert finding_codes(same) == [("info", "live_ignored"), ("info", "identical")]
    assert same.summary["status"] == "identical" and same.summary["dump_b"] == "b.safetensors"
    assert set(same.summary) == {
        "status",
        "verdict",
        "dump_a",
        "dump_b",
        "rtol",
        "atol",
        "n_compared",
        "n_different",
        "n_incompatible",
        "max_abs_diff",
        "max_relative_error_ratio",
        "min_cosine_similarity",
    }
    assert (same.summary["rtol"], same.summary["atol"], same.summary["n_compared"]) == (1e-5, 1e-8, 1)
    assert set(same.details) == {"tensors", "only_in_a", "only_in_b", "a", "b"}
    different = compare(tmp_path, "a", "c")
    assert finding_codes(different) == [("warning", "different")]
    assert (different.summary["n_different"], different.summary["max_abs_diff"]) == (1, 1.0)
    assert finding_codes(compare(tmp_path, "a", "d")) == [("info", "close")]
    dump(tmp_path, "e", image=torch.zeros(1))
    assert finding_codes(compare(tmp_path, "a", "e")) == [("error", "nothing_to_compare")]


def test_compare_with_the_live_value(tmp_path):
    dump(tmp_path, "a", latent={"samples": torch.ones(4)})
    live = compare(tmp_path, "a", LIVE_VALUE, values={"latent": {"samples": torch.ones(4)}})
    assert finding_codes(live) == [("info", "identical")]
    nothing = compare(tmp_path, "a", LIVE_VALUE)
    assert finding_codes(nothing) == [("error", "compare_failed")]
    message = "dump_b is (live value), but no CONDITIONING, LATENT or IMAGE is connected."
    assert nothing.summary == {
        "status": "error",
        "verdict": f"error: {message}",
        "dump_a": "a",
        "dump_b": LIVE_VALUE,
    }
    assert nothing.details == {}


def test_compare_refused_names_and_no_dumps(tmp_path):
    refused = compare(tmp_path, "a", "../b")
    assert finding_codes(refused) == [("error", "compare_failed")]
    assert "refused" in refused.summary["verdict"]
    none = compare(tmp_path, NO_DUMPS, LIVE_VALUE)
    assert (
        none.summary["verdict"]
        == "error: No dump chosen: write one with Pipeline Monitor: Tensor Dump first."
    )


@pytest.mark.parametrize("b", ["missing", LIVE_VALUE])
def test_compare_with_a_missing_dump_is_an_error(tmp_path, b):
    step = compare(tmp_path, "missing", b, values={"image": torch.zeros(1)})
    assert finding_codes(step)[-1] == ("error", "compare_failed") and step.summary["status"] == "error"
    # the verdict is the error's message, not the note before it about the live input
    assert step.summary["verdict"] == "error: No dump named 'missing.safetensors' in the dumps folder."

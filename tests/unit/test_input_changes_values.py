"""Input changes, value by value: how each kind of widget value is shown and told apart, the
order of the listed changes, the bounds of a snapshot, of the history and of the files on disk."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from monitors.engine import input_changes
from monitors.engine.input_changes import (
    MAX_VALUE_CHARS,
    NOT_RECORDED_REASON,
    InputFiles,
    InputHistory,
    diff,
    inputs_file_name,
    is_link,
    shown,
    snapshot,
    unknown,
)


def node(class_type, **inputs):
    return {"class_type": class_type, "inputs": inputs}


def test_widget_values_are_shown_as_json_writes_them():
    assert [shown(v) for v in (None, True, False, 7, -3, 7.5, 1e-7, "a cat")] == [
        "null",
        "true",
        "false",
        "7",
        "-3",
        "7.5",
        "1e-07",
        "a cat",
    ]
    assert shown(float("inf")) == "Infinity" and shown(float("nan")) == "NaN"
    assert shown({"b": 1, "a": "é"}) == '{"a": "é", "b": 1}'  # sorted keys, text not escaped
    assert shown([1, "x"]) == '[1, "x"]'
    assert shown({"when": object}) == '{"when": "' + str(object) + '"}'  # what JSON cannot write: its text


def test_a_value_json_cannot_write_at_all_is_shown_as_its_text():
    loop: list = []
    loop.append(loop)
    assert shown(loop) == "[[...]]"


def test_the_shown_value_is_cut_at_its_limit_with_an_ellipsis():
    assert shown("x" * MAX_VALUE_CHARS) == "x" * MAX_VALUE_CHARS
    assert shown("x" * (MAX_VALUE_CHARS + 1)) == "x" * (MAX_VALUE_CHARS - 1) + "…"
    assert shown("abcdef", limit=4) == "abc…" and shown("abcd", limit=4) == "abcd"


def test_a_link_needs_a_string_id_and_an_int_index():
    assert is_link(("1", 0)) and not is_link(["1"]) and not is_link("10") and not is_link(("1", 0.0))
    assert not is_link([None, 0]) and not is_link(["1", False])


def test_fingerprints_tell_types_apart_and_hash_only_long_values():
    taken = snapshot({"1": node("N", a=1, b="1", c=1.0, d=True, e="x" * 60, f="x" * 61)})
    assert taken[("1", "a")] == ("N", "int:1", "1")
    assert taken[("1", "b")] == ("N", "str:1", "1")
    assert taken[("1", "c")] == ("N", "float:1.0", "1.0")
    assert taken[("1", "d")] == ("N", "bool:true", "true")
    assert taken[("1", "e")][1] == "str:" + "x" * 60  # 64 characters: kept as they are
    digest = hashlib.sha256(("str:" + "x" * 61).encode()).hexdigest()
    assert taken[("1", "f")][1] == "sha256:" + digest


def test_a_snapshot_keys_by_text_ids_and_a_class_that_is_not_text_is_unknown():
    taken = snapshot({5: {"class_type": 3, "inputs": {7: "v"}}, "6": {"inputs": {"w": 1}}})
    assert taken == {("5", "7"): (None, "str:v", "v"), ("6", "w"): (None, "int:1", "1")}


def test_a_snapshot_is_bounded(monkeypatch):
    monkeypatch.setattr(input_changes, "MAX_INPUTS_PER_SNAPSHOT", 3)
    taken = snapshot({"1": node("N", a=1, b=2, link=["9", 0]), "2": node("N", c=3, d=4)})
    assert list(taken) == [("1", "a"), ("1", "b"), ("2", "c")]  # links do not count
    assert len(snapshot({"1": node("N", a=1, b=2, c=3)})) == 3


def test_changes_are_listed_in_node_order_numbers_before_names():
    names = ["10", "9", "2.10", "2.9", "2", "b", "a", "2.x"]
    before = snapshot({n: node("N", v=1, u=1) for n in names})
    after = snapshot({n: node("N", v=2, u=2) for n in names})
    listed = [(c["node_id"], c["input"]) for c in diff(before, after)["changes"]]
    order = ["2", "2.9", "2.10", "2.x", "9", "10", "a", "b"]
    assert listed == [(n, i) for n in order for i in ("u", "v")]


def test_a_change_says_its_node_type_and_both_values():
    result = diff(
        snapshot({"4": node("CLIPTextEncode", text="a")}), snapshot({"4": node("CLIPTextEncode", text="b")})
    )
    assert result == {
        "changes": [
            {"node_id": "4", "node_type": "CLIPTextEncode", "input": "text", "before": "a", "after": "b"}
        ],
        "n_changes": 1,
        "n_inputs_added": 0,
        "n_inputs_removed": 0,
    }


def test_a_replaced_node_counts_each_input_once_removed_and_once_added():
    result = diff(snapshot({"3": node("A", x=1, y=2)}), snapshot({"3": node("B", x=1, z=3)}))
    assert result["changes"] == [] and result["n_changes"] == 0
    # x: replaced (both); y: removed; z: added
    assert result["n_inputs_added"] == 2 and result["n_inputs_removed"] == 2


def test_the_list_is_cut_at_max_changes(monkeypatch):
    monkeypatch.setattr(input_changes, "MAX_CHANGES", 2)
    result = diff(snapshot({"1": node("N", a=1, b=1, c=1)}), snapshot({"1": node("N", a=2, b=2, c=2)}))
    assert [c["input"] for c in result["changes"]] == ["a", "b"] and result["n_changes"] == 3


def test_unknown_is_null_everywhere_but_its_reason():
    assert unknown("why") == {
        "compared_with_prompt_id": None,
        "first_run": None,
        "changes": None,
        "n_changes": None,
        "n_inputs_added": None,
        "n_inputs_removed": None,
        "unknown_reason": "why",
    }


def test_a_run_without_recorded_inputs_is_unknown_and_does_not_become_the_last():
    history = InputHistory()
    history.compare("demo", "p1", snapshot({"1": node("N", a=1)}))
    assert history.compare("demo", "p2", None) == unknown(NOT_RECORDED_REASON)
    assert history.compare("", "p3", {}) == unknown(input_changes.NO_NAME_REASON)
    third = history.compare("demo", "p4", snapshot({"1": node("N", a=2)}))
    assert third["compared_with_prompt_id"] == "p1" and third["n_changes"] == 1


def test_a_first_run_is_complete_with_nothing_added_or_removed_known():
    assert InputHistory().compare("demo", "p1", {}) == {
        "compared_with_prompt_id": None,
        "first_run": True,
        "changes": [],
        "n_changes": 0,
        "n_inputs_added": None,
        "n_inputs_removed": None,
        "unknown_reason": None,
    }


def test_a_run_before_the_restart_is_named_with_its_reason():
    result = InputHistory().compare("demo", "p9", {}, earlier_prompt_id="p1")
    assert result == {
        **unknown(
            "the last run of this workflow (p1) ran before the server restarted: its inputs were not kept"
        ),
        "compared_with_prompt_id": "p1",
        "first_run": False,
    }
    # once this history has seen a run, the earlier run's id no longer matters
    history = InputHistory()
    history.compare("demo", "p1", {})
    assert history.compare("demo", "p2", {}, earlier_prompt_id="p0")["compared_with_prompt_id"] == "p1"


def test_the_history_forgets_the_least_recently_run_workflow_first():
    history = InputHistory(max_workflows=2)
    history.compare("a", "p1", {})
    history.compare("b", "p2", {})
    history.compare("a", "p3", {})  # "a" is the most recent now
    history.compare("c", "p4", {})  # "b" goes
    assert history.compare("a", "p5", {})["compared_with_prompt_id"] == "p3"
    assert history.compare("c", "p6", {})["compared_with_prompt_id"] == "p4"
    assert history.compare("b", "p7", {})["first_run"] is True


def test_file_names_keep_48_safe_characters_and_16_hex_digits_of_the_name():
    digest = hashlib.sha256(b"__my flow!__").hexdigest()[:16]
    assert inputs_file_name("__my flow!__") == f"my_flow-{digest}.json"
    long = inputs_file_name("y" * 60)
    assert long == "y" * 48 + "-" + hashlib.sha256(b"y" * 60).hexdigest()[:16] + ".json"
    assert inputs_file_name("???").startswith("workflow-")


def test_the_file_count_is_an_int_or_a_callable_and_at_least_one(tmp_path):
    assert InputFiles(str(tmp_path)).max_files == input_changes.MAX_WORKFLOWS
    assert InputFiles(str(tmp_path), max_files=5).max_files == 5
    assert InputFiles(str(tmp_path), max_files=lambda: 7.9).max_files == 7
    assert InputFiles(str(tmp_path), max_files=0).max_files == 1
    assert InputFiles(str(tmp_path), max_files=lambda: -3).max_files == 1


def test_a_save_through_submit_waits_for_it(tmp_path):
    queued = []
    files = InputFiles(str(tmp_path), submit=queued.append)
    files.save("demo", "p1", {("1", "a"): ("N", "int:1", "1")})
    assert queued and not os.path.exists(files.path("demo"))
    queued[0]()
    assert files.load("demo") == ("p1", {("1", "a"): ("N", "int:1", "1")})


def test_saved_and_loaded_back_with_a_class_none(tmp_path):
    files = InputFiles(str(tmp_path))
    taken = {("1", "a"): (None, "int:1", "1"), ("2", "b"): ("K", "str:x", "x")}
    files.save("demo", "p1", taken)
    data = json.loads(open(files.path("demo"), encoding="utf-8").read())
    assert data["version"] == 1 and data["inputs"] == [
        ["1", "a", None, "int:1", "1"],
        ["2", "b", "K", "str:x", "x"],
    ]
    assert files.load("demo") == ("p1", taken)


def write(files, name, data):
    os.makedirs(files.directory, exist_ok=True)
    with open(files.path(name), "w", encoding="utf-8") as f:
        json.dump(data, f)


@pytest.mark.parametrize(
    "change",
    [
        {"prompt_id": 7},
        {"inputs": {"1": 1}},
        {"version": 2},
        {"workflow_name": "other"},
    ],
)
def test_a_file_with_a_wrong_field_is_not_read(tmp_path, change):
    files = InputFiles(str(tmp_path))
    good = {"version": 1, "workflow_name": "demo", "prompt_id": "p1", "inputs": []}
    write(files, "demo", good)
    assert files.load("demo") == ("p1", {})
    write(files, "demo", {**good, **change})
    assert files.load("demo") is None
    write(files, "demo", [good])
    assert files.load("demo") is None


def test_entries_with_a_wrong_field_are_skipped(tmp_path):
    files = InputFiles(str(tmp_path))
    entries = [
        ["1", "a", "N", "int:1", "1"],
        ["1", "b", 3, "int:1", "1"],  # a class that is neither text nor null
        [1, "c", "N", "int:1", "1"],
        ["1", 2, "N", "int:1", "1"],
        ["1", "d", "N", 1, "1"],
        ["1", "e", "N", "int:1", 1],
        ["1", "f", "N", "int:1"],
        ["1", "g", "N", "int:1", "1", "extra"],
        ("not", "a", "list"),
    ]
    write(files, "demo", {"version": 1, "workflow_name": "demo", "prompt_id": "p1", "inputs": entries})
    assert files.load("demo") == ("p1", {("1", "a"): ("N", "int:1", "1")})


def test_a_file_past_its_size_bound_is_not_read(tmp_path, monkeypatch):
    files = InputFiles(str(tmp_path))
    files.save("demo", "p1", {})
    size = os.path.getsize(files.path("demo"))
    monkeypatch.setattr(input_changes, "MAX_INPUTS_FILE_BYTES", size)
    assert files.load("demo") == ("p1", {})
    monkeypatch.setattr(input_changes, "MAX_INPUTS_FILE_BYTES", size - 1)
    assert files.load("demo") is None


def test_a_folder_under_the_file_name_is_not_read(tmp_path):
    files = InputFiles(str(tmp_path))
    os.makedirs(files.path("demo"))
    assert files.load("demo") is None


def test_pruning_counts_only_visible_json_files(tmp_path):
    files = InputFiles(str(tmp_path), max_files=1)
    for name in ("notes.txt", ".hidden.json"):
        (tmp_path / name).write_text("x", encoding="utf-8")
        os.utime(tmp_path / name, ns=(0, 0))
    os.makedirs(tmp_path / "folder.json")
    os.utime(tmp_path / "folder.json", ns=(0, 0))
    files.save("old", "p1", {})
    os.utime(files.path("old"), ns=(10**9, 10**9))
    files.save("new", "p2", {})
    assert sorted(os.listdir(tmp_path)) == sorted(
        [".hidden.json", "folder.json", "notes.txt", inputs_file_name("new")]
    )


def test_the_documented_bounds():
    """80 characters shown per value, 50 changes listed, 2,000 inputs per snapshot, 32 workflows."""
    assert shown("x" * 100) == "x" * 79 + "…"
    many = {"1": node("N", **{f"i{k:03}": 0 for k in range(51)})}
    changed = {"1": node("N", **{f"i{k:03}": 1 for k in range(51)})}
    result = diff(snapshot(many), snapshot(changed))
    assert len(result["changes"]) == 50 and result["changes"][-1]["input"] == "i049"
    assert len(snapshot({"1": node("N", **{f"i{k}": k for k in range(2001)})})) == 2000
    history = InputHistory()
    for i in range(33):
        history.compare(f"w{i}", f"p{i}", {})
    assert history.compare("w1", "q", {})["compared_with_prompt_id"] == "p1"
    assert history.compare("w0", "q", {})["first_run"] is True  # the 33rd workflow pushed it out


def test_an_inputs_file_of_four_mib_is_read_and_one_byte_more_is_not(tmp_path):
    files = InputFiles(str(tmp_path))
    text = json.dumps({"version": 1, "workflow_name": "demo", "prompt_id": "p1", "inputs": []})
    for size, expected in ((4 * 1024 * 1024, ("p1", {})), (4 * 1024 * 1024 + 1, None)):
        with open(files.path("demo"), "w", encoding="utf-8") as f:
            f.write(text + " " * (size - len(text)))
        assert os.path.getsize(files.path("demo")) == size
        assert files.load("demo") == expected

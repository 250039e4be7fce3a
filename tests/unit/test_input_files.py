"""The last widget inputs per workflow name on disk: changes known across a server restart."""

import json
import os

from monitors.engine.input_changes import (
    MAX_INPUTS_PER_SNAPSHOT,
    InputFiles,
    InputHistory,
    inputs_file_name,
    snapshot,
)
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import INPUTS_DIR_NAME, RunStore


def prompt(seed=1, steps=20):
    return {
        "3": {"class_type": "KSampler", "inputs": {"seed": seed, "steps": steps, "model": ["4", 0]}},
        "4": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "a.safetensors"}},
    }


def test_file_names_are_plain_distinct_and_bounded():
    names = ["demo", "a/b", "a_b", "../../etc/passwd", "日本語", "", "x" * 500, "a b.json"]
    files = [inputs_file_name(n) for n in names]
    assert len(set(files)) == len(names)
    for f in files:
        assert os.path.basename(f) == f and not f.startswith(".") and f.endswith(".json")
        assert len(f) <= 48 + 1 + 16 + 5
        assert all(c.isascii() and (c.isalnum() or c in "_-.") for c in f)
    assert inputs_file_name("a/b").startswith("a_b-") and inputs_file_name("日本語").startswith("workflow-")


def test_a_new_history_on_the_same_folder_compares_with_the_run_before_the_restart(tmp_path):
    before = InputHistory(files=InputFiles(str(tmp_path)))
    assert before.compare("demo", "p1", snapshot(prompt(seed=1)))["first_run"] is True
    restarted = InputHistory(files=InputFiles(str(tmp_path)))
    result = restarted.compare("demo", "p2", snapshot(prompt(seed=2)), earlier_prompt_id="p1")
    assert result["first_run"] is False and result["compared_with_prompt_id"] == "p1"
    assert result["unknown_reason"] is None
    assert [(c["node_id"], c["node_type"], c["input"], c["before"], c["after"]) for c in result["changes"]] == [
        ("3", "KSampler", "seed", "1", "2")
    ]
    # the file follows the last run
    again = InputHistory(files=InputFiles(str(tmp_path))).compare("demo", "p3", snapshot(prompt(seed=2, steps=30)))
    assert again["compared_with_prompt_id"] == "p2"
    assert [(c["input"], c["before"], c["after"]) for c in again["changes"]] == [("steps", "20", "30")]


def test_written_atomically_one_file_per_name_count_capped_oldest_first(tmp_path):
    files = InputFiles(str(tmp_path), max_files=lambda: 2)
    history = InputHistory(files=files)
    for i, name in enumerate(("one", "two", "three")):
        history.compare(name, f"p{i}", snapshot(prompt(seed=i)))
        os.utime(files.path(name), ns=(i * 10**9, i * 10**9))  # a distinct age per file
    history.compare("three", "p9", snapshot(prompt(seed=9)))  # rewriting one prunes the rest
    left = sorted(os.listdir(tmp_path))
    assert left == sorted([inputs_file_name("two"), inputs_file_name("three")])  # no temp file left
    data = json.loads((tmp_path / inputs_file_name("three")).read_text(encoding="utf-8"))
    assert data["workflow_name"] == "three" and data["prompt_id"] == "p9"
    assert ["3", "seed", "KSampler", "int:9", "9"] in data["inputs"]
    assert InputFiles(str(tmp_path)).load("one") is None


def test_unreadable_foreign_or_other_name_files_are_not_used(tmp_path):
    files = InputFiles(str(tmp_path))
    os.makedirs(tmp_path, exist_ok=True)
    (tmp_path / inputs_file_name("bad")).write_text("{not json", encoding="utf-8")
    (tmp_path / inputs_file_name("other")).write_text(
        json.dumps({"version": 1, "workflow_name": "not other", "prompt_id": "p", "inputs": []}), encoding="utf-8"
    )
    (tmp_path / inputs_file_name("old")).write_text(
        json.dumps({"version": 99, "workflow_name": "old", "prompt_id": "p", "inputs": []}), encoding="utf-8"
    )
    assert files.load("bad") is None and files.load("other") is None and files.load("old") is None
    assert files.load("never ran") is None
    # odd entries are skipped, not trusted; the count is bounded
    entries = [["1", "a", None, "int:1", "1"], ["x"], [1, 2, 3, 4, 5]] + [
        [str(i), "b", "N", "int:0", "0"] for i in range(MAX_INPUTS_PER_SNAPSHOT + 10)
    ]
    (tmp_path / inputs_file_name("odd")).write_text(
        json.dumps({"version": 1, "workflow_name": "odd", "prompt_id": "p7", "inputs": entries}), encoding="utf-8"
    )
    prompt_id, taken = files.load("odd")
    assert prompt_id == "p7" and taken[("1", "a")] == (None, "int:1", "1")
    assert len(taken) == MAX_INPUTS_PER_SNAPSHOT - 2  # the first 2,000 entries, two of them skipped
    # a history whose file is unreadable treats the run as before: a first run
    assert InputHistory(files=files).compare("bad", "p1", snapshot(prompt()))["first_run"] is True


def test_a_write_failure_costs_only_the_file(tmp_path):
    blocker = tmp_path / "not a folder"
    blocker.write_text("x", encoding="utf-8")
    history = InputHistory(files=InputFiles(str(blocker)))
    assert history.compare("demo", "p1", snapshot(prompt()))["first_run"] is True
    assert history.compare("demo", "p2", snapshot(prompt(seed=3)))["n_changes"] == 1


def test_recorder_store_keeps_inputs_beside_the_reports_across_a_restart(tmp_path):
    workflow = {"name": "demo", "id": "w-1", "name_unknown_reason": None}
    store = RunStore(str(tmp_path), background_writes=True)
    recorder = RunRecorder(store)
    recorder.begin_run("p1", prompt(seed=1))
    recorder.end_run("success", workflow=workflow)
    store.flush()
    assert os.listdir(tmp_path / INPUTS_DIR_NAME) == [inputs_file_name("demo")]
    # a new server process: a new store and recorder on the same folder, history read back
    store2 = RunStore(str(tmp_path), background_writes=True)
    assert store2.load_from_disk() == 1  # the inputs folder is not a report
    recorder2 = RunRecorder(store2)
    recorder2.begin_run("p2", prompt(seed=5))
    recorder2.end_run("success", workflow=workflow)
    store2.flush()
    changes = store2.get("p2")["input_changes"]
    assert changes["compared_with_prompt_id"] == "p1" and changes["unknown_reason"] is None
    assert [(c["input"], c["before"], c["after"]) for c in changes["changes"]] == [("seed", "1", "5")]


def test_the_file_count_follows_the_store_setting(tmp_path):
    store = RunStore(str(tmp_path), max_files=2)
    files = store.input_files()
    history = InputHistory(files=files)
    for i in range(4):
        history.compare(f"w{i}", f"p{i}", snapshot(prompt(seed=i)))
        os.utime(files.path(f"w{i}"), ns=(i * 10**9, i * 10**9))
    history.compare("w3", "p9", snapshot(prompt()))
    assert len(os.listdir(tmp_path / INPUTS_DIR_NAME)) == 2
    assert RunStore(None).input_files() is None

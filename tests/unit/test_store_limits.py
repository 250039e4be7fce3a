"""The run store's bounds and readers (monitors/engine/store.py): at least one run and one file kept,
the cap reached but not passed, other files in the folder left alone, limits, and the readers'
answers for runs still pending or never seen."""

from __future__ import annotations

import logging
import os

from monitors.engine.store import RunStore
from monitors.report import RunReport

NEVER_S = 3600


def report(prompt_id: str, started_unix_s: float = 1000.0) -> RunReport:
    return RunReport(
        prompt_id=prompt_id,
        status="success",
        started_unix_s=started_unix_s,
        finished_unix_s=started_unix_s + 1,
        duration_s=1.0,
    )


def add_aged(store: RunStore, folder, prompt_id: str, age: int) -> None:
    store.add(report(prompt_id))
    os.utime(folder / f"{prompt_id}.json", (age, age))


def test_a_limit_below_one_still_keeps_one_run_and_one_file(tmp_path):
    store = RunStore(str(tmp_path), max_runs=0, max_files=0)
    add_aged(store, tmp_path, "p1", 1)
    add_aged(store, tmp_path, "p2", 2)
    assert len(store) == 1 and store.summaries()[0]["prompt_id"] == "p2"
    assert os.listdir(tmp_path) == ["p2.json"]
    store.configure(max_runs=0, max_files=0)
    assert len(store) == 1
    add_aged(store, tmp_path, "p3", 3)
    assert os.listdir(tmp_path) == ["p3.json"]


def test_a_folder_exactly_at_its_cap_is_not_pruned(tmp_path):
    store = RunStore(str(tmp_path), max_files=10)
    for i in range(10):
        add_aged(store, tmp_path, f"p{i}", i + 1)
    assert len(os.listdir(tmp_path)) == 10


def test_a_restarted_store_that_fills_its_folder_to_the_cap_prunes_nothing(tmp_path):
    earlier = RunStore(str(tmp_path), max_files=10)
    for i in range(9):
        add_aged(earlier, tmp_path, f"old{i}", i + 1)
    restarted = RunStore(str(tmp_path), max_files=10)  # lists the folder at its first write
    add_aged(restarted, tmp_path, "new", 100)
    assert len(os.listdir(tmp_path)) == 10


def test_pruning_and_loading_leave_the_folders_other_files_alone(tmp_path, caplog):
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / ".last_inputs").mkdir()
    (tmp_path / ".hidden.json").write_text("{}")
    for name in ("notes.txt", ".hidden.json"):
        os.utime(tmp_path / name, (0, 0))  # the oldest: pruned first if they were counted
    store = RunStore(str(tmp_path), max_files=2)
    for i in range(3):
        add_aged(store, tmp_path, f"p{i}", i + 1)
    assert sorted(os.listdir(tmp_path)) == [".hidden.json", ".last_inputs", "notes.txt", "p1.json", "p2.json"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="monitors.engine.store"):
        assert RunStore(str(tmp_path)).load_from_disk() == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []  # no attempt to read what is not a report


def test_configure_drops_the_oldest_runs_first(tmp_path):
    store = RunStore(str(tmp_path))
    for i in range(4):
        store.add(report(f"p{i}"))
    store.configure(max_runs=2)
    assert [s["prompt_id"] for s in store.summaries()] == ["p3", "p2"] and len(store) == 2


def test_the_last_write_errors_are_kept(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = RunStore(str(blocker / "reports"))
    for i in range(25):
        assert store.add(report(f"p{i}")) is None
    assert len(store.write_errors) == 20 and "p24" in store.write_errors[-1]


def test_a_written_report_returns_its_path(tmp_path):
    assert RunStore(str(tmp_path)).add(report("p1")) == str(tmp_path / "p1.json")


def test_summaries_take_a_limit(tmp_path):
    store = RunStore(str(tmp_path))
    for i in range(3):
        store.add(report(f"p{i}"))
    assert [s["prompt_id"] for s in store.summaries(limit=2)] == ["p2", "p1"]


def test_a_pending_run_has_its_row_before_anything_converted_it(tmp_path):
    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=NEVER_S, write_latest_s=NEVER_S)
    store.add(report("p1"))
    row = store.summary("p1")
    assert row["prompt_id"] == "p1" and "nodes" not in row  # the run-list row, not the report
    store.add(report("p2"))
    rows = store.summaries()  # p2 still pending: its row is made here
    assert [s["prompt_id"] for s in rows] == ["p2", "p1"]
    assert all("nodes" not in row for row in rows)


def test_a_pending_run_keeps_its_place_when_the_history_is_loaded(tmp_path):
    older = RunStore(str(tmp_path))
    older.add(report("old", started_unix_s=1000.0))
    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=NEVER_S, write_latest_s=NEVER_S)
    store.add(report("new", started_unix_s=2000.0))
    store.load_from_disk()
    assert [s["prompt_id"] for s in store.summaries()] == ["new", "old"]


def test_readers_of_a_store_without_a_folder(tmp_path):
    store = RunStore(None)
    assert store.get("unknown") is None and store.summary("unknown") is None and len(store) == 0
    assert store.settle(0) is True  # nothing is ever pending without background writes


def test_a_removed_listener_is_not_called_again(tmp_path):
    store = RunStore(str(tmp_path))
    called = []
    store.add_listener(called.append)
    store.add(report("p1"))
    store.remove_listener(called.append)
    store.remove_listener(called.append)  # a second removal is harmless
    store.add(report("p2"))
    assert [data["prompt_id"] for data in called] == ["p1"]

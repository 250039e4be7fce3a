"""The run store with background writes (monitors/engine/store.py): reports are logged, counted by the
listeners and written in batches once the store is quiet, or at most write_latest_s late; readers
get them from memory meanwhile, and nothing pending is lost at exit."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from monitors.engine.store import RunStore
from monitors.report import RunReport
from tests.unit.fake_clock import FakeClock, install
from tests.watchdog import wait_until

WATCHDOG_S = 30  # a hang watchdog only
NEVER_S = 3600  # a quiet time no test waits for


def report(prompt_id: str, workflow_name: str | None = None) -> RunReport:
    return RunReport(
        prompt_id=prompt_id,
        status="success",
        started_unix_s=1000.0 + len(prompt_id),
        finished_unix_s=1001.0,
        duration_s=1.0,
        workflow=None if workflow_name is None else {"name": workflow_name, "id": None},
    )


def test_an_added_report_waits_for_the_batch_and_readers_get_it_from_memory(tmp_path):
    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=NEVER_S, write_latest_s=NEVER_S)
    seen = []
    store.add_listener(seen.append)
    path = store.add(report("p1", "w"))
    assert path == str(tmp_path / "p1.json")
    assert not os.path.exists(path) and seen == []
    assert store.get("p1")["prompt_id"] == "p1"
    assert store.summaries()[0]["workflow_name"] == "w"
    assert store.summary("p1") is store.summaries()[0]  # converted once, kept
    store.flush()
    assert os.path.isfile(path) and [r["prompt_id"] for r in seen] == ["p1"]
    assert seen[0] is store.get("p1")  # the listeners get the dict the readers get


def test_a_quiet_store_writes_the_batch_and_logs_each_run(tmp_path, caplog):
    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=0.01, write_latest_s=NEVER_S)
    with caplog.at_level(logging.INFO, logger="monitors.engine.store"):
        for i in range(3):
            store.add(report(f"p{i}"))
        wait_until(lambda: len(os.listdir(tmp_path)) == 3, "the batch was not written once quiet", WATCHDOG_S)
        wait_until(lambda: caplog.text.count("p") >= 3, "the runs were not logged", WATCHDOG_S)
    assert sorted(os.listdir(tmp_path)) == ["p0.json", "p1.json", "p2.json"]


def test_a_store_that_never_gets_quiet_still_writes_within_write_latest_s(tmp_path):
    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=NEVER_S, write_latest_s=0.05)
    stop = threading.Event()

    def keep_adding():
        i = 0
        while not stop.is_set():
            store.add(report(f"busy{i}"))
            i += 1
            time.sleep(0.005)

    adder = threading.Thread(target=keep_adding)
    adder.start()
    try:
        wait_until(lambda: (tmp_path / "busy0.json").is_file(), "a busy store never wrote its first report", WATCHDOG_S)
    finally:
        stop.set()
        adder.join(WATCHDOG_S)


def test_settle_counts_the_pending_runs_now(tmp_path):
    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=NEVER_S, write_latest_s=NEVER_S)
    counted = []
    store.add_listener(lambda data: counted.append(data["prompt_id"]))
    store.add(report("p1"))
    assert store.settle(WATCHDOG_S) is True
    assert counted == ["p1"] and (tmp_path / "p1.json").is_file()
    assert store.settle(WATCHDOG_S) is True and counted == ["p1"]  # counted once


def test_the_latest_run_of_a_workflow_is_found_without_converting_anything(tmp_path, monkeypatch):
    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=NEVER_S, write_latest_s=NEVER_S)
    store.add(report("a1", "a"))
    store.add(report("b1", "b"))
    store.get("a1")  # converted: found through its row
    monkeypatch.setattr(RunReport, "to_dict", lambda self: (_ for _ in ()).throw(AssertionError("converted")))
    store.add(report("a2", "a"))
    assert store.latest_run_of_workflow("a") == "a2"
    assert store.latest_run_of_workflow("a", other_than="a2") == "a1"
    assert store.latest_run_of_workflow("b") == "b1"
    assert store.latest_run_of_workflow("c") is None


def test_a_run_pushed_out_of_memory_before_its_batch_is_still_written(tmp_path):
    store = RunStore(
        str(tmp_path), max_runs=1, background_writes=True, write_quiet_s=NEVER_S, write_latest_s=NEVER_S
    )
    store.add(report("p1"))
    store.add(report("p2"))
    assert [s["prompt_id"] for s in store.summaries()] == ["p2"]
    store.flush()
    assert store.get("p1")["prompt_id"] == "p1"  # read back from its file


def test_the_reports_pending_at_exit_are_written(tmp_path):
    script = (
        "import sys\n"
        "from monitors.report import RunReport\n"
        "from monitors.engine.store import RunStore\n"
        "store = RunStore(sys.argv[1], background_writes=True, write_quiet_s=3600, write_latest_s=3600)\n"
        "store.add(RunReport(prompt_id='late', status='success', started_unix_s=1.0,\n"
        "                    finished_unix_s=2.0, duration_s=1.0))\n"
    )
    repo = Path(__file__).resolve().parents[2]
    subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(repo)},
        check=True,
        timeout=WATCHDOG_S,
    )
    assert (tmp_path / "late.json").is_file()


def test_many_adds_schedule_one_batch(tmp_path, monkeypatch):
    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=NEVER_S, write_latest_s=NEVER_S)
    scheduled = []
    # Kept patch of a private name: how many batches were scheduled (not when they ran, which a
    # loaded machine decides) is seen only where the store hands them to its writer thread.
    monkeypatch.setattr(store._writer, "submit", lambda task, delay_s=0.0: scheduled.append(delay_s))
    for i in range(10):
        store.add(report(f"p{i}"))
    assert scheduled == [NEVER_S]


def test_a_batch_comes_again_for_the_runs_after_it(tmp_path):
    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=0.01, write_latest_s=NEVER_S)
    store.add(report("p1"))
    wait_until(lambda: (tmp_path / "p1.json").is_file(), "the first batch was not written", WATCHDOG_S)
    store.add(report("p2"))
    wait_until(lambda: (tmp_path / "p2.json").is_file(), "a run after a batch was never written", WATCHDOG_S)
    store.add(report("p3"))
    store.flush()  # finishes p3 before its batch comes: that batch finds nothing to do
    time.sleep(0.1)
    store.add(report("p4"))
    wait_until(lambda: (tmp_path / "p4.json").is_file(), "a run after an empty batch was never written", WATCHDOG_S)


def test_a_batch_waits_until_no_run_has_come_for_the_quiet_time(tmp_path, monkeypatch):
    """On a fake clock, the batch task looking at chosen moments: while runs keep coming it waits,
    one tick short of the quiet time after the last run it still waits, at the quiet time it
    writes them all. (The writer thread's own look comes in real time, long after this test.)"""
    clock = install(FakeClock(), monkeypatch)
    quiet_s = 300.0
    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=quiet_s, write_latest_s=NEVER_S * 10)
    counted = []
    store.add_listener(lambda data: counted.append(clock.monotonic()))
    for i in range(5):
        store.add(report(f"p{i}"))
        last_add = clock.monotonic()
        clock.advance(quiet_s / 5)  # never quiet long enough while these come
        store._finish_when_quiet()
        assert counted == []
    clock.move_to(last_add + quiet_s - 0.001)
    store._finish_when_quiet()
    assert counted == []  # one tick short of quiet
    clock.move_to(last_add + quiet_s)
    store._finish_when_quiet()
    assert counted == [last_add + quiet_s] * 5  # all five, at exactly the quiet time


def test_the_exit_hook_writes_what_is_pending_and_ignores_a_store_gone(tmp_path):
    import weakref

    from monitors.engine.store import _finish_at_exit

    store = RunStore(str(tmp_path), background_writes=True, write_quiet_s=NEVER_S, write_latest_s=NEVER_S)
    store.add(report("p1"))
    _finish_at_exit(weakref.ref(store))
    assert (tmp_path / "p1.json").is_file()

    class Gone:
        pass

    gone = Gone()
    reference = weakref.ref(gone)
    del gone
    _finish_at_exit(reference)  # nothing to write, nothing raised

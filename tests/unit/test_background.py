"""monitors/background.py: tasks in order on one thread that ends once idle and comes back."""

from __future__ import annotations

import logging
import threading

from monitors.background import BackgroundWorker

WATCHDOG_S = 30  # a hang watchdog only


def test_tasks_run_in_order_off_the_callers_thread():
    worker = BackgroundWorker("pipeline-monitor-test", idle_exit_s=5)
    ran = []
    for i in range(5):
        worker.submit(lambda i=i: ran.append((i, threading.current_thread().name)))
    worker.join()
    assert ran == [(i, "pipeline-monitor-test") for i in range(5)]


def test_a_failing_task_is_logged_and_the_next_still_runs(caplog):
    worker = BackgroundWorker("pipeline-monitor-test", idle_exit_s=5)
    ran = []

    def broken():
        raise OSError("disk gone")

    with caplog.at_level(logging.WARNING, logger="monitors.background"):
        worker.submit(broken)
        worker.submit(lambda: ran.append("next"))
        worker.join()
    assert ran == ["next"]
    assert "pipeline-monitor-test task failed: OSError: disk gone" in caplog.text


def test_the_thread_ends_once_idle_and_the_next_task_starts_another(monkeypatch):
    crashes = []
    monkeypatch.setattr(threading, "excepthook", crashes.append)  # the thread must end, not crash
    worker = BackgroundWorker("pipeline-monitor-test", idle_exit_s=0.05)
    assert worker.thread is None
    worker.submit(lambda: None)
    first = worker.thread
    assert first is not None and first.daemon
    first.join(WATCHDOG_S)
    assert not first.is_alive() and worker.thread is None
    done = threading.Event()
    worker.submit(done.set)
    assert done.wait(WATCHDOG_S) and worker.thread is not first
    assert crashes == []


def test_a_task_that_comes_while_the_thread_waits_idle_runs_on_that_thread():
    worker = BackgroundWorker("pipeline-monitor-test", idle_exit_s=WATCHDOG_S)
    threads = []
    worker.submit(lambda: threads.append(threading.current_thread()))
    worker.join()
    worker.submit(lambda: threads.append(threading.current_thread()))
    worker.join()
    assert threads[0] is threads[1] is worker.thread


def test_wait_idle_says_when_tasks_are_still_pending():
    worker = BackgroundWorker("pipeline-monitor-test", idle_exit_s=5)
    release = threading.Event()
    worker.submit(lambda: release.wait(WATCHDOG_S))
    assert worker.wait_idle(0.05) is False
    release.set()
    assert worker.wait_idle(WATCHDOG_S) is True


def test_a_delayed_task_runs_once_due_after_the_tasks_due_before_it():
    worker = BackgroundWorker("pipeline-monitor-test", idle_exit_s=5)
    ran = []
    done = threading.Event()
    worker.submit(lambda: (ran.append("delayed"), done.set()), delay_s=0.05)
    worker.submit(lambda: ran.append("now"))
    assert done.wait(WATCHDOG_S)
    assert ran == ["now", "delayed"]


def test_join_waits_for_the_tasks_due_now_not_for_a_delayed_one():
    worker = BackgroundWorker("pipeline-monitor-test", idle_exit_s=5)
    ran = []
    worker.submit(lambda: ran.append("later"), delay_s=3600)
    worker.submit(lambda: ran.append("now"))
    worker.join()
    assert ran == ["now"] and worker.wait_idle(0) is True


def test_a_thread_told_to_stay_waits_idle_for_the_next_task(monkeypatch):
    """stay(): for libraries with per-thread state (torch.compile), the thread that did the work
    never ends; a worker that was not told so ends after the same idle time."""
    crashes = []
    monkeypatch.setattr(threading, "excepthook", crashes.append)
    staying = BackgroundWorker("pipeline-monitor-test", idle_exit_s=0.05)
    control = BackgroundWorker("pipeline-monitor-test", idle_exit_s=0.05)
    threads = []
    staying.submit(lambda: (staying.stay(), threads.append(threading.current_thread())))
    staying.join()
    control.submit(lambda: None)
    control.thread.join(WATCHDOG_S)
    assert staying.idle_exit_s is None and control.thread is None
    assert threads[0].is_alive() and staying.thread is threads[0]
    staying.submit(lambda: threads.append(threading.current_thread()))
    staying.join()
    assert threads[1] is threads[0] and crashes == []

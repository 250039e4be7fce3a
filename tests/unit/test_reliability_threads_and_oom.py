"""Reliability pieces of the library: the VAE chain's memory snapshot at an out-of-memory, and the
report store's background writer thread that ends when idle (no thread left behind)."""

from __future__ import annotations

import threading
import time

import pytest

from monitors.engine import store as store_mod
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.vae.chain import run_chain
from monitors.vae.outcomes import ERROR, OK, OOM
from tests.unit.test_vae_chain import CUDA_OOM, FakeVAE, options, pixels


def test_out_of_memory_attempt_carries_the_snapshot_taken_at_that_moment():
    taken = []

    def snapshot():
        taken.append(time.monotonic())
        return {"n_models_loaded": 2, "loaded_bytes": 123, "models": [{"model_class": "WAN21"}]}

    vae = FakeVAE(fail={"direct": CUDA_OOM("simulated")})
    result = run_chain(vae, pixels(), options(strategy="direct", memory_snapshot=snapshot))
    outcomes = [(a.strategy, a.outcome) for a in result.attempts]
    assert outcomes[:2] == [("direct", OOM), ("tiled", OK)]
    direct, tiled = result.attempts[0], result.attempts[1]
    assert direct.memory_snapshot["n_models_loaded"] == 2 and tiled.memory_snapshot is None
    assert len(taken) == 1 and direct.to_dict()["memory_snapshot"]["loaded_bytes"] == 123


def test_no_snapshot_for_other_errors_and_a_failing_snapshot_is_recorded():
    def broken():
        raise RuntimeError("snapshot exploded")

    vae = FakeVAE(fail={"direct": ValueError("bad pixels")})
    result = run_chain(vae, pixels(), options(strategy="direct", memory_snapshot=broken))
    assert [(a.outcome, a.memory_snapshot) for a in result.attempts] == [(ERROR, None)]
    assert result.monitor_errors == []
    vae = FakeVAE(fail={"direct": CUDA_OOM("simulated")})
    result = run_chain(vae, pixels(), options(strategy="direct", memory_snapshot=broken))
    assert result.attempts[0].outcome == OOM and result.attempts[0].memory_snapshot is None
    assert any("snapshot exploded" in e for e in result.monitor_errors)
    assert result.samples is not None  # the chain went on


def writer_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "pipeline-monitor-report-writer"}


@pytest.mark.parametrize("n_reports", [1, 5])
def test_background_writer_ends_when_idle_and_restarts(tmp_path, monkeypatch, probes_for, n_reports):
    monkeypatch.setattr(store_mod, "WRITER_IDLE_EXIT_S", 0.05)
    before = writer_threads()
    store = RunStore(str(tmp_path), background_writes=True)
    recorder = RunRecorder(store, probes=probes_for())
    for round_ in range(2):
        for i in range(n_reports):
            recorder.begin_run(f"r{round_}-{i}", None)
            recorder.end_run("success")
        store.flush()
        assert {p.name for p in tmp_path.glob(f"r{round_}-*.json")} == {
            f"r{round_}-{i}.json" for i in range(n_reports)
        }
        deadline = time.monotonic() + 60  # a hang watchdog, never a speed check
        while writer_threads() - before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert writer_threads() - before == set()


def test_reports_added_while_the_writer_decides_to_stop_are_never_stranded(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "WRITER_IDLE_EXIT_S", 0.001)
    store = RunStore(str(tmp_path), background_writes=True)
    recorder = RunRecorder(store)
    for i in range(200):
        recorder.begin_run(f"s{i}", None)
        recorder.end_run("success")
        if i % 7 == 0:
            time.sleep(0.002)  # let the writer go idle and end between some reports
    store.flush()
    assert len(list(tmp_path.glob("s*.json"))) == 200

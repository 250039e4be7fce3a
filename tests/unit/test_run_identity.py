"""Which run a profiled session is (monitors/pipeline_profiler/run_identity.py): rank and world size from
torchrun's variables or an initialised process group, and a file-name-safe run id."""

from __future__ import annotations

import os
import re
import sys
import types

from monitors.pipeline_profiler.run_identity import distributed_info, make_run_id


def group(initialized=True, available=True, rank=3, world=8, fails=False):
    def get_rank():
        if fails:
            raise RuntimeError("half initialised")
        return rank

    return types.SimpleNamespace(
        is_available=lambda: available,
        is_initialized=lambda: initialized,
        get_rank=get_rank,
        get_world_size=lambda: world,
    )


def test_torchrun_variables(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "x")
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(distributed=group()))
    info = distributed_info()
    assert (info["rank"], info["world_size"], info["local_rank"]) == (1, 4, None)
    assert info["rank_unknown_reason"] == "LOCAL_RANK='x' is not an integer"


def test_the_process_group_when_torchrun_says_nothing(monkeypatch):
    for env in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(distributed=group()))
    info = distributed_info()
    assert (info["rank"], info["world_size"], info["rank_unknown_reason"]) == (3, 8, None)
    for idle in (group(initialized=False), group(available=False)):
        monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(distributed=idle))
        assert distributed_info()["rank"] is None
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(distributed=group(fails=True)))
    info = distributed_info()
    assert info["rank"] is None
    assert info["rank_unknown_reason"] == "torch.distributed: RuntimeError: half initialised"
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace())
    assert distributed_info() == {
        "rank": None,
        "world_size": None,
        "local_rank": None,
        "rank_unknown_reason": None,
    }


def test_run_ids_are_file_name_safe():
    run_id = make_run_id("my run/../x" + "y" * 80, 2)
    assert re.fullmatch(
        r"my-run-x" + "y" * 52 + r"-\d{8}-\d{6}-" + str(os.getpid()) + r"-\d{6}-rank2", run_id
    )
    assert make_run_id("///", None).startswith("session-") and "-rank" not in make_run_id("a", None)


def test_the_run_ids_tail_is_the_clocks_last_six_digits(monkeypatch):
    import time

    from monitors.pipeline_profiler import run_identity

    clock = types.SimpleNamespace(strftime=time.strftime, gmtime=time.gmtime, monotonic_ns=lambda: 3_000_123)
    monkeypatch.setattr(run_identity, "time", clock)
    assert make_run_id("a", None).endswith(f"-{os.getpid()}-000123")

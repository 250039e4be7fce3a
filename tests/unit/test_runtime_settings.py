"""nodes/runtime.py: the pack's process-wide state as the environment configures it, with a fake
`folder_paths` (ComfyUI's output folder) in place of ComfyUI."""

import importlib
import logging
import os
import sys
import threading
import types

import pytest

from tests.unit.test_routes import PACK, import_pack


@pytest.fixture
def make_runtime(monkeypatch, tmp_path):
    _, runtime_mod = import_pack()
    folder_paths = types.ModuleType("folder_paths")
    folder_paths.get_output_directory = lambda: str(tmp_path)
    monkeypatch.setitem(sys.modules, "folder_paths", folder_paths)
    for name in (runtime_mod.ENV_MAX_RUNS, runtime_mod.ENV_PROFILE, runtime_mod.ENV_SAMPLE_INTERVAL_MS):
        monkeypatch.delenv(name, raising=False)
    made = []

    def make(**env):
        for name, value in env.items():
            monkeypatch.setenv(getattr(runtime_mod, name), value)
        made.append(runtime_mod._make_runtime())
        return made[-1]

    yield make
    for runtime in made:
        runtime.store.flush()
        runtime.sampler.stop()


def test_defaults_keep_50_runs_profile_on_and_sample_at_2_hz(make_runtime, tmp_path):
    runtime = make_runtime()
    assert runtime.store.max_runs == 50
    assert runtime.recorder.profile_enabled is True
    assert runtime.sampler.interval_s == 0.5
    assert runtime.store.reports_dir == os.path.join(str(tmp_path), "pipeline_monitor", "reports")


def test_the_environment_sets_the_history_the_profile_and_the_interval(make_runtime):
    runtime = make_runtime(ENV_MAX_RUNS="7", ENV_PROFILE="0", ENV_SAMPLE_INTERVAL_MS="250")
    assert runtime.store.max_runs == 7
    assert runtime.recorder.profile_enabled is False
    assert runtime.sampler.interval_s == 0.25


def test_values_below_one_become_one(make_runtime):
    runtime = make_runtime(ENV_MAX_RUNS="0", ENV_SAMPLE_INTERVAL_MS="-5")
    assert runtime.store.max_runs == 1
    assert runtime.sampler.interval_s == 0.001


def test_a_value_that_is_no_integer_is_named_and_the_default_used(make_runtime, caplog):
    with caplog.at_level(logging.WARNING):
        runtime = make_runtime(ENV_MAX_RUNS="many")
    assert runtime.store.max_runs == 50
    assert caplog.records[-1].getMessage() == (
        "pipeline monitor: PIPELINE_MONITOR_MAX_RUNS must be an integer, using 50"
    )


def test_history_that_cannot_be_loaded_is_named_and_the_server_goes_on(make_runtime, monkeypatch, caplog):
    store_mod = importlib.import_module(f"{PACK}.monitors.engine.store")

    def broken(self):
        raise PermissionError("reports folder not readable")

    monkeypatch.setattr(store_mod.RunStore, "load_from_disk", broken)
    with caplog.at_level(logging.WARNING):
        runtime = make_runtime()
    assert len(runtime.store) == 0
    assert caplog.records[-1].getMessage() == (
        "pipeline monitor: earlier reports not loaded: PermissionError: reports folder not readable"
    )


def test_the_servers_store_finishes_reports_off_the_prompt_thread(make_runtime):
    runtime = make_runtime()
    threads = []
    runtime.store.add_listener(lambda report: threads.append(threading.current_thread()))
    runtime.recorder.begin_run("p1", None)
    runtime.recorder.end_run("success", None)
    runtime.store.flush()
    assert len(threads) == 1 and threads[0] is not threading.current_thread()
    assert os.path.isfile(os.path.join(runtime.store.reports_dir, "p1.json"))

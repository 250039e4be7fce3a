"""The recorder's bounds and answers on its own (fake probes, a fake clock): nodes, steps, notes and
remembered steps each capped at their limit with one note; which node runs now; a node's latest
row; the row of an upstream node; what an open node becomes at the run's end; and every failure
around the run noted, never raised."""

from __future__ import annotations

import pytest

from monitors.engine import recorder as module
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.engine.upstream_memory import NO_RUN_REASON, PROFILE_OFF_REASON
from monitors.node_fields import GPU_TIME_NO_CUDA
from monitors.probes.fake import fake_probes
from monitors.report import StepReport
from tests.unit.fake_clock import FakeClock, install

PROMPT = {
    "1": {"class_type": "Loader", "inputs": {"seed": 1}, "_meta": {"title": "Load"}},
    "2": {"class_type": "Monitor", "inputs": {"model": ["1", 0], "other": ["8", 0]}},
    "5": {"class_type": "Monitor", "inputs": {}},
    "8": "not a node",
}


@pytest.fixture
def clock(monkeypatch):
    return install(FakeClock(start_s=50.0, unix_start_s=1_700_000_000.0), monkeypatch)


@pytest.fixture
def recorder():
    return RunRecorder(RunStore(None), probes=fake_probes())


def test_the_limits():
    assert (module.MAX_NODES_PER_RUN, module.MAX_STEPS_PER_RUN) == (5000, 500)
    assert (module.MAX_MONITOR_ERRORS, module.MAX_REMEMBERED_STEPS) == (50, 200)


def test_nodes_past_the_limit_are_not_profiled_and_said_once(recorder, monkeypatch):
    monkeypatch.setattr(module, "MAX_NODES_PER_RUN", 2)
    recorder.begin_run("p", PROMPT)
    for node_id in ("1", "2", "3", "4"):
        recorder.node_started(node_id)
        recorder.node_finished(node_id)
    report = recorder.end_run("success")
    assert [n.node_id for n in report.nodes] == ["1", "2"]
    assert report.monitor_errors == ("more than 2 nodes: later nodes not profiled",)


def test_notes_are_bounded_and_a_repeated_one_kept_once(recorder, monkeypatch):
    monkeypatch.setattr(module, "MAX_MONITOR_ERRORS", 2)
    recorder.begin_run("p")
    recorder.record_monitor_error("a")
    recorder.record_monitor_error("a")
    recorder.record_monitor_error("b")
    recorder.record_monitor_error("c")
    assert recorder.end_run("success").monitor_errors == ("a", "a")
    recorder.record_monitor_error("no run: logged only")
    recorder.begin_run("q")
    RunRecorder._note_once(recorder._run, "x")
    RunRecorder._note_once(recorder._run, "x")
    RunRecorder._note_once(recorder._run, "y")
    RunRecorder._note_once(recorder._run, "z")
    assert recorder.end_run("success").monitor_errors == ("x", "y")


def test_steps_at_the_limit_are_dropped_with_one_note(recorder, monkeypatch):
    monkeypatch.setattr(module, "MAX_STEPS_PER_RUN", 2)
    recorder.begin_run("p")
    assert [recorder.add_step(StepReport("latent", str(i))) for i in range(4)] == [True, True, False, False]
    report = recorder.end_run("success")
    assert len(report.steps) == 2
    assert report.monitor_errors == ("more than 2 monitor steps: later steps dropped",)


def test_a_cached_monitor_repeats_its_step_only_within_the_step_limit(recorder, monkeypatch):
    recorder.begin_run("first", PROMPT)
    recorder.add_step(StepReport("models", "2", {"n": 1}))
    recorder.add_step(StepReport("lora", "2", {"n": 2}))
    recorder.end_run("success")
    monkeypatch.setattr(module, "MAX_STEPS_PER_RUN", 1)
    recorder.begin_run("second", PROMPT)
    recorder.node_finished("2")
    assert [s.kind for s in recorder.end_run("success").steps] == ["models"]


def test_the_newest_remembered_steps_are_kept(recorder, monkeypatch):
    monkeypatch.setattr(module, "MAX_REMEMBERED_STEPS", 2)
    recorder.begin_run("first", PROMPT)
    recorder.add_step(StepReport("models", "2"))
    recorder.add_step(StepReport("models", "5"))
    recorder.add_step(StepReport("models", "2"))  # again: the newest now
    recorder.add_step(StepReport("latent", "1"))  # "5" goes
    recorder.add_step(StepReport("orphan", None))  # no node: nothing to remember
    recorder.end_run("success")
    recorder.begin_run("second", PROMPT)
    for node_id in ("1", "2", "5"):
        recorder.node_finished(node_id)
    steps = recorder.end_run("success").steps
    assert [(s.kind, s.node_id, s.cached) for s in steps] == [("latent", "1", True), ("models", "2", True)]


def test_the_executing_node_is_the_last_opened_one(recorder):
    assert recorder.executing_node() is None
    recorder.begin_run("p", PROMPT)
    assert recorder.executing_node() is None
    recorder.node_started("1")
    recorder.node_started("2")
    assert recorder.executing_node() == ("2", "Monitor", None)
    recorder.node_finished("2")
    assert recorder.executing_node() == ("1", "Loader", "Load")
    recorder.end_run("success")
    assert recorder.executing_node() is None


def test_a_nodes_profile_is_its_latest_row(recorder):
    assert recorder.node_profile("1") is None
    recorder.begin_run("p", PROMPT)
    recorder.node_finished("1")  # cached first
    recorder.node_started(1)
    recorder.node_finished(1)
    assert recorder.node_profile(1).status == "executed"
    assert recorder.node_profile("9") is None
    recorder.end_run("success")
    assert recorder.node_profile("1") is None


def test_the_row_of_a_node_the_profile_never_saw(recorder, clock):
    assert recorder.profile_row("1") == {
        "node_id": "1",
        "duration_s": None,
        "peak_rss_bytes": None,
        "cached": None,
    }
    recorder.begin_run("p", PROMPT)
    assert recorder.profile_row(1) == {
        "node_id": "1",
        "duration_s": None,
        "peak_rss_bytes": None,
        "cached": True,
    }
    recorder.node_started("1")
    recorder.node_finished("1")
    row = recorder.profile_row("1")
    assert row["node_id"] == "1" and row["cached"] is False and row["duration_s"] == pytest.approx(0.0)
    recorder.end_run("success")
    recorder.profile_enabled = False
    recorder.begin_run("q", PROMPT)
    assert recorder.profile_row("1")["cached"] is None
    recorder.end_run("success")


def test_upstream_profiles_name_each_input_source_and_its_class(recorder):
    recorder.begin_run("p", PROMPT)
    recorder.node_started("1")
    recorder.node_finished("1")
    rows = recorder.upstream_profiles("2", PROMPT, ["model", "other", "missing"])
    assert set(rows) == {"model", "other"}
    assert rows["model"]["node_id"] == "1" and rows["model"]["class_type"] == "Loader"
    assert rows["model"]["status"] == "executed"
    assert rows["other"] == {
        "node_id": "8",
        "class_type": None,
        "duration_s": None,
        "peak_rss_bytes": None,
        "cached": True,
    }
    recorder.end_run("success")


def test_upstream_memory_without_a_run_or_with_the_profile_off(recorder):
    assert recorder.upstream_memory("2")["memory_unknown_reason"] == NO_RUN_REASON
    recorder.profile_enabled = False
    recorder.begin_run("p", PROMPT, upstream_walks={"Monitor": lambda g, n: ["1"]})
    assert recorder.upstream_memory("2")["memory_unknown_reason"] == PROFILE_OFF_REASON
    assert recorder._run.upstream_plan == {} and recorder._run.watched == frozenset()
    recorder.end_run("success")


def test_a_watched_node_gets_a_full_span_and_its_result_kept(recorder):
    recorder.begin_run("p", PROMPT, upstream_walks={"Monitor": lambda g, n: ["1"] if n == "2" else []})
    assert recorder._run.upstream_plan == {"2": ("1",), "5": ()} and recorder._run.watched == frozenset({"1"})
    recorder.node_started("1")
    assert recorder._run.open_nodes["1"].detail == "full"
    assert recorder._run.open_nodes["1"].chained  # nodes follow one another: their spans chain
    recorder.node_finished("1")
    recorder.node_started("5")
    assert recorder._run.open_nodes["5"].detail == "light"
    recorder.node_finished("5")
    assert set(recorder._run.full_results) == {"1"}
    memory = recorder.upstream_memory(2)
    assert memory["memory_scope"]["measured_node_ids"] == ["1"] and memory["memory"] is not None
    recorder.end_run("success")


def test_open_nodes_end_as_errors_unless_the_run_was_interrupted(recorder):
    for status, expected in (("success", "error"), ("error", "error"), ("interrupted", "interrupted")):
        recorder.begin_run("p", PROMPT)
        recorder.node_started("1")
        assert recorder.end_run(status).nodes[0].status == expected


def test_cached_ids_from_comfyui_add_rows_only_for_nodes_not_seen(recorder):
    recorder.begin_run("p", PROMPT)
    recorder.node_started("1")
    recorder.node_finished("1")
    recorder.node_started("2")  # still open at the end
    report = recorder.end_run("success", cached_node_ids=[1, "2", 5])
    assert [(n.node_id, n.status, n.cached) for n in report.nodes] == [
        ("1", "executed", False),
        ("5", "cached", True),
        ("2", "error", False),
    ]
    recorder.profile_enabled = False
    recorder.begin_run("q", PROMPT)
    assert recorder.end_run("success", cached_node_ids=["5"]).nodes == ()


def test_the_report_carries_the_runs_times_reason_error_and_workflow(clock, tmp_path):
    store = RunStore(str(tmp_path))
    recorder = RunRecorder(store, probes=fake_probes())
    recorder.missing_seams = ["a seam"]
    assert recorder.end_run("success") is None  # no run
    recorder.begin_run(7, PROMPT)
    clock.advance(2.5)
    error = {"node_id": "1"}
    workflow = {"name": "demo", "id": "w"}
    report = recorder.end_run("error", error=error, reason="why it ended", workflow=workflow)
    assert report.prompt_id == "7" and report.status == "error"
    assert report.started_unix_s == 1_700_000_000.0
    assert report.finished_unix_s == pytest.approx(1_700_000_002.5) and report.duration_s == pytest.approx(2.5)
    assert report.error == {"node_id": "1"} and report.error is not error
    assert report.workflow == workflow and report.workflow is not workflow
    assert report.monitor_errors == ("why it ended",) and report.missing_seams == ("a seam",)
    assert report.input_changes["first_run"] is True
    plain = recorder.begin_run("8") or recorder.end_run("success", error={}, workflow={})
    assert plain.error is None and plain.workflow is None


def test_a_node_without_a_gpu_says_so_and_one_with_a_gpu_is_read_at_the_end(clock):
    no_gpu = RunRecorder(RunStore(None), probes=fake_probes())
    no_gpu.begin_run("p", PROMPT)
    no_gpu.node_started("1")
    no_gpu.node_finished("1")
    row = no_gpu.end_run("success").nodes[0]
    assert row.gpu_time_unknown_reason == GPU_TIME_NO_CUDA and row.gpu_busy_unknown_reason == GPU_TIME_NO_CUDA
    probes = fake_probes("1 GPU")
    gpu = RunRecorder(RunStore(None), probes=probes)
    gpu.begin_run("p", PROMPT)
    gpu.node_started("1")
    probes.torch.launch(0, 0.125)
    gpu.node_finished("1")
    assert gpu._run.gpu_pending and gpu._run.busy_log.since_unix_s == pytest.approx(1_700_000_000.0 - 2.0)
    row = gpu.end_run("success").nodes[0]
    assert row.gpu_time_s == 0.125 and row.gpu_time_unknown_reason is None


def test_system_info_is_read_once_and_its_failure_noted(recorder):
    calls = []
    probes = recorder.probes
    real = probes.system_info
    probes.system_info = lambda: calls.append(1) or real()
    for prompt_id in ("a", "b"):
        recorder.begin_run(prompt_id)
        recorder.end_run("success")
    assert len(calls) == 1
    failing = RunRecorder(RunStore(None), probes=fake_probes())
    failing.probes.system_info = lambda: (_ for _ in ()).throw(RuntimeError("no info"))
    failing.begin_run("c")
    report = failing.end_run("success")
    assert report.system == {} and report.monitor_errors == (
        "system info unavailable: RuntimeError: no info",
    )


def test_each_probe_failure_is_noted_once(recorder):
    probes = recorder.probes
    probes.host.fail.add("cpu_pct")
    recorder.begin_run("p")
    recorder.node_started("1")
    recorder.node_finished("1")
    notes = recorder.end_run("success").monitor_errors
    assert notes == ("reading host.cpu_pct unavailable: OSError: fake failure in cpu_pct",)


class BrokenStore(RunStore):
    def add(self, report):
        raise OSError("disk full")

    def latest_run_of_workflow(self, workflow_name, other_than=None):
        raise RuntimeError("index gone")


def test_failures_around_the_run_are_noted_never_raised(monkeypatch):
    recorder = RunRecorder(BrokenStore(None), probes=fake_probes())
    monkeypatch.setattr(module, "snapshot", lambda prompt: 1 / 0)
    recorder.begin_run("p", PROMPT, upstream_walks={"Monitor": lambda g, n: []})
    monkeypatch.setattr(module, "watched_nodes", lambda plan: 1 / 0)
    recorder.begin_run("q", PROMPT, upstream_walks={"Monitor": lambda g, n: []})
    report = recorder.end_run("success", workflow={"name": "demo"})
    assert report.monitor_errors == (
        "prompt inputs not recorded: ZeroDivisionError: division by zero",
        "upstream nodes of monitors not found: ZeroDivisionError: division by zero",
        "changed inputs not compared: RuntimeError: index gone",
    )
    assert report.input_changes is None


def test_a_lookup_that_fails_leaves_the_node_unnamed_with_one_note(recorder):
    def lookup(node_id):
        raise KeyError(node_id)

    recorder.begin_run("p", PROMPT, node_lookup=lookup)
    for _ in range(2):
        recorder.node_started("9")
        recorder.node_finished("9")
    report = recorder.end_run("success")
    assert [(n.node_id, n.class_type, n.title) for n in report.nodes] == [("9", None, None)] * 2
    assert report.monitor_errors == ("node 9: class and title unknown: KeyError: '9'",)


def test_a_lookup_is_asked_once_per_node_within_the_node_bound(recorder, monkeypatch):
    asked = []
    monkeypatch.setattr(module, "MAX_NODES_PER_RUN", 4)
    recorder.begin_run("p", PROMPT, node_lookup=lambda n: asked.append(n) or ("X", "t"))
    for node_id in ("9", "9", "10"):
        recorder.node_finished(node_id)
    assert asked == ["9", "10"]  # the prompt's three nodes and "9" fill the bound
    assert recorder._run.node_info["9"] == ("X", "t") and "10" not in recorder._run.node_info
    recorder.node_finished("10")
    assert asked == ["9", "10", "10"]
    rows = recorder.end_run("success").nodes
    assert [(n.node_id, n.class_type) for n in rows] == [("9", "X"), ("9", "X"), ("10", "X"), ("10", "X")]


def test_a_node_past_the_limit_leaves_the_gpu_time_of_the_last_row_alone(monkeypatch, clock):
    monkeypatch.setattr(module, "MAX_NODES_PER_RUN", 2)
    probes = fake_probes("1 GPU")
    recorder = RunRecorder(RunStore(None), probes=probes)
    recorder.begin_run("p", PROMPT)
    for node_id, gpu_s in (("1", 0.125), ("2", 0.25), ("5", 0.5)):
        recorder.node_started(node_id)
        probes.torch.launch(0, gpu_s)
        recorder.node_finished(node_id)
    report = recorder.end_run("success")
    assert [(n.node_id, n.gpu_time_s) for n in report.nodes] == [("1", 0.125), ("2", 0.25)]

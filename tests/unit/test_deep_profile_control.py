"""The deep profile's switch and controller with fakes (no torch.profiler): what each call
answers, which earlier run is the plain baseline, and the preload thread."""

from __future__ import annotations

import sys
import types

from monitors.deep_profile import control
from monitors.deep_profile.control import DeepProfileController, DeepProfileSwitch, last_plain_run


class Store:
    def __init__(self, rows):
        self.rows, self.reports_dir = rows, None

    def summaries(self):
        return list(self.rows)


def row(prompt_id, workflow="demo", status="success", step_kinds=(), duration_s=1.0):
    return {
        "prompt_id": prompt_id,
        "workflow_name": workflow,
        "status": status,
        "step_kinds": step_kinds,
        "duration_s": duration_s,
    }


def test_the_baseline_is_the_newest_plain_successful_run_of_the_same_workflow():
    store = Store(
        [
            row("now"),  # the deep-profiled prompt itself
            row("other", workflow="another"),
            row("failed", status="error"),
            row("deep", step_kinds=("lora", "deep_profile")),
            row("plain", step_kinds=None, duration_s=2.5),
            row("older"),
        ]
    )
    assert last_plain_run(store, "demo", "now") == {"prompt_id": "plain", "duration_s": 2.5}
    assert last_plain_run(store, "another", "now") == {"prompt_id": "other", "duration_s": 1.0}
    assert last_plain_run(store, "demo", "plain") == {"prompt_id": "now", "duration_s": 1.0}
    assert last_plain_run(Store([row("a", status="error")]), "demo", "x") is None


def test_no_baseline_without_a_workflow_name_or_a_store():
    nameless = Store([row("a", workflow=None), row("b", workflow="")])
    assert last_plain_run(nameless, None, "x") is None
    assert last_plain_run(nameless, "", "x") is None
    assert last_plain_run(None, "demo", "x") is None


def test_take_answers_false_when_not_armed():
    switch = DeepProfileSwitch(environ={})
    assert switch.take() is False
    switch.set(True)
    assert switch.take() is True and switch.take() is False


def test_preload_runs_on_a_daemon_thread_and_survives_a_failed_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch._dynamo", types.ModuleType("torch._dynamo"))
    thread = control.preload_profiler()
    thread.join()
    assert thread.daemon and thread.name == "pipeline-monitor-profiler-preload"
    monkeypatch.setitem(sys.modules, "torch._dynamo", None)  # import fails: logged, not raised
    failed = []
    monkeypatch.setattr("threading.excepthook", lambda args: failed.append(args))
    control.preload_profiler().join()
    assert failed == []


class FakeProfiler:
    def __init__(self, cuda):
        self.cuda, self.stopped = cuda, False

    def start(self):
        pass

    def stop(self):
        self.stopped = True

    def events(self):
        return []


class Recorder:
    def __init__(self, store=None):
        self.store, self.steps = store, []

    def add_step(self, step):
        self.steps.append(step)
        return True


def test_the_controller_answers_whether_it_profiled():
    controller = DeepProfileController(DeepProfileSwitch(environ={}), profiler_factory=FakeProfiler)
    recorder = Recorder(Store([row("p0", duration_s=2.0)]))
    assert controller.prompt_started("p1", cuda=False) is False
    assert controller.prompt_finished(recorder, "demo") is False and recorder.steps == []
    controller.switch.set(True)
    assert controller.prompt_started("p2", cuda=False, node_lookup=lambda node_id: ("KSampler", None)) is True
    assert controller.state() == {"armed": False, "active_prompt_id": "p2", "last_prompt_id": "p2"}
    controller.node_started("1")
    controller.node_finished("1")
    assert controller.prompt_finished(recorder, "demo") is True
    (step,) = recorder.steps
    assert step.kind == "deep_profile" and step.details["baseline_prompt_id"] == "p0"
    assert controller.active is None and controller.prompt_finished(recorder, "demo") is False


def test_a_prompt_that_never_ended_is_stopped_by_the_next():
    controller = DeepProfileController(DeepProfileSwitch(environ={}), profiler_factory=FakeProfiler)
    controller.switch.set(True)
    controller.prompt_started("p1", cuda=False)
    first = controller.active._profiler
    assert controller.prompt_started("p2", cuda=False) is False
    assert first.stopped and controller.active is None

"""Steps finished after the prompt (monitors/engine/deferred_steps.py), with fakes: a job starts
only after its prompt ended and while the executor is idle, the run is stored pending then again
complete (listeners and Prometheus told at completion), and a failed prompt, a failing job or a
full queue never loses a step."""

from __future__ import annotations

import threading
import types

import jsonschema
import pytest

from monitors.engine import deferred_steps
from monitors.engine.deferred_steps import DeferredSteps
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.exporters import prometheus
from monitors.probes.fake import fake_probes
from monitors.report import StepReport
from tests.unit.test_report_store import SCHEMA

PROMPT = {"5": {"class_type": "PipelineMonitorLora", "inputs": {}}}


class Gate:
    """A fake executor: busy until opened; counts how often a job asked."""

    def __init__(self, busy: bool = False) -> None:
        self.is_busy, self.asked = busy, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.is_busy


@pytest.fixture
def deferred(monkeypatch):
    gate = Gate()
    steps = DeferredSteps(busy=gate, poll_s=0.001)
    monkeypatch.setattr(deferred_steps, "DEFERRED", steps)
    return steps, gate


@pytest.fixture
def recorder(tmp_path):
    store = RunStore(str(tmp_path))
    return RunRecorder(store, probes=fake_probes("no GPU"))


def pending_step(steps: DeferredSteps, prompt_id: str, log: list, fail: bool = False) -> StepReport:
    def work():
        log.append("slice 1")
        yield
        log.append("slice 2")
        if fail:
            raise RuntimeError("broken")
        return StepReport("lora", "5", {"n_loras": 1, "success": True}, {"deferred": {"job_id": job_id}})

    job_id = steps.submit(prompt_id, work)
    return StepReport("lora", "5", {"n_loras": 1, "success": None}, {"deferred": {"job_id": job_id}}, pending=True)


def run(recorder, steps, prompt_id: str, log: list, status: str = "success", fail: bool = False):
    recorder.begin_run(prompt_id, PROMPT)
    recorder.node_started("5")
    recorder.add_step(pending_step(steps, prompt_id, log, fail))
    assert log == []  # nothing of the job ran inside the prompt
    recorder.node_finished("5")
    return recorder.end_run(status)


def test_a_pending_step_is_stored_incomplete_then_again_complete_once_the_job_ran(deferred, recorder):
    steps, _ = deferred
    seen = []
    recorder.store.add_listener(lambda data: seen.append((data["complete"], data["steps"][0]["pending"])))
    log = []
    report = run(recorder, steps, "p1", log)
    assert report.complete is False and report.steps[0].pending
    jsonschema.validate(report.to_dict(), SCHEMA)
    assert steps.wait_idle(10)
    assert log == ["slice 1", "slice 2"]
    stored = recorder.store.get("p1")
    assert stored["complete"] is True
    assert stored["steps"][0]["pending"] is False and stored["steps"][0]["summary"]["success"] is True
    assert stored["steps"][0]["node_id"] == "5" and stored["steps"][0]["unfinished_reason"] is None
    assert recorder.store.summary("p1")["complete"] is True
    jsonschema.validate(stored, SCHEMA)
    assert seen == [(False, True), (True, False)]  # the listeners heard the run twice


def test_a_job_yields_while_the_executor_is_busy_and_runs_once_it_is_idle(deferred, recorder):
    steps, gate = deferred
    gate.is_busy = True
    log = []
    run(recorder, steps, "p1", log)
    while gate.asked < 3:  # the worker looked, found the executor busy, and waits
        threading.Event().wait(0.001)
    assert log == [] and recorder.store.get("p1")["complete"] is False
    gate.is_busy = False
    assert steps.wait_idle(10)
    assert log == ["slice 1", "slice 2"]
    events = [event for event, *_ in steps.events]
    assert events[:2] == ["yielded", "started"] and events[-1] == "finished"


def test_a_failed_prompt_leaves_its_pending_step_unfinished_with_the_reason(deferred, recorder):
    steps, _ = deferred
    log = []
    report = run(recorder, steps, "p1", log, status="error")
    assert report.complete is True and steps.n_jobs() == 0
    step = report.steps[0]
    assert step.pending is False and "ended error" in step.unfinished_reason
    assert log == []  # the work never ran
    jsonschema.validate(report.to_dict(), SCHEMA)


def test_a_job_that_fails_leaves_the_step_unfinished_never_lost(deferred, recorder):
    steps, _ = deferred
    run(recorder, steps, "p1", [], fail=True)
    assert steps.wait_idle(10)
    stored = recorder.store.get("p1")
    assert stored["complete"] is True
    assert stored["steps"][0]["pending"] is False
    assert "failed: RuntimeError: broken" in stored["steps"][0]["unfinished_reason"]
    assert stored["steps"][0]["summary"]["n_loras"] == 1  # what the prompt made stays


def test_a_later_run_that_repeats_the_pending_step_from_the_cache_completes_too(deferred, recorder):
    steps, gate = deferred
    gate.is_busy = True
    run(recorder, steps, "p1", [])
    recorder.begin_run("p2", PROMPT)
    recorder.node_finished("5")  # cached: the pending step repeated
    second = recorder.end_run("success")
    assert second.complete is False and second.steps[0].cached
    gate.is_busy = False
    assert steps.wait_idle(10)
    for prompt_id in ("p1", "p2"):
        stored = recorder.store.get(prompt_id)
        assert stored["complete"] is True and stored["steps"][0]["summary"]["success"] is True
    assert recorder.store.get("p2")["steps"][0]["cached"] is True
    recorder.begin_run("p3", PROMPT)
    recorder.node_finished("5")  # the recorder still remembers the pending one: finished at the end
    third = recorder.end_run("success")
    assert third.complete is True and third.steps[0].summary["success"] is True


def test_a_full_queue_of_jobs_makes_the_node_work_in_the_prompt():
    steps = DeferredSteps(max_jobs=1)
    assert steps.submit("p", lambda: iter(())) is not None
    assert steps.submit("p", lambda: iter(())) is None


def test_a_job_whose_step_the_run_never_held_is_dropped(deferred, recorder):
    steps, _ = deferred
    recorder.begin_run("p1", PROMPT)
    steps.submit("p1", lambda: iter(()))
    recorder.end_run("success")
    assert steps.n_jobs() == 0


def test_prometheus_counts_a_pending_lora_step_when_it_completes(deferred, recorder):
    steps, gate = deferred
    runtime = types.SimpleNamespace(store=recorder.store, recorder=recorder, sampler=None)
    metrics = prometheus.FleetMetrics(lambda: runtime)
    gate.is_busy = True
    run(recorder, steps, "p1", [])
    metrics.observe(recorder.store.get("p1"))

    def lora_checks():
        return metrics.lora_steps._value.get()

    assert lora_checks() == 0  # the run is counted, its pending step not yet
    recorder.store.add_listener(metrics.observe)
    gate.is_busy = False
    assert steps.wait_idle(10)
    assert lora_checks() == 1
    metrics.observe(recorder.store.get("p1"))
    assert lora_checks() == 1  # once


def test_the_finished_step_is_handed_on_with_the_context_of_its_prompt(deferred, recorder):
    steps, _ = deferred
    handed = []
    steps.on_finished = lambda context, step: handed.append((context, step.summary["success"]))
    recorder.begin_run("p1", PROMPT)
    log = []

    def work():
        log.append("ran")
        yield
        return StepReport("lora", "5", {"success": True}, {"deferred": {"job_id": job_id}})

    job_id = steps.submit("p1", work, {"client_id": "page-1"})
    recorder.add_step(StepReport("lora", "5", {}, {"deferred": {"job_id": job_id}}, pending=True))
    recorder.end_run("success")
    assert steps.wait_idle(10)
    assert handed == [({"client_id": "page-1"}, True)]
    run(recorder, steps, "p2", [], fail=True)
    assert steps.wait_idle(10)
    assert len(handed) == 1  # a job that failed hands on nothing


def test_the_node_text_goes_to_the_client_that_queued_the_prompt():
    import importlib

    from tests.unit.test_routes import PACK, import_pack

    import_pack()
    deferred_work = importlib.import_module(f"{PACK}.nodes.deferred_work")
    report_mod = importlib.import_module(f"{PACK}.monitors.report")
    sent = []
    step = report_mod.StepReport("lora", "3", {"success": True, "n_loras": 1})
    send = lambda event, data, sid: sent.append((event, data, sid))  # noqa: E731
    assert deferred_work.send_step_text({"prompt_id": "p1", "client_id": "page-1"}, step, send)
    assert not deferred_work.send_step_text({"prompt_id": "p1", "client_id": None}, step, send)
    ((event, data, sid),) = sent
    assert event == "pipeline_monitor.step_text" and sid == "page-1"
    assert data["node_id"] == "3" and data["prompt_id"] == "p1" and data["kind"] == "lora"
    assert data["text"][0].splitlines()[0] == "applied: yes"


def test_cached_steps_finished_after_their_node_returned_get_their_text_again():
    """ComfyUI shows a cached node's text as it was returned (figures to follow): the run's end
    sends the finished text for those steps only."""
    import dataclasses
    import importlib

    from tests.unit.test_routes import PACK, import_pack

    import_pack()
    deferred_work = importlib.import_module(f"{PACK}.nodes.deferred_work")
    report_mod = importlib.import_module(f"{PACK}.monitors.report")
    step = report_mod.StepReport
    compared = {"status": "identical", "verdict": "identical"}
    steps = [
        step("tensor_compare", "11", compared, {"work": {"state": "done", "background": True}}, cached=True),
        step("tensor_compare", "12", compared, {"work": {"state": "done", "background": False}}, cached=True),
        step("tensor_compare", "13", compared, {"work": {"state": "done", "background": True}}),  # ran now
        step("lora", "3", {"success": True}, {"deferred": {"job_id": "deferred-1-1"}}, cached=True),
        step("lora", "4", {"success": True}, {"deferred": {"job_id": "deferred-2-1"}}, cached=True, pending=True),
        step("latent", "5", {}, {}, cached=True),
    ]
    report = types.SimpleNamespace(steps=steps)
    sent = []
    send = lambda event, data, sid: sent.append(data["node_id"])  # noqa: E731
    assert deferred_work.send_cached_step_texts(report, {"prompt_id": "p1", "client_id": "page-1"}, send) == 2
    assert sent == ["11", "3"]
    assert deferred_work.send_cached_step_texts(None, {"client_id": "page-1"}, send) == 0
    broken = dataclasses.replace(steps[0], details=None, kind="lora")  # nothing to read: not sent, no raise
    assert deferred_work.send_cached_step_texts(types.SimpleNamespace(steps=[broken]), {"client_id": "x"}, send) == 0


def test_a_report_read_back_with_pending_steps_says_they_never_finished(tmp_path):
    import json

    pending = {"kind": "lora", "node_id": "5", "summary": {}, "details": {}, "findings": [], "monitor_errors": [],
               "created_unix_s": 1.0, "cached": False, "pending": True, "unfinished_reason": None}
    data = {"prompt_id": "p9", "status": "success", "started_unix_s": 1.0, "steps": [pending], "complete": False}
    (tmp_path / "p9.json").write_text(json.dumps(data))
    store = RunStore(str(tmp_path))
    assert store.load_from_disk() == 1
    loaded = store.get("p9")
    assert loaded["complete"] is True and loaded["steps"][0]["pending"] is False
    assert "server stopped" in loaded["steps"][0]["unfinished_reason"]

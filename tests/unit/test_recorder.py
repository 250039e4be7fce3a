import json

import jsonschema
import pytest

from monitors.engine.prompt_info import node_info_from_prompt
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.probes.fake import GiB, fake_probes
from monitors.report import StepReport
from tests.unit.test_report_store import SCHEMA

PROMPT = {
    "1": {"class_type": "UNETLoader", "inputs": {}, "_meta": {"title": "Load <b>model</b>"}},
    "2": {"class_type": "PipelineMonitorModels", "inputs": {"model": ["1", 0]}},
    "3": {"class_type": "SaveImage", "inputs": {}},
}


@pytest.fixture
def setup(tmp_path):
    probes = fake_probes("1 GPU")
    store = RunStore(str(tmp_path))
    return probes, store, RunRecorder(store, probes=probes)


def test_a_prompt_gives_a_report_with_every_node_timed_and_peaked(setup, tmp_path):
    probes, store, recorder = setup
    recorder.begin_run("abc", PROMPT)
    recorder.node_started("1")
    probes.host.set_rss(2 * GiB)
    probes.host.set_rss(1 * GiB)
    probes.torch.allocate(0, 3 * GiB)
    recorder.node_finished("1")
    assert recorder.node_profile("1").peak_rss_bytes == 2 * GiB
    recorder.node_started("2")
    assert recorder.add_step(StepReport("models", "2", {"n_objects": 1}))
    recorder.node_finished("2")
    recorder.node_finished("3")  # finish without start: cached
    report = recorder.end_run("success", cached_node_ids=["3", "4"])
    assert recorder.active_prompt_id is None
    rows = {n.node_id: n for n in report.nodes}
    assert rows["1"].class_type == "UNETLoader" and rows["1"].title == "Load <b>model</b>"
    assert rows["1"].duration_s >= 0 and rows["1"].peak_rss_bytes == 2 * GiB
    assert rows["1"].peak_rss_method == "kernel_hwm"
    assert rows["1"].gpu_peaks[0].peak_allocated_bytes == 3 * GiB
    assert rows["3"].cached and rows["3"].status == "cached" and rows["3"].duration_s is None
    assert rows["4"].cached and len(report.nodes) == 4  # cached upstream: only ComfyUI's list names it
    assert report.steps[0].kind == "models"
    assert report.peak_rss_bytes == 2 * GiB
    on_disk = json.loads((tmp_path / "abc.json").read_text())
    jsonschema.validate(on_disk, SCHEMA)
    assert store.summaries()[0]["prompt_id"] == "abc"


def test_failed_node_is_closed_with_the_run(setup):
    _, _, recorder = setup
    recorder.begin_run("abc", PROMPT)
    recorder.node_started("1")
    report = recorder.end_run("error", {"node_id": "1", "exception_type": "RuntimeError"})
    assert report.nodes[0].status == "error" and report.error["node_id"] == "1"
    interrupted = RunRecorder(RunStore(None), probes=fake_probes())
    interrupted.begin_run("x")
    interrupted.node_started("1")
    assert interrupted.end_run("interrupted").nodes[0].status == "interrupted"


def test_new_prompt_before_end_closes_the_previous_as_interrupted(setup):
    _, store, recorder = setup
    recorder.begin_run("first")
    recorder.begin_run("second")
    assert store.get("first")["status"] == "interrupted"
    assert recorder.active_prompt_id == "second"
    recorder.end_run("success")


def test_profile_switched_off_records_steps_but_no_nodes(setup):
    probes, store, _ = setup
    recorder = RunRecorder(store, probes=probes, profile_enabled=False)
    recorder.begin_run("abc")
    recorder.node_started("1")
    recorder.node_finished("1")
    recorder.add_step(StepReport("models", "2"))
    report = recorder.end_run("success")
    assert report.nodes == () and len(report.steps) == 1 and report.profile_enabled is False


def test_every_probe_raising_still_yields_a_report_with_reasons(setup):
    probes, store, recorder = setup
    probes.host.fail.add("*")
    probes.torch.fail.add("*")
    recorder.begin_run("abc", PROMPT)
    recorder.node_started("1")
    recorder.node_finished("1")
    report = recorder.end_run("success")
    assert report.status == "success"
    assert report.nodes[0].peak_rss_bytes is None and report.nodes[0].duration_s is not None
    assert any("host.process_rss_bytes" in e for e in report.monitor_errors)
    jsonschema.validate(store.get("abc"), SCHEMA)


def test_step_without_a_run_is_refused_and_steps_are_bounded(setup):
    _, _, recorder = setup
    assert recorder.add_step(StepReport("models", "1")) is False
    recorder.begin_run("abc")
    accepted = sum(recorder.add_step(StepReport("latent", str(i))) for i in range(600))
    report = recorder.end_run("success")
    assert accepted == len(report.steps) == 500
    assert any("steps dropped" in e for e in report.monitor_errors)


def test_node_info_ignores_malformed_prompts():
    assert node_info_from_prompt(None) == {}
    assert node_info_from_prompt({"1": "junk", "2": {"class_type": "X", "_meta": {"title": 5}}}) == {
        "2": ("X", None)
    }


def test_cached_monitor_node_shows_its_earlier_step(setup):
    _, _, recorder = setup
    recorder.begin_run("first", PROMPT)
    recorder.node_started("2")
    recorder.add_step(StepReport("models", "2", {"n_objects": 1}))
    recorder.node_finished("2")
    recorder.end_run("success")
    recorder.begin_run("second", PROMPT)
    recorder.node_finished("2")  # cached this time
    report = recorder.end_run("success")
    assert [(s.kind, s.cached, s.summary["n_objects"]) for s in report.steps] == [("models", True, 1)]
    recorder.begin_run("upstream", PROMPT)  # cached upstream of a cached output: only ComfyUI's list names it
    assert [s.cached for s in recorder.end_run("success", cached_node_ids=["2"]).steps] == [True]
    other = {"2": {"class_type": "SomethingElse", "inputs": {}}}
    recorder.begin_run("third", other)
    recorder.node_finished("2")
    assert recorder.end_run("success").steps == ()


def test_lazy_node_started_twice_keeps_one_span_and_leaks_none(setup):
    from monitors.engine.span import open_span_count

    _, _, recorder = setup
    recorder.begin_run("abc", PROMPT)
    recorder.node_started("1")
    recorder.node_started("1")  # a lazy node asking for more inputs starts again
    recorder.node_finished("1")
    report = recorder.end_run("success")
    assert len(report.nodes) == 1 and report.nodes[0].status == "executed"
    assert open_span_count() == 0


def test_expanded_nodes_are_named_through_the_lookup(setup):
    _, _, recorder = setup
    expanded = {"3.0.0.2": ("ImageInvert", None)}
    recorder.begin_run("abc", PROMPT, node_lookup=expanded.get)
    recorder.node_started("3.0.0.2")
    recorder.node_finished("3.0.0.2")
    recorder.node_finished("9.9")  # unknown to both: still recorded, unnamed
    rows = {n.node_id: n for n in recorder.end_run("success").nodes}
    assert rows["3.0.0.2"].class_type == "ImageInvert" and rows["9.9"].class_type is None

"""GPU time per node (issue 14): CUDA events recorded on the current stream at a node's start and
end, elapsed read once at the prompt's end, beside wall time. A fake torch backend stands in for
CUDA here: its launch() queues GPU time and returns at once, as a kernel launch does."""

import json

import jsonschema

from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.node_fields import GPU_TIME_NO_CUDA
from monitors.probes.fake import fake_probes
from tests.unit.test_report_store import SCHEMA


class CountingElapsed:
    """Wraps the fake backend's elapsed_s to see when elapsed times are read."""

    def __init__(self, torch_backend):
        self.calls = 0
        self._elapsed = torch_backend.elapsed_s
        torch_backend.elapsed_s = self

    def __call__(self, start, end):
        self.calls += 1
        return self._elapsed(start, end)


def _recorder(tmp_path, scenario="1 GPU"):
    probes = fake_probes(scenario)
    return RunRecorder(RunStore(str(tmp_path)), probes=probes), probes


def test_a_node_that_only_launches_kernels_shows_their_gpu_time(tmp_path):
    recorder, probes = _recorder(tmp_path)
    counter = CountingElapsed(probes.torch)
    recorder.begin_run("p", {"1": {"class_type": "Sampler"}, "2": {"class_type": "Decode"}})
    recorder.node_started("1")
    probes.torch.launch(0, 0.2)  # returns at once: the host moves on
    recorder.node_finished("1")
    recorder.node_started("2")
    recorder.node_finished("2")
    assert counter.calls == 0  # nothing waits for the GPU while the prompt runs
    report = recorder.end_run("success")
    rows = {n.node_id: n for n in report.nodes}
    assert rows["1"].gpu_time_s == 0.2 and rows["1"].gpu_time_unknown_reason is None
    assert rows["2"].gpu_time_s == 0.0
    assert counter.calls == 2  # once per node, at the prompt's end
    assert rows["1"].duration_s is not None  # wall time stays beside it
    jsonschema.validate(json.loads(json.dumps(report.to_dict())), SCHEMA)


def test_without_cuda_gpu_time_is_unknown_with_a_reason(tmp_path):
    recorder, _ = _recorder(tmp_path, "no GPU")
    recorder.begin_run("p", {"1": {"class_type": "EmptyImage"}})
    recorder.node_started("1")
    recorder.node_finished("1")
    recorder.node_finished("9")  # cached: never ran, no GPU time and no reason needed
    report = recorder.end_run("success")
    rows = {n.node_id: n for n in report.nodes}
    assert rows["1"].gpu_time_s is None and rows["1"].gpu_time_unknown_reason == GPU_TIME_NO_CUDA
    assert rows["9"].cached and rows["9"].gpu_time_s is None
    jsonschema.validate(json.loads(json.dumps(report.to_dict())), SCHEMA)


def test_cuda_initialised_during_a_node_says_so(tmp_path):
    recorder, probes = _recorder(tmp_path)
    devices = probes.torch.devices
    probes.torch.devices = []  # no CUDA yet at the node's start
    recorder.begin_run("p", {"1": {"class_type": "Loader"}})
    recorder.node_started("1")
    probes.torch.devices = devices
    recorder.node_finished("1")
    row = recorder.end_run("success").nodes[0]
    assert row.gpu_time_s is None and "initialised while this node ran" in row.gpu_time_unknown_reason


def test_unreadable_events_are_unknown_and_reported(tmp_path):
    recorder, probes = _recorder(tmp_path)
    recorder.begin_run("p", {"1": {"class_type": "Sampler"}})
    recorder.node_started("1")
    probes.torch.launch(0, 0.05)
    recorder.node_finished("1")
    probes.torch.fail.add("elapsed_s")
    report = recorder.end_run("success")
    row = report.nodes[0]
    assert row.gpu_time_s is None and "CUDA events" in row.gpu_time_unknown_reason
    assert any("torch.elapsed_s" in message for message in report.monitor_errors)


def test_an_interrupted_node_keeps_its_gpu_time(tmp_path):
    recorder, probes = _recorder(tmp_path)
    recorder.begin_run("p", {"1": {"class_type": "Sampler"}})
    recorder.node_started("1")
    probes.torch.launch(0, 0.5)
    report = recorder.end_run("interrupted")
    assert report.nodes[0].status == "interrupted" and report.nodes[0].gpu_time_s == 0.5


def test_html_report_shows_gpu_time_with_the_stream_caveat(tmp_path):
    from monitors.exporters.html import render_html
    from monitors.node_fields import GPU_TIME_CAVEAT

    recorder, probes = _recorder(tmp_path)
    recorder.begin_run("p", {"1": {"class_type": "Sampler"}})
    recorder.node_started("1")
    probes.torch.launch(0, 0.25)
    recorder.node_finished("1")
    page = render_html(recorder.end_run("success").to_dict())
    assert "GPU span" in page and "GPU busy" in page and "250 ms" in page
    assert GPU_TIME_CAVEAT.split(":")[0] in page and "idle time included" in page
    assert "an idle node shows about 0" in page

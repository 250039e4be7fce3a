"""GPU busy time per node from NVML utilization samples, beside the CUDA stream span: a node that
only waits shows ~0 busy while its stream span is its wall time; 200 ms of kernels show ~200 ms."""

from __future__ import annotations

import json

import jsonschema
import pytest

from monitors.engine.gpu_busy import SampleLog, busy_time, sampling_period_s
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.probes.fake import fake_probes
from tests.unit.fake_clock import FakeClock, install
from tests.unit.test_report_store import SCHEMA

PERIOD_S = 0.02  # the fake NVML's sampling period
UNIX_START_S = 1_700_000_000.0


def kernels(spans):
    """busy(t0, t1): seconds of [t0, t1) inside any (start, end) of `spans`."""
    return lambda t0, t1: sum(max(0.0, min(t1, b) - max(t0, a)) for a, b in spans)


@pytest.fixture
def clock(monkeypatch):
    return install(FakeClock(unix_start_s=UNIX_START_S), monkeypatch)


def run_three_nodes(tmp_path, clock, scenario="1 GPU"):
    """Node 1 launches 200 ms of kernels; node 2 waits 300 ms for nothing (a synchronising save);
    node 3 lasts 5 ms. NVML samples the whole prompt and a little after."""
    probes = fake_probes(scenario)
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    t0 = clock.time()
    busy = [(t0 + 0.05, t0 + 0.25)]
    if probes.nvml.devices:
        probes.nvml.sample_utilization(0, kernels(busy), t0 - 1.0, t0 + 2.0, PERIOD_S)
    recorder.begin_run(
        "p", {"1": {"class_type": "KSampler"}, "2": {"class_type": "SaveImage"}, "3": {"class_type": "Note"}}
    )
    recorder.node_started("1")
    clock.advance(0.3)
    probes.torch.launch(0, 0.2) if probes.torch.devices else None
    recorder.node_finished("1")
    recorder.node_started("2")
    clock.advance(0.3)
    probes.torch.launch(0, 0.3) if probes.torch.devices else None  # the stream span of a wait
    recorder.node_finished("2")
    recorder.node_started("3")
    clock.advance(0.005)
    recorder.node_finished("3")
    report = recorder.end_run("success")
    return {n.node_id: n for n in report.nodes}, report


def test_busy_time_is_work_and_the_stream_span_includes_idle(tmp_path, clock):
    rows, report = run_three_nodes(tmp_path, clock)
    assert rows["1"].gpu_busy_s == pytest.approx(0.2, abs=PERIOD_S)
    assert rows["2"].gpu_busy_s == pytest.approx(0.0, abs=PERIOD_S)  # waited: no work
    assert rows["2"].gpu_time_s == pytest.approx(0.3)  # its stream span: the wait, idle included
    assert rows["1"].gpu_busy_unknown_reason is None and rows["2"].gpu_busy_unknown_reason is None
    assert rows["3"].gpu_busy_s is None
    assert (
        rows["3"].gpu_busy_unknown_reason
        == "the node (0.005 s) is shorter than NVML's sampling period (0.020 s)"
    )
    jsonschema.validate(json.loads(json.dumps(report.to_dict())), SCHEMA)


def test_without_nvml_or_cuda_busy_time_is_unknown_with_a_reason(tmp_path, clock):
    rows, _ = run_three_nodes(tmp_path, clock, "NVML missing")
    assert rows["1"].gpu_busy_s is None and "no utilization samples" in rows["1"].gpu_busy_unknown_reason
    rows, _ = run_three_nodes(tmp_path, clock, "no GPU")
    assert (
        rows["1"].gpu_busy_s is None
        and rows["1"].gpu_busy_unknown_reason == rows["1"].gpu_time_unknown_reason
    )
    assert "no CUDA device" in rows["1"].gpu_busy_unknown_reason


def test_a_row_copied_before_the_prompt_ends_says_when_its_gpu_figures_come(tmp_path, clock):
    probes = fake_probes("1 GPU")
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    recorder.begin_run("p", {"1": {"class_type": "LoraLoader"}})
    recorder.node_started("1")
    clock.advance(0.1)
    recorder.node_finished("1")
    copied = recorder.node_profile("1")  # what a monitor step copies while the prompt runs
    assert copied.gpu_time_s is None and "read at the prompt's end" in copied.gpu_time_unknown_reason
    assert copied.gpu_busy_s is None and "read at the prompt's end" in copied.gpu_busy_unknown_reason
    recorder.end_run("success")


def test_the_arithmetic_of_partial_periods_and_the_reasons():
    samples = [(0.0, 0.0), (1.0, 50.0), (2.0, 100.0), (3.0, 0.0)]
    assert sampling_period_s(samples) == 1.0
    assert busy_time(samples, 0.5, 2.5) == (pytest.approx(0.5 * 0.5 + 1.0 * 1.0 + 0.0 * 0.5), None)
    assert busy_time(samples, 0.0, 3.0) == (pytest.approx(1.5), None)
    assert busy_time(samples[:1], 0.0, 3.0) == (None, "NVML gave fewer than two utilization samples")
    assert busy_time(samples, -0.5, 1.0)[1] == "NVML's samples no longer reach back to the node's start"
    assert busy_time(samples, 1.0, 3.5)[1] == "NVML had no sample after the node's end when it was read"
    assert busy_time(samples, 1.0, 1.5)[1].startswith("the node (0.500 s) is shorter")


def test_the_sample_log_keeps_each_sample_once_across_reads():
    probes = fake_probes("1 GPU")
    probes.nvml.sample_utilization(0, kernels([(0.0, 1.0)]), 0.0, 1.0, 0.25)
    log = SampleLog(-1.0)
    log.collect(probes, 0)
    probes.nvml.sample_utilization(0, kernels([]), 1.0, 2.0, 0.25)
    log.collect(probes, 0, force=True)
    log.collect(probes, 0, force=True)
    assert [s[0] for s in log.samples[0]] == [0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0]
    assert log.busy_s(0, 0.25, 2.0) == (pytest.approx(0.75), None)


class CountingSamples:
    def __init__(self, probes):
        self.calls, self._read = 0, probes.nvml.utilization_samples
        probes.nvml.utilization_samples = self

    def __call__(self, index, since):
        self.calls += 1
        return self._read(index, since)


def test_nodes_finishing_in_quick_succession_cost_one_nvml_call_not_one_each(tmp_path, clock):
    probes = fake_probes("1 GPU")
    counter = CountingSamples(probes)
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    recorder.begin_run("p", {str(i): {"class_type": "Node"} for i in range(10)})
    for i in range(10):
        recorder.node_started(str(i))
        clock.advance(0.1)
        recorder.node_finished(str(i))
    assert counter.calls == 1  # the first node's; the others fall within COLLECT_EVERY_S
    clock.advance(6.0)
    recorder.node_started("10")
    recorder.node_finished("10")
    assert counter.calls == 2
    recorder.end_run("success")
    assert counter.calls == 3  # always once more at the prompt's end

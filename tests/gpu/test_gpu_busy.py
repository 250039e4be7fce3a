"""GPU busy time from NVML's real utilization samples (nvmlDeviceGetSamples) beside the CUDA stream
span: a node that keeps the GPU busy has a busy figure, a node that only waits on the host has one
near zero while its stream span may be anything. Skipped without CUDA."""

from __future__ import annotations

import time

import pytest
import torch

from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.probes import Probes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
    ),
]

WINDOW_S = 1.5  # longer than NVML's sampling period (1/6 s to 1 s)


def _busy_for(seconds: float) -> None:
    x = torch.rand(2048, 2048, device="cuda:0")
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for _ in range(20):
            x = x @ x
            x = x / x.norm()
        torch.cuda.synchronize(0)


def test_busy_time_of_a_kernel_node_and_of_a_waiting_node(tmp_path):
    torch.zeros(1, device="cuda:0")
    torch.cuda.synchronize(0)
    probes = Probes()
    assert probes.nvml_device_count() >= 1, probes.nvml.unavailable_reason
    samples = probes.gpu_utilization_samples(0, time.time() - 5.0)
    assert samples is not None, probes.failures()
    assert all(isinstance(t, float) and isinstance(pct, float) for t, pct in samples)
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    recorder.begin_run("busy", {"1": {"class_type": "KSampler"}, "2": {"class_type": "SaveImage"}})
    recorder.node_started("1")
    _busy_for(WINDOW_S)
    recorder.node_finished("1")
    recorder.node_started("2")
    time.sleep(WINDOW_S)  # waits on the host: the GPU idles
    recorder.node_finished("2")
    time.sleep(WINDOW_S)  # NVML's next samples, after the last node's end
    rows = {n.node_id: n for n in recorder.end_run("success").nodes}
    kernel, idle = rows["1"], rows["2"]
    assert kernel.gpu_busy_unknown_reason is None and kernel.gpu_busy_s is not None, kernel
    assert idle.gpu_busy_unknown_reason is None and idle.gpu_busy_s is not None, idle
    assert kernel.gpu_busy_s > idle.gpu_busy_s  # one clock: NVML's samples of one device, busy vs idle
    assert kernel.gpu_time_s is not None and idle.gpu_time_s is not None

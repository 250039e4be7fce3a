"""The deep profile on a real CUDA device: a node that launches about 200 ms of kernels shows
about 200 ms of device time (against CUDA events around the same kernels), a node that only waits
shows none, and the wait for the kernels is counted as a host-device synchronisation. Skipped
without CUDA: the only CUDA call made then is is_available()."""

from __future__ import annotations

import logging
import time

import pytest
import torch

from monitors.deep_profile.session import DeepProfiler, build_step

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
    ),
]

log = logging.getLogger(__name__)
TARGET_S = 0.2


def matmuls_for(seconds: float, a: torch.Tensor) -> int:
    """How many `a @ a` keep the device busy for about `seconds` (calibrated with CUDA events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a @ a  # warm-up: cuBLAS handles and workspaces
    torch.cuda.synchronize()
    start.record()
    for _ in range(10):
        a @ a
    end.record()
    end.synchronize()
    return max(1, round(10 * seconds / (start.elapsed_time(end) / 1000)))


def test_kernel_time_lands_on_the_node_that_launched_it_and_waiting_shows_none():
    torch.zeros(1, device="cuda:0")  # CUDA initialised by the pipeline, as in ComfyUI
    a = torch.randn(4096, 4096, device="cuda:0")
    n_matmuls = matmuls_for(TARGET_S, a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    profiler = DeepProfiler("gpu", cuda=True).start()
    assert profiler.cuda and profiler.running
    profiler.node_started("1", "Kernels")
    start.record()
    for _ in range(n_matmuls):
        a @ a
    end.record()
    torch.cuda.synchronize()
    profiler.node_finished("1")
    profiler.node_started("2", "Wait")
    time.sleep(TARGET_S)
    profiler.node_finished("2")
    step = build_step(profiler, profiler.stop())
    reference_s = start.elapsed_time(end) / 1000
    rows = {r["node_id"]: r for r in step.details["nodes"]}
    kernels, waiting = rows["1"], rows["2"]
    log.warning(
        "deep profile on %s: kernels node device %.4f s (CUDA events %.4f s, wall %.4f s, busy %.1f %%, "
        "syncs %s, top %s); waiting node device %.6f s, wall %.4f s; %s device events in the trace, %s",
        torch.cuda.get_device_name(0),
        kernels["device_time_s"],
        reference_s,
        kernels["wall_s"],
        kernels["gpu_busy_pct"],
        kernels["n_syncs"],
        [o["name"] for o in kernels["top_ops"]],
        waiting["device_time_s"],
        waiting["wall_s"],
        step.details["trace"]["n_device_events"],
        step.details["unknown_reasons"],
    )
    assert step.details["activities"] == ["cpu", "cuda"] and step.monitor_errors == ()
    assert kernels["device_time_s"] == pytest.approx(reference_s, rel=0.1)
    assert kernels["device_time_s"] == pytest.approx(TARGET_S, rel=0.5)
    assert kernels["gpu_busy_pct"] == pytest.approx(
        100.0 * kernels["device_time_s"] / kernels["wall_s"], rel=0.05
    )
    assert kernels["n_syncs"] >= 1 and kernels["top_ops_by"] == "device"
    assert kernels["top_ops"][0]["name"] in ("aten::matmul", "aten::mm")
    assert waiting["device_time_s"] == pytest.approx(0.0, abs=0.005)
    assert waiting["gpu_busy_pct"] == pytest.approx(0.0, abs=2.5)

"""The process's device memory on a real CUDA device: memory allocated outside torch (as dynamic
VRAM's cuMem allocations are) is in NVML's per-process figure and in a node row's
peak_process_used_bytes, and not in torch's allocator peaks. Skipped without CUDA: the only CUDA call
made then is is_available()."""

from __future__ import annotations

import ctypes
import ctypes.util

import pytest
import torch

from monitors.engine.node_rows import node_profile_from_span
from monitors.engine.span import Span
from monitors.probes import DETAIL_LIGHT, Probes

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
    ),
]

MiB = 1024**2
OUTSIDE_BYTES = 1024 * MiB


def cudart():
    """The CUDA runtime this process already uses (torch's), for an allocation torch never sees."""
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12", ctypes.util.find_library("cudart")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    pytest.skip("no CUDA runtime library to call cudaMalloc with")


def test_memory_allocated_outside_torch_is_in_the_process_figure_not_in_torchs(request):
    torch.zeros(1, device="cuda:0")
    torch.cuda.synchronize(0)
    probes = Probes()  # the real backends: torch.cuda, NVML, comfy-aimdo where loaded
    reasons = probes.device_memory_unknown_reasons(0)
    if probes.process_device_memory(0)["process_used_bytes"] is None:
        pytest.skip(f"NVML has no per-process figure here: {reasons['process_used_bytes']}")
    runtime = cudart()
    pointer = ctypes.c_void_p()
    with Span("node", probes=probes, detail=DETAIL_LIGHT) as node:
        assert runtime.cudaMalloc(ctypes.byref(pointer), ctypes.c_size_t(OUTSIDE_BYTES)) == 0
        request.addfinalizer(lambda: runtime.cudaFree(pointer))
        runtime.cudaDeviceSynchronize()
    row = node_profile_from_span("1", "Node", None, "executed", node.result, 0.0, None, probes.device_memory_unknown_reasons)
    (peak,) = row.gpu_peaks
    assert peak.peak_allocated_above_start_bytes == 0  # torch saw nothing
    above = peak.peak_process_used_bytes - node.result.changes["cuda:0.process_used_bytes"].before
    assert above >= OUTSIDE_BYTES, (above, peak)

"""This process's device memory beside torch's counters (issue: dynamic VRAM hides the VRAM torch
cannot see): NVML's per-process figure and comfy-aimdo's own, through the probes, into each node
row's GPU peaks, the run summary and the report, each None with its reason where unknown."""

from __future__ import annotations

import sys
import types

import jsonschema
import pytest

from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.probes.aimdo import AimdoBackend
from monitors.probes.fake import GiB, fake_probes
from monitors.report import run_summary, to_jsonable
from tests.unit.test_report_store import SCHEMA

MiB = 1024**2


def test_a_light_snapshot_reads_both_figures_where_they_exist():
    probes = fake_probes("dynamic VRAM")
    probes.nvml.devices[0]["process_used_bytes"] = 3 * GiB
    probes.aimdo.used[0] = 2 * GiB
    (gpu,) = probes.snapshot("light").gpus
    assert (gpu.process_used_bytes, gpu.aimdo_used_bytes) == (3 * GiB, 2 * GiB)
    assert probes.device_memory_unknown_reasons(0) == {"process_used_bytes": None, "aimdo_used_bytes": None}


def test_each_unknown_figure_has_its_reason():
    probes = fake_probes("1 GPU")
    probes.nvml.devices[0]["process_used_bytes"] = None  # not in NVML's list (a container)
    (gpu,) = probes.snapshot("light").gpus
    assert (gpu.process_used_bytes, gpu.aimdo_used_bytes) == (None, None)
    reasons = probes.device_memory_unknown_reasons(0)
    assert "not among" in reasons["process_used_bytes"]
    assert reasons["aimdo_used_bytes"] == "comfy-aimdo is not loaded in this process (no dynamic VRAM)"
    no_nvml = fake_probes("NVML missing")
    assert no_nvml.snapshot("light").gpus[0].process_used_bytes is None
    assert no_nvml.device_memory_unknown_reasons(0)["process_used_bytes"] == "NVML unavailable (NVMLError_LibraryNotFound)"


@pytest.fixture
def aimdo_control(monkeypatch):
    """comfy-aimdo's control module as ComfyUI leaves it after initialising device 0."""
    control = types.ModuleType("comfy_aimdo.control")
    contexts = {0: 1234}

    def get_devctx(device_id):
        if device_id not in contexts:
            raise RuntimeError(f"comfy-aimdo device {device_id} is not initialized")
        return contexts[device_id]

    control.get_devctx = get_devctx
    control.lib = types.SimpleNamespace(get_total_vram_usage=lambda devctx: {1234: 5 * GiB}[devctx])
    monkeypatch.setitem(sys.modules, "comfy_aimdo.control", control)
    return control


def test_comfy_aimdo_is_read_only_where_comfyui_loaded_and_initialised_it(aimdo_control, monkeypatch):
    backend = AimdoBackend()
    assert backend.unavailable_reason() is None and backend.used_bytes(0) == 5 * GiB
    with pytest.raises(RuntimeError, match="not initialized"):
        backend.used_bytes(1)
    aimdo_control.lib = None
    assert backend.unavailable_reason() == "comfy-aimdo is loaded but not initialised (dynamic VRAM is off)"
    aimdo_control.lib = types.SimpleNamespace()
    assert "exposes no per-device VRAM usage" in backend.unavailable_reason()
    monkeypatch.delitem(sys.modules, "comfy_aimdo.control")
    assert backend.unavailable_reason() == "comfy-aimdo is not loaded in this process (no dynamic VRAM)"


def test_node_rows_and_the_run_carry_what_the_process_held_outside_torch(tmp_path):
    """Dynamic VRAM holds 6 GiB of weights outside torch while torch allocates 1 GiB: the node row
    says so beside its torch peak, and the run's highest figure is the 6 GiB, not the 1 GiB."""
    probes = fake_probes("dynamic VRAM")
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    probes.nvml.devices[0]["process_used_bytes"] = 700 * MiB
    recorder.begin_run("p", {"1": {"class_type": "KSampler"}, "2": {"class_type": "VAEDecode"}})
    recorder.node_started("1")
    probes.torch.allocate(0, 1 * GiB)
    probes.aimdo.used[0] = 6 * GiB
    probes.nvml.devices[0]["process_used_bytes"] = 7 * GiB + 700 * MiB
    recorder.node_finished("1")
    probes.aimdo.used[0] = 1 * GiB  # pages evicted for the decode
    probes.nvml.devices[0]["process_used_bytes"] = 2 * GiB
    recorder.node_started("2")
    recorder.node_finished("2")
    report = recorder.end_run("success")
    first, second = (row.gpu_peaks[0] for row in report.nodes)
    assert first.peak_allocated_bytes == 1 * GiB
    assert (first.peak_process_used_bytes, first.peak_aimdo_used_bytes) == (7 * GiB + 700 * MiB, 6 * GiB)
    assert (second.peak_process_used_bytes, second.peak_aimdo_used_bytes) == (2 * GiB, 1 * GiB)
    assert first.process_used_unknown_reason is None and first.aimdo_used_unknown_reason is None
    summary = run_summary(report.to_dict())
    assert summary["peak_process_used_bytes"] == 7 * GiB + 700 * MiB
    assert summary["peak_aimdo_used_bytes"] == 6 * GiB and summary["peak_gpu_allocated_bytes"] == 1 * GiB
    jsonschema.validate(to_jsonable(report.to_dict()), SCHEMA)


def test_without_dynamic_vram_the_row_says_why_its_figure_is_unknown(tmp_path):
    probes = fake_probes("1 GPU")
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    recorder.begin_run("p", {"1": {"class_type": "KSampler"}})
    recorder.node_started("1")
    recorder.node_finished("1")
    (row,) = recorder.end_run("success").nodes
    (peak,) = row.gpu_peaks
    assert peak.peak_process_used_bytes == 512 * MiB and peak.peak_aimdo_used_bytes is None
    assert peak.aimdo_used_unknown_reason == "comfy-aimdo is not loaded in this process (no dynamic VRAM)"


def test_nvml_reads_this_processs_entry_and_says_why_it_cannot(monkeypatch):
    from monitors.probes.nvml import NvmlBackend

    listed = []
    pynvml = types.ModuleType("pynvml")  # nvidia-ml-py's module, as the backend imports it
    pynvml.nvmlInit = lambda: None
    pynvml.nvmlDeviceGetHandleByIndex = lambda index: f"handle {index}"
    pynvml.nvmlDeviceGetComputeRunningProcesses = lambda handle: list(listed)
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)
    backend = NvmlBackend()
    listed[:] = [types.SimpleNamespace(pid=7, usedGpuMemory=100), types.SimpleNamespace(pid=42, usedGpuMemory=3 * GiB)]
    assert backend.process_used_bytes(0, 42) == 3 * GiB
    with pytest.raises(LookupError, match="pid 9.*not among the 2 NVML lists on device 0"):
        backend.process_used_bytes(0, 9)
    listed[:] = [types.SimpleNamespace(pid=42, usedGpuMemory=None)]
    with pytest.raises(ValueError, match="no per-process memory"):
        backend.process_used_bytes(0, 42)

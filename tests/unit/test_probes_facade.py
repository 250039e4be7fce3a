"""The probe facade (monitors/probes/__init__.py) over small stand-in backends: devices that torch
and NVML count differently, names and totals from whichever backend knows them, failed reads as
None, and what the GPU-time and reset calls answer."""

from __future__ import annotations

import torch

from monitors.probes import Probes


def failing(*args):
    raise RuntimeError("cannot read")


class Host:
    process_rss_bytes = staticmethod(lambda: 100)
    system_memory = staticmethod(lambda: {"total_bytes": 1000, "used_bytes": 400})
    cpu_pct = staticmethod(lambda: 5.0)
    reset_peak_rss = staticmethod(lambda: True)
    peak_rss_bytes = staticmethod(lambda: 150)
    cpu_count = staticmethod(lambda: 4)


class Torch:
    """One device in use by torch."""

    device_count = staticmethod(lambda: 1)
    allocator_backend = staticmethod(lambda: "native")
    memory = staticmethod(lambda index: {"allocated_bytes": 10 + index})
    device_name = staticmethod(lambda index: f"torch {index}")
    reset_peak = staticmethod(lambda index: True)
    current_device = staticmethod(lambda: 0)
    record_event = staticmethod(lambda index: f"event{index}")
    elapsed_s = staticmethod(lambda start, end: 0.75)


class Nvml:
    """Two devices seen by NVML."""

    def __init__(self, n=2):
        self.n = n

    def device_count(self):
        return self.n

    device_name = staticmethod(lambda index: f"nvml {index}")
    memory = staticmethod(lambda index: {"used_bytes": 1, "total_bytes": 80 + index})
    utilization_pct = staticmethod(lambda index: 50.0)
    temperature_c = staticmethod(lambda index: 60.0)
    power_w = staticmethod(lambda index: 300.0)


def test_host_peak_and_reset_answers():
    probes = Probes(host=Host(), torch_alloc=Torch(), nvml=Nvml())
    assert probes.peak_rss_bytes() == 150 and probes.reset_peak_rss() is True
    assert probes.reset_torch_peak(0) is True


def test_gpu_elapsed_only_between_marks_of_one_device():
    probes = Probes(host=Host(), torch_alloc=Torch(), nvml=Nvml())
    mark = probes.gpu_mark()
    assert mark == (0, "event0")
    assert probes.gpu_elapsed_s(mark, mark) == 0.75
    assert probes.gpu_elapsed_s(None, mark) is None and probes.gpu_elapsed_s(mark, None) is None
    assert probes.gpu_elapsed_s(mark, (1, "event1")) is None


def test_snapshot_reads_torch_only_for_its_devices_and_survives_a_failed_nvml_read():
    nvml = Nvml()
    nvml.memory = lambda index: failing() if index == 1 else {"used_bytes": 1, "total_bytes": 80}
    snapshot = Probes(host=Host(), torch_alloc=Torch(), nvml=nvml).snapshot()
    first, second = snapshot.gpus
    assert first.allocated_bytes == 10 and first.nvml_total_bytes == 80
    assert second.allocated_bytes is None  # torch has one device only
    assert second.nvml_used_bytes is None and second.name == "nvml 1"


def test_system_info_names_each_device_from_whichever_backend_knows_it():
    torch_two = Torch()
    torch_two.device_count = lambda: 2
    nvml = Nvml(1)
    info = Probes(host=Host(), torch_alloc=torch_two, nvml=nvml).system_info()
    assert info["gpus"] == [
        {"device": "cuda:0", "name": "nvml 0", "total_bytes": 80},
        {"device": "cuda:1", "name": "torch 1", "total_bytes": None},
    ]
    assert info["torch_version"] == torch.__version__ and info["ram_total_bytes"] == 1000
    nvml.device_name = failing
    assert Probes(host=Host(), torch_alloc=Torch(), nvml=nvml).system_info()["gpus"][0]["name"] == "torch 0"
    nameless = Nvml(2)
    nameless.device_name = failing
    names = [g["name"] for g in Probes(host=Host(), torch_alloc=Torch(), nvml=nameless).system_info()["gpus"]]
    assert names == ["torch 0", None]  # torch knows its one device only
    nvml_only = Probes(host=Host(), torch_alloc=Torch(), nvml=Nvml(2))
    nvml_only.torch.device_count = lambda: 0
    assert [g["name"] for g in nvml_only.system_info()["gpus"]] == ["nvml 0", "nvml 1"]


def test_system_info_without_system_memory():
    host = Host()
    host.system_memory = failing
    info = Probes(host=host, torch_alloc=Torch(), nvml=Nvml(0)).system_info()
    assert info["ram_total_bytes"] is None and info["gpus"] == [
        {"device": "cuda:0", "name": "torch 0", "total_bytes": None}
    ]

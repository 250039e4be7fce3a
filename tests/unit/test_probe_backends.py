"""The real GPU backends of the probe layer (NVML, torch's caching allocator) on a machine without
a GPU: each reads a stand-in `pynvml` module or `torch.cuda` namespace put in `sys.modules`, so
what they convert, cache and refuse is checked without a driver."""

from __future__ import annotations

import sys
import types

import pytest

from monitors.probes.nvml import NvmlBackend
from monitors.probes.torch_alloc import UNKNOWN_REASONS_KEY, TorchAllocatorBackend

GiB = 1024**3


class NotFound(Exception):
    pass


def fake_pynvml(n_devices=2, name=b"NVIDIA H100"):
    calls = []

    def handle(index):
        calls.append(index)
        return f"h{index}"

    def samples(handle, kind, since_us):
        calls.append((handle, kind, since_us))
        sample = types.SimpleNamespace(timeStamp=1_500_000, sampleValue=types.SimpleNamespace(uiVal=75))
        return 1, [sample]

    return types.SimpleNamespace(
        calls=calls,
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: n_devices,
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetName=lambda h: name,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=3.0 * GiB, total=80.0 * GiB),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=42),
        NVML_TEMPERATURE_GPU=7,
        nvmlDeviceGetTemperature=lambda h, sensor: 61 if (h, sensor) == ("h1", 7) else None,
        nvmlDeviceGetPowerUsage=lambda h: 312_500,
        nvmlDeviceGetSamples=samples,
        NVML_GPU_UTILIZATION_SAMPLES=5,
        NVMLError_NotFound=NotFound,
    )


def test_nvml_readings_converted(monkeypatch):
    fake = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    backend = NvmlBackend()
    assert backend.device_count() == 2 and backend.unavailable_reason is None
    assert backend.device_name(1) == "NVIDIA H100"
    assert backend.memory(1) == {"used_bytes": 3 * GiB, "total_bytes": 80 * GiB}
    assert type(backend.memory(1)["used_bytes"]) is int
    assert backend.utilization_pct(1) == 42.0 and type(backend.utilization_pct(1)) is float
    assert backend.temperature_c(1) == 61.0 and type(backend.temperature_c(1)) is float
    assert backend.power_w(1) == 312.5
    assert fake.calls == [1]  # one handle per device, kept
    assert backend.utilization_samples(0, -5.0) == [(1.5, 75.0)]
    assert fake.calls[-1] == ("h0", 5, 0)  # a time before the epoch asks from 0
    fake.nvmlDeviceGetName = lambda h: "plain str"
    assert backend.device_name(0) == "plain str"


def test_nvml_initialised_once(monkeypatch):
    inits = []
    fake = fake_pynvml()
    fake.nvmlInit = lambda: inits.append(1)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    backend = NvmlBackend()
    assert backend.device_count() == 2 and backend.device_count() == 2
    assert inits == [1]


def test_nvml_failing_to_start_is_not_retried(monkeypatch):
    inits = []

    def no_driver():
        inits.append(1)
        raise RuntimeError("no driver")

    fake = fake_pynvml()
    fake.nvmlInit = no_driver
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    backend = NvmlBackend()
    assert backend.device_count() == 0 and backend.device_count() == 0
    assert backend.unavailable_reason == "RuntimeError: no driver" and inits == [1]


class Event:
    def __init__(self, enable_timing=False):
        self.enable_timing, self.stream, self.synced = enable_timing, None, False

    def record(self, stream):
        self.stream = stream

    def synchronize(self):
        self.synced = True

    def elapsed_time(self, end):
        return 1500.0  # milliseconds


def fake_cuda(initialized=True, available=True, stats=None):
    resets = []
    return types.SimpleNamespace(
        resets=resets,
        is_initialized=lambda: initialized,
        is_available=lambda: available,
        device_count=lambda: 2,
        get_allocator_backend=lambda: "cudaMallocAsync",
        get_device_name=lambda index: f"GPU {index}",
        memory_stats=lambda index: dict(stats or {}),
        memory_allocated=lambda index: 1 * GiB + index,
        memory_reserved=lambda index: 2 * GiB + index,
        max_memory_allocated=lambda index: 3 * GiB + index,
        max_memory_reserved=lambda index: (_ for _ in ()).throw(RuntimeError("no peak")),
        get_per_process_memory_fraction=lambda index: 0.5,
        get_device_properties=lambda index: types.SimpleNamespace(total_memory=10 * GiB + 1),
        current_device=lambda: 1,
        current_stream=lambda index: f"stream{index}",
        Event=Event,
        reset_peak_memory_stats=resets.append,
    )


@pytest.fixture
def with_cuda(monkeypatch):
    def install(cuda):
        monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
        return cuda

    return install


def test_torch_readings_when_cuda_is_in_use(with_cuda):
    cuda = with_cuda(fake_cuda())
    backend = TorchAllocatorBackend()
    assert backend.device_count() == 2
    assert backend.allocator_backend() == "cudaMallocAsync"
    assert backend.device_name(1) == "GPU 1"
    assert backend.current_device() == 1
    assert backend.process_limit(1) == {"fraction": 0.5, "total_bytes": 10 * GiB + 1, "limit_bytes": 5 * GiB}
    event = backend.record_event(1)
    assert event.enable_timing is True and event.stream == "stream1"
    end = Event()
    assert backend.elapsed_s(event, end) == 1.5 and end.synced
    assert backend.reset_peak(1) is True and cuda.resets == [1]


def test_torch_memory_from_memory_stats_then_the_counters_each_alone(with_cuda):
    stats = {"allocated_bytes.all.current": 5.0, "reserved_bytes.all.peak": 9}
    with_cuda(fake_cuda(stats=stats))
    assert TorchAllocatorBackend().memory(1) == {
        "allocated_bytes": 5,
        "reserved_bytes": 2 * GiB + 1,
        "peak_allocated_bytes": 3 * GiB + 1,
        "peak_reserved_bytes": 9,
    }
    with_cuda(fake_cuda(stats={}))
    reading = TorchAllocatorBackend().memory(0)
    assert reading["peak_reserved_bytes"] is None and reading["reserved_bytes"] == 2 * GiB
    assert reading[UNKNOWN_REASONS_KEY] == {
        "reserved_bytes.all.peak": "not in memory_stats, <lambda>: RuntimeError: no peak"
    }


@pytest.mark.parametrize("initialized, available", [(False, True), (True, False)])
def test_torch_reads_nothing_before_cuda_is_in_use(with_cuda, initialized, available):
    with_cuda(fake_cuda(initialized, available))
    backend = TorchAllocatorBackend()
    assert backend.device_count() == 0 and backend.allocator_backend() is None
    assert backend.device_name(0) is None and backend.current_device() is None
    assert backend.record_event(0) is None and backend.reset_peak(0) is False
    with pytest.raises(RuntimeError, match="CUDA not initialised"):
        backend.memory(0)
    with pytest.raises(RuntimeError, match="CUDA not initialised"):
        backend.process_limit(0)


def test_torch_not_imported_reads_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    backend = TorchAllocatorBackend()
    assert backend.device_count() == 0 and "torch" not in sys.modules


def test_readings_are_frozen():
    from monitors.probes.readings import GpuReading, Snapshot

    gpu, snapshot = GpuReading(0), Snapshot(1.0, 2.0)
    with pytest.raises(AttributeError):
        gpu.allocated_bytes = 1
    with pytest.raises(AttributeError):
        snapshot.cpu_pct = 1.0

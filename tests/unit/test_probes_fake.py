"""The fake probe backends that every GPU and failure test stands on: each scenario's devices,
the readings a test drives (exact bytes, percentages, clocks), and the failures it injects."""

from __future__ import annotations

import pytest

from monitors.probes.fake import (
    SCENARIOS,
    FakeHost,
    FakeNvml,
    FakeTorchAllocator,
    GiB,
    fake_probes,
)

MiB = 1024**2


def test_gib_is_two_to_the_thirtieth():
    assert GiB == 1_073_741_824


def test_the_host_reads_and_its_high_water_mark_follows_rss_upward_only():
    host = FakeHost()
    assert host.name == "fake-host"
    assert host.process_rss_bytes() == 512 * MiB and host.peak_rss_bytes() == 512 * MiB
    assert host.system_memory() == {
        "total_bytes": 16 * GiB,
        "available_bytes": 12 * GiB,
        "used_bytes": 4 * GiB,
        "used_pct": 25.0,
    }
    assert host.cpu_pct() == 12.5 and host.cpu_count() == 2
    host.set_rss(2 * GiB)
    assert host.process_rss_bytes() == 2 * GiB and host.peak_rss_bytes() == 2 * GiB
    host.set_rss(1 * GiB)
    assert host.process_rss_bytes() == 1 * GiB and host.peak_rss_bytes() == 2 * GiB  # the peak stays
    assert host.reset_peak_rss() is True
    assert host.peak_rss_bytes() == 1 * GiB  # reset to what is resident now
    host.set_rss(1 * GiB)
    assert host.peak_rss_bytes() == 1 * GiB


def test_the_host_built_with_other_figures():
    host = FakeHost(rss_bytes=3 * MiB, ram_total_bytes=8 * GiB)
    assert host.process_rss_bytes() == 3 * MiB and host.peak_rss_bytes() == 3 * MiB
    assert host.system_memory()["available_bytes"] == 4 * GiB
    assert host.system_memory()["used_pct"] == 50.0


def test_the_host_refuses_a_peak_reset_without_clear_refs_and_keeps_its_peak():
    host = FakeHost(hwm_allowed=False)
    host.set_rss(2 * GiB)
    host.set_rss(1 * GiB)
    with pytest.raises(PermissionError, match="clear_refs refused"):
        host.reset_peak_rss()
    assert host.peak_rss_bytes() == 2 * GiB


@pytest.mark.parametrize(
    "method", ["process_rss_bytes", "system_memory", "cpu_pct", "reset_peak_rss", "peak_rss_bytes"]
)
def test_a_host_read_named_in_fail_raises_and_the_others_still_read(method):
    host = FakeHost()
    host.fail.add(method)
    with pytest.raises(OSError, match=f"fake failure in {method}"):
        getattr(host, method)()
    others = {"process_rss_bytes", "system_memory", "cpu_pct", "peak_rss_bytes"} - {method}
    for other in others:
        assert getattr(host, other)() is not None
    assert host.cpu_count() == 2  # never fails


def test_a_star_fails_every_host_read():
    host = FakeHost()
    host.fail.add("*")
    for method in ("process_rss_bytes", "system_memory", "cpu_pct", "reset_peak_rss", "peak_rss_bytes"):
        with pytest.raises(OSError):
            getattr(host, method)()


def test_the_allocator_counts_allocations_and_keeps_its_peaks():
    torch = FakeTorchAllocator(2)
    assert torch.name == "fake-torch" and torch.device_count() == 2 and torch.current_device() == 0
    assert torch.memory(1) == {
        "allocated_bytes": 0,
        "reserved_bytes": 0,
        "peak_allocated_bytes": 0,
        "peak_reserved_bytes": 0,
    }
    torch.allocate(1, 3 * GiB)
    torch.allocate(1, -2 * GiB)
    assert torch.memory(1) == {
        "allocated_bytes": 1 * GiB,
        "reserved_bytes": 3 * GiB,  # the cache keeps what it reserved
        "peak_allocated_bytes": 3 * GiB,
        "peak_reserved_bytes": 3 * GiB,
    }
    assert torch.memory(0)["allocated_bytes"] == 0  # the other device untouched
    torch.allocate(1, 1 * GiB)
    assert torch.memory(1)["reserved_bytes"] == 3 * GiB and torch.memory(1)["peak_allocated_bytes"] == 3 * GiB
    assert torch.reset_peak(1) is True
    assert torch.memory(1) == {
        "allocated_bytes": 2 * GiB,
        "reserved_bytes": 3 * GiB,
        "peak_allocated_bytes": 2 * GiB,
        "peak_reserved_bytes": 3 * GiB,
    }
    torch.allocate(1, 2 * GiB)
    assert torch.memory(1)["reserved_bytes"] == 4 * GiB and torch.memory(1)["peak_reserved_bytes"] == 4 * GiB


def test_a_reading_is_a_copy_of_the_counters():
    torch = FakeTorchAllocator(1)
    reading = torch.memory(0)
    reading["allocated_bytes"] = 99
    assert torch.memory(0)["allocated_bytes"] == 0


def test_the_allocator_without_devices():
    torch = FakeTorchAllocator()
    assert torch.device_count() == 0 and torch.current_device() is None
    assert torch.allocator_backend() is None
    assert torch.devices == [] and torch.gpu_clock_s == [] and torch.total_bytes == []


def test_the_async_allocator_keeps_no_peak_counters():
    torch = FakeTorchAllocator(1, backend="cudaMallocAsync")
    torch.allocate(0, GiB)
    assert torch.allocator_backend() == "cudaMallocAsync"
    assert torch.memory(0) == {
        "allocated_bytes": GiB,
        "reserved_bytes": GiB,
        "peak_allocated_bytes": None,
        "peak_reserved_bytes": None,
    }
    assert FakeTorchAllocator(1).allocator_backend() == "native"


def test_events_see_only_the_kernels_launched_before_them():
    torch = FakeTorchAllocator(2)
    start = torch.record_event(1)
    torch.launch(1, 0.25)
    torch.launch(0, 5.0)  # another device's queue
    middle = torch.record_event(1)
    torch.launch(1, 0.5)
    end = torch.record_event(1)
    assert start == ("fake-event", 1, 0.0) and middle == ("fake-event", 1, 0.25)
    assert torch.elapsed_s(start, middle) == pytest.approx(0.25)
    assert torch.elapsed_s(start, end) == pytest.approx(0.75)
    assert torch.elapsed_s(middle, end) == pytest.approx(0.5)
    assert torch.gpu_clock_s == [5.0, 0.75]


def test_the_process_limit_is_the_total_times_the_fraction():
    torch = FakeTorchAllocator(2)
    assert torch.process_limit(0) == {"fraction": 1.0, "total_bytes": 24 * GiB, "limit_bytes": 24 * GiB}
    torch.memory_fractions[1] = 0.5
    torch.total_bytes[1] = 10 * GiB
    assert torch.process_limit(1) == {"fraction": 0.5, "total_bytes": 10 * GiB, "limit_bytes": 5 * GiB}
    torch.memory_fractions[1] = 0.3
    assert torch.process_limit(1)["limit_bytes"] == int(10 * GiB * 0.3)
    assert torch.device_name(1) == "Fake GPU 1"


@pytest.mark.parametrize(
    "method, args",
    [
        ("device_count", ()),
        ("current_device", ()),
        ("record_event", (0,)),
        ("elapsed_s", (("fake-event", 0, 0.0), ("fake-event", 0, 1.0))),
        ("allocator_backend", ()),
        ("memory", (0,)),
        ("process_limit", (0,)),
        ("reset_peak", (0,)),
    ],
)
def test_an_allocator_read_named_in_fail_raises_and_a_star_fails_them_all(method, args):
    torch = FakeTorchAllocator(1)
    torch.fail.add(method)
    with pytest.raises(RuntimeError, match=f"fake failure in {method}"):
        getattr(torch, method)(*args)
    everything = FakeTorchAllocator(1)
    everything.fail.add("*")
    with pytest.raises(RuntimeError):
        getattr(everything, method)(*args)
    assert getattr(FakeTorchAllocator(1), method)(*args) is not None


def test_nvml_devices_and_their_readings():
    nvml = FakeNvml(2)
    assert nvml.name == "fake-nvml" and nvml.device_count() == 2 and nvml.unavailable_reason is None
    assert nvml.device_name(1) == "Fake GPU 1"
    assert nvml.memory(1) == {"used_bytes": 1 * GiB, "total_bytes": 24 * GiB}
    nvml.devices[1]["used_bytes"] = 7 * GiB
    nvml.devices[1]["utilization_pct"] = 80.0
    nvml.devices[1]["temperature_c"] = 71.0
    nvml.devices[1]["power_w"] = 250.0
    assert nvml.memory(1) == {"used_bytes": 7 * GiB, "total_bytes": 24 * GiB}
    assert (nvml.utilization_pct(1), nvml.temperature_c(1), nvml.power_w(1)) == (80.0, 71.0, 250.0)
    assert (nvml.utilization_pct(0), nvml.temperature_c(0), nvml.power_w(0)) == (0.0, 40.0, 60.0)
    assert FakeNvml(1, total_bytes=80 * GiB).memory(0)["total_bytes"] == 80 * GiB


def test_missing_nvml_counts_no_device_and_says_why():
    nvml = FakeNvml(1, missing=True)
    assert nvml.device_count() == 0 and nvml.unavailable_reason == "NVMLError_LibraryNotFound"
    assert len(nvml.devices) == 1  # the GPU is there, NVML cannot see it


def test_utilization_samples_one_per_period_each_closing_its_period():
    nvml = FakeNvml(2)
    busy = lambda t0, t1: max(0.0, min(t1, 0.15) - max(t0, 0.05))  # noqa: E731 (kernels in [0.05, 0.15))
    nvml.sample_utilization(1, busy, 0.0, 0.2, 0.05)
    assert nvml.utilization_log[1] == [
        (0.05, 0.0),
        (0.1, pytest.approx(100.0)),
        (0.15, pytest.approx(100.0)),
        (0.2, 0.0),
    ]
    assert nvml.utilization_log[0] == []
    assert nvml.utilization_samples(1, 0.1) == nvml.utilization_log[1][2:]  # strictly newer
    assert nvml.utilization_samples(1, 0.2) == []


def test_utilization_samples_default_period_and_a_half_busy_period():
    nvml = FakeNvml(1)
    nvml.sample_utilization(0, lambda t0, t1: (t1 - t0) / 2, 10.0, 10.1)
    assert [s[0] for s in nvml.utilization_log[0]] == [10.02, 10.04, 10.06, 10.08, 10.1]
    assert all(s[1] == pytest.approx(50.0) for s in nvml.utilization_log[0])


@pytest.mark.parametrize(
    "scenario, n_torch, n_nvml, backend, hwm",
    [
        ("no GPU", 0, 0, None, True),
        ("1 GPU", 1, 1, "native", True),
        ("2 GPUs", 2, 2, "native", True),
        ("NVML missing", 1, 0, "native", True),
        ("cudaMallocAsync", 1, 1, "cudaMallocAsync", True),
        ("no clear_refs", 0, 0, None, False),
    ],
)
def test_each_scenario_builds_its_devices(scenario, n_torch, n_nvml, backend, hwm):
    probes = fake_probes(scenario)
    assert probes.torch.device_count() == n_torch and probes.nvml.device_count() == n_nvml
    assert probes.allocator_backend() == backend
    assert probes.reset_peak_rss() is hwm
    assert isinstance(probes.host, FakeHost) and probes.host.hwm_allowed is hwm
    assert len(probes.nvml.devices) == n_torch  # NVML's own list: the GPUs there are


def test_the_default_scenario_has_no_gpu_and_every_scenario_is_listed():
    assert fake_probes().torch.device_count() == 0
    assert set(SCENARIOS) == {"no GPU", "1 GPU", "2 GPUs", "NVML missing", "cudaMallocAsync", "no clear_refs", "dynamic VRAM"}


def test_nvml_built_without_arguments_has_no_device_and_is_present():
    nvml = FakeNvml()
    assert nvml.devices == [] and nvml.utilization_log == [] and nvml.device_count() == 0
    assert nvml.missing is False and nvml.unavailable_reason is None


def test_sample_times_are_rounded_to_the_nanosecond_and_the_window_end_is_included():
    nvml = FakeNvml(1)
    nvml.sample_utilization(0, lambda t0, t1: 0.0, 6e-11, 0.02 + 6e-11)
    assert nvml.utilization_log[0] == [(0.02, 0.0)]
    # a window that ends within a nanosecond of a period's end still closes that period
    nvml.utilization_log[0].clear()
    nvml.sample_utilization(0, lambda t0, t1: 0.0, 0.0, 1.0 - 1e-9, 1.0)
    assert nvml.utilization_log[0] == [(1.0, 0.0)]

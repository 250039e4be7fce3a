import logging
import sys
import threading

import psutil
import pytest

from monitors.probes import Probes
from monitors.probes.fake import GiB, fake_probes
from monitors.probes.host import HostBackend, cpu_busy_pct
from monitors.probes.nvml import NvmlBackend
from monitors.probes.torch_alloc import TorchAllocatorBackend


def test_no_gpu_snapshot_has_host_values_and_no_gpus():
    snap = fake_probes("no GPU").snapshot()
    assert snap.process_rss_bytes == 512 * 1024**2
    assert snap.ram_total_bytes == 16 * GiB and snap.ram_used_pct == 25.0
    assert snap.cpu_pct == 12.5
    assert snap.gpus == ()
    assert not any(k.startswith("cuda:") for k in snap.metrics())


def test_two_gpus_reported_with_allocator_and_nvml_values():
    probes = fake_probes("2 GPUs")
    probes.torch.allocate(1, 3 * GiB)
    probes.nvml.devices[1]["utilization_pct"] = 87.0
    snap = probes.snapshot()
    assert [g.device for g in snap.gpus] == ["cuda:0", "cuda:1"]
    assert snap.gpus[1].allocated_bytes == 3 * GiB and snap.gpus[1].peak_allocated_bytes == 3 * GiB
    assert snap.gpus[1].utilization_pct == 87.0 and snap.gpus[1].name == "Fake GPU 1"
    assert snap.metrics()["cuda:1.allocated_bytes"] == 3 * GiB


def test_light_snapshot_skips_system_ram_cpu_and_nvml():
    snap = fake_probes("1 GPU").snapshot("light")
    assert snap.process_rss_bytes is not None and snap.ram_used_bytes is None and snap.cpu_pct is None
    assert snap.gpus[0].allocated_bytes == 0 and snap.gpus[0].utilization_pct is None


def test_nvml_missing_keeps_allocator_readings():
    snap = fake_probes("NVML missing").snapshot()
    assert len(snap.gpus) == 1
    assert snap.gpus[0].allocated_bytes == 0
    assert snap.gpus[0].nvml_used_bytes is None and snap.gpus[0].temperature_c is None


def test_cuda_malloc_async_has_no_peak_counters():
    probes = fake_probes("cudaMallocAsync")
    assert probes.allocator_backend() == "cudaMallocAsync"
    assert probes.snapshot().gpus[0].peak_allocated_bytes is None


def test_every_probe_raising_gives_none_and_one_logged_reason(caplog):
    probes = fake_probes("2 GPUs")
    probes.host.fail.add("*")
    probes.torch.fail.add("memory")
    caplog.set_level(logging.WARNING)
    for _ in range(3):
        snap = probes.snapshot()
    assert snap.process_rss_bytes is None and snap.ram_used_bytes is None and snap.cpu_pct is None
    assert snap.gpus[0].allocated_bytes is None
    assert probes.reset_peak_rss() is False and probes.peak_rss_bytes() is None
    failures = probes.failures()
    assert "host.process_rss_bytes" in failures and "OSError" in failures["host.process_rss_bytes"]
    rss_warnings = [r for r in caplog.records if "host.process_rss_bytes" in r.getMessage()]
    assert len(rss_warnings) == 1


def test_unreadable_proc_gives_none(tmp_path):
    host = HostBackend(
        proc_status=str(tmp_path / "missing"), proc_clear_refs=str(tmp_path / "nodir" / "clear_refs")
    )
    probes = Probes(host=host, torch_alloc=TorchAllocatorBackend(), nvml=fake_probes().nvml)
    assert probes.peak_rss_bytes() is None
    assert probes.reset_peak_rss() is False
    assert probes.process_rss_bytes() > 0  # psutil still works


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux-only")
def test_real_host_backend_reads_rss_and_hwm():
    host = HostBackend()
    rss = host.process_rss_bytes()
    assert rss > 10 * 1024**2
    assert host.peak_rss_bytes() >= rss * 0.9
    memory = host.system_memory()
    assert memory["total_bytes"] >= memory["available_bytes"] > 0


MEMINFO = (
    b"MemTotal:       24684092 kB\nMemFree:        20000000 kB\nMemAvailable:   22000004 kB\n"
    b"Buffers:          100000 kB\n"
)


def test_system_memory_from_meminfo_as_psutil_reports_it(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_bytes(MEMINFO)
    memory = HostBackend(proc_meminfo=str(meminfo)).system_memory()
    total, available = 24684092 * 1024, 22000004 * 1024
    assert memory == {
        "total_bytes": total,
        "available_bytes": available,
        "used_bytes": total - available,
        "used_pct": 10.9,  # 2684088 / 24684092 = 10.87 %, rounded to 0.1 as psutil does
    }


@pytest.mark.parametrize("content", [b"MemTotal:       24684092 kB\nMemFree:        20000000 kB\n", None])
def test_system_memory_falls_back_to_psutil_without_memavailable(tmp_path, content):
    meminfo = tmp_path / "meminfo"
    if content is not None:
        meminfo.write_bytes(content)
    memory = HostBackend(proc_meminfo=str(meminfo)).system_memory()
    real = psutil.virtual_memory()
    assert memory["total_bytes"] == real.total
    assert memory["used_bytes"] == memory["total_bytes"] - memory["available_bytes"]


def test_cpu_pct_is_psutils_figure_from_the_kept_open_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 10 50 800 40 0 5 3 0 0\ncpu0 100 10 50 800 40 0 5 3 0 0\n")
    host = HostBackend(proc_stat=str(stat))
    assert host.cpu_pct() == 0.0  # this thread's first reading, as psutil's
    with open(stat, "r+") as f:  # rewritten in place: the backend keeps the file open
        f.write("cpu  160 10 70 900 60 0 10 3 20 0\n")
    # growth: user 60 system 20 idle 100 iowait 20 softirq 5 guest 20 (already inside user);
    # total 225 - 20 = 205, busy 205 - 100 - 20 = 85: 41.46 %
    assert host.cpu_pct() == 41.5
    other = []
    thread = threading.Thread(target=lambda: other.append(host.cpu_pct()))
    thread.start()
    thread.join()
    assert other == [0.0]  # per thread, as psutil's: the sampler does not shorten a span's interval


def test_cpu_busy_pct_never_counts_a_field_going_backwards():
    before = [100, 0, 50, 800, 40, 0, 0, 0]
    after = [90, 0, 60, 810, 40, 0, 0, 0]  # a counter read lower (a CPU went offline)
    assert cpu_busy_pct(before, after) == 50.0
    assert cpu_busy_pct(after, after) == 0.0


def test_cpu_pct_falls_back_to_psutil_without_proc_stat(tmp_path):
    value = HostBackend(proc_stat=str(tmp_path / "missing")).cpu_pct()
    assert isinstance(value, float) and 0.0 <= value <= 100.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/stat is Linux-only")
def test_real_cpu_pct_agrees_with_psutil_over_the_same_stretch():
    host = HostBackend()
    host.cpu_pct()
    psutil.cpu_percent(interval=None)
    sum(i * i for i in range(2_000_000))  # some load on this thread
    ours, theirs = host.cpu_pct(), psutil.cpu_percent(interval=None)
    assert abs(ours - theirs) <= 5.0  # read a moment apart


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/meminfo is Linux-only")
def test_real_meminfo_agrees_with_psutil():
    memory = HostBackend().system_memory()
    real = psutil.virtual_memory()
    assert memory["total_bytes"] == real.total
    assert abs(memory["available_bytes"] - real.available) < 256 * 1024**2  # read moments apart


def test_torch_backend_never_initialises_cuda():
    torch = pytest.importorskip("torch")
    backend = TorchAllocatorBackend()
    was_initialised = torch.cuda.is_initialized()
    assert backend.device_count() == (torch.cuda.device_count() if was_initialised else 0)
    Probes(torch_alloc=backend, nvml=fake_probes().nvml).snapshot()
    assert torch.cuda.is_initialized() == was_initialised


def test_nvml_absent_is_one_log_line_not_an_error(monkeypatch, caplog):
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)  # pynvml not installed: a fake of the import
    caplog.set_level(logging.INFO)
    backend = NvmlBackend()
    assert backend.device_count() == 0 and backend.device_count() == 0
    assert "ImportError" in backend.unavailable_reason
    assert len([r for r in caplog.records if "NVML unavailable" in r.getMessage()]) == 1


def test_system_info_lists_gpus_and_allocator():
    info = fake_probes("2 GPUs").system_info()
    assert [g["device"] for g in info["gpus"]] == ["cuda:0", "cuda:1"]
    assert info["allocator_backend"] == "native" and info["cpu_count"] == 2
    assert fake_probes("no GPU").system_info()["gpus"] == []


def test_a_written_snapshot_calls_nothing_a_peak_that_is_not_its_own():
    """torch's peak counters in an end snapshot are the allocator's since the last reset (each node
    resets them): not the span's peak, so written snapshots leave them out."""
    probes = fake_probes("1 GPU")
    probes.torch.allocate(0, 3 * GiB)
    probes.torch.devices[0]["allocated_bytes"] = GiB
    data = probes.snapshot().to_dict()
    assert data["gpus"][0]["allocated_bytes"] == GiB and data["gpus"][0]["device"] == "cuda:0"
    assert not any(key.startswith("peak_") for key in data["gpus"][0])


def test_the_reserved_peak_comes_from_the_allocator_counter_not_only_samples():
    """A reserved spike between two readings (just before an out-of-memory) is kept: the span reads
    max_memory_reserved's counter at its stop."""
    from monitors.engine.span import METHOD_ALLOCATOR_PEAK, Span

    probes = fake_probes("1 GPU")
    span = Span("spike", probes=probes).start()
    probes.torch.allocate(0, 6 * GiB)  # no reading sees this moment
    probes.torch.devices[0]["allocated_bytes"] = 0
    probes.torch.devices[0]["reserved_bytes"] = GiB
    result = span.stop()
    peak = result.peaks["cuda:0.reserved_bytes"]
    assert peak.value == 6 * GiB and peak.method == METHOD_ALLOCATOR_PEAK
    assert result.end.gpus[0].reserved_bytes == GiB


def test_nvml_utilization_samples_are_read_in_unix_seconds_and_none_newer_is_empty(monkeypatch):
    """nvmlDeviceGetSamples through a stand-in pynvml: microsecond stamps become seconds, the
    percentage comes from the value union's uiVal, and NVML's NotFound (nothing newer) is []."""
    import types

    class NotFound(Exception):
        pass

    calls = []

    def get_samples(handle, kind, since_us):
        calls.append((handle, kind, since_us))
        if since_us >= 3_000_000:
            raise NotFound()
        sample = lambda stamp_us, pct: types.SimpleNamespace(  # noqa: E731
            timeStamp=stamp_us, sampleValue=types.SimpleNamespace(uiVal=pct)
        )
        return 1, [sample(2_000_000, 40), sample(2_500_000, 100)]

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda index: f"handle{index}",
        nvmlDeviceGetSamples=get_samples,
        NVML_GPU_UTILIZATION_SAMPLES=1,
        NVMLError_NotFound=NotFound,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    backend = NvmlBackend()
    assert backend.utilization_samples(0, 1.5) == [(2.0, 40.0), (2.5, 100.0)]
    assert calls[-1] == ("handle0", 1, 1_500_000)
    assert backend.utilization_samples(0, 3.0) == []


def test_the_process_limit_is_the_fraction_of_the_devices_total_or_unknown_with_why():
    import types

    cuda = types.SimpleNamespace(
        get_per_process_memory_fraction=lambda index: 0.25,
        get_device_properties=lambda index: types.SimpleNamespace(total_memory=80 * GiB),
    )

    class Backend(TorchAllocatorBackend):
        def _cuda(self):
            return cuda

    assert Backend().process_limit(0) == {"fraction": 0.25, "total_bytes": 80 * GiB, "limit_bytes": 20 * GiB}
    del cuda.get_per_process_memory_fraction  # an older torch
    probes = Probes(torch_alloc=Backend())
    assert probes.gpu_process_limit(0) is None
    assert "no torch.cuda.get_per_process_memory_fraction" in probes.failures()["torch.process_limit"]

"""Fake backends with named scenarios, for tests of every GPU and failure path on any machine.

probes = fake_probes("2 GPUs")
probes.torch.devices[0]["allocated_bytes"] = 3 * GiB   # drive readings from the test
"""

from __future__ import annotations

GiB = 1024**3


class FakeHost:
    name = "fake-host"

    def __init__(
        self, rss_bytes: int = 512 * 1024**2, ram_total_bytes: int = 16 * GiB, hwm_allowed: bool = True
    ):
        self.rss_bytes = rss_bytes
        self.ram_total_bytes = ram_total_bytes
        self.ram_used_bytes = 4 * GiB
        self.hwm_allowed = hwm_allowed
        self.hwm_bytes = rss_bytes
        self.fail: set[str] = set()  # method names that raise

    def _check(self, method: str):
        if method in self.fail or "*" in self.fail:
            raise OSError(f"fake failure in {method}")

    def set_rss(self, rss_bytes: int):
        """Move RSS; the high-water mark follows upward as the kernel's does."""
        self.rss_bytes = rss_bytes
        self.hwm_bytes = max(self.hwm_bytes, rss_bytes)

    def process_rss_bytes(self):
        self._check("process_rss_bytes")
        return self.rss_bytes

    def system_memory(self):
        self._check("system_memory")
        return {
            "total_bytes": self.ram_total_bytes,
            "available_bytes": self.ram_total_bytes - self.ram_used_bytes,
            "used_bytes": self.ram_used_bytes,
            "used_pct": 100.0 * self.ram_used_bytes / self.ram_total_bytes,
        }

    def cpu_pct(self):
        self._check("cpu_pct")
        return 12.5

    def cpu_count(self):
        return 2

    def reset_peak_rss(self):
        self._check("reset_peak_rss")
        if not self.hwm_allowed:
            raise PermissionError("clear_refs refused")
        self.hwm_bytes = self.rss_bytes
        return True

    def peak_rss_bytes(self):
        self._check("peak_rss_bytes")
        return self.hwm_bytes


class FakeTorchAllocator:
    name = "fake-torch"

    def __init__(self, n_devices: int = 0, backend: str = "native"):
        self.backend = backend
        self.devices = [
            {"allocated_bytes": 0, "reserved_bytes": 0, "peak_allocated_bytes": 0, "peak_reserved_bytes": 0}
            for _ in range(n_devices)
        ]
        self.gpu_clock_s = [0.0 for _ in range(n_devices)]  # where each device's queue has got to
        self.total_bytes = [24 * GiB for _ in range(n_devices)]
        self.memory_fractions = [1.0 for _ in range(n_devices)]  # set_per_process_memory_fraction
        self.fail: set[str] = set()

    def _check(self, method):
        if method in self.fail or "*" in self.fail:
            raise RuntimeError(f"fake failure in {method}")

    def allocate(self, index: int, n_bytes: int):
        dev = self.devices[index]
        dev["allocated_bytes"] += n_bytes
        dev["reserved_bytes"] = max(dev["reserved_bytes"], dev["allocated_bytes"])
        dev["peak_allocated_bytes"] = max(dev["peak_allocated_bytes"], dev["allocated_bytes"])
        dev["peak_reserved_bytes"] = max(dev["peak_reserved_bytes"], dev["reserved_bytes"])

    def launch(self, index: int, gpu_s: float):
        """Queue `gpu_s` seconds of kernels on device `index`: like a CUDA launch, it returns at
        once and only events recorded after it see the time pass."""
        self.gpu_clock_s[index] += gpu_s

    def device_count(self):
        self._check("device_count")
        return len(self.devices)

    def current_device(self):
        self._check("current_device")
        return 0 if self.devices else None

    def record_event(self, index):
        self._check("record_event")
        return ("fake-event", index, self.gpu_clock_s[index])

    def elapsed_s(self, start, end):
        self._check("elapsed_s")
        return end[2] - start[2]

    def allocator_backend(self):
        self._check("allocator_backend")
        return self.backend if self.devices else None

    def device_name(self, index):
        return f"Fake GPU {index}"

    def memory(self, index):
        self._check("memory")
        values = dict(self.devices[index])
        if self.backend == "cudaMallocAsync":  # the async allocator keeps no peak counters
            values["peak_allocated_bytes"] = None
            values["peak_reserved_bytes"] = None
        return values

    def process_limit(self, index):
        self._check("process_limit")
        total, fraction = self.total_bytes[index], self.memory_fractions[index]
        return {"fraction": fraction, "total_bytes": total, "limit_bytes": int(total * fraction)}

    def reset_peak(self, index):
        self._check("reset_peak")
        dev = self.devices[index]
        dev["peak_allocated_bytes"] = dev["allocated_bytes"]
        dev["peak_reserved_bytes"] = dev["reserved_bytes"]
        return True


class FakeNvml:
    name = "fake-nvml"

    def __init__(self, n_devices: int = 0, missing: bool = False, total_bytes: int = 24 * GiB):
        self.missing = missing
        self.devices = [
            {
                "used_bytes": 1 * GiB,
                "total_bytes": total_bytes,
                "utilization_pct": 0.0,
                "temperature_c": 40.0,
                "power_w": 60.0,
                # this process's memory as the driver counts it; None: not in NVML's process list
                "process_used_bytes": 512 * 1024**2,
            }
            for _ in range(n_devices)
        ]
        self.unavailable_reason = "NVMLError_LibraryNotFound" if missing else None
        self.utilization_log = [[] for _ in range(n_devices)]  # (unix s, pct) samples, as NVML keeps them

    def sample_utilization(self, index: int, busy, start_s: float, end_s: float, period_s: float = 0.02):
        """Write NVML's samples for [start_s, end_s): one every `period_s`, each the percentage of its
        period (the one it closes) that `busy(t0, t1)` (busy seconds within) says kernels ran."""
        t = start_s
        while t + period_s <= end_s + 1e-9:
            pct = 100.0 * busy(t, t + period_s) / period_s
            self.utilization_log[index].append((round(t + period_s, 9), pct))
            t += period_s

    def utilization_samples(self, index, since_unix_s):
        return [s for s in self.utilization_log[index] if s[0] > since_unix_s]

    def device_count(self):
        return 0 if self.missing else len(self.devices)

    def device_name(self, index):
        return f"Fake GPU {index}"

    def memory(self, index):
        dev = self.devices[index]
        return {"used_bytes": dev["used_bytes"], "total_bytes": dev["total_bytes"]}

    def process_used_bytes(self, index, pid):
        used = self.devices[index]["process_used_bytes"]
        if used is None:
            raise LookupError(f"this process (pid {pid}) is not among the 0 NVML lists on device {index}")
        return used

    def utilization_pct(self, index):
        return self.devices[index]["utilization_pct"]

    def temperature_c(self, index):
        return self.devices[index]["temperature_c"]

    def power_w(self, index):
        return self.devices[index]["power_w"]


class FakeAimdo:
    """comfy-aimdo's VRAM figure: `loaded` false is a process without dynamic VRAM."""

    name = "fake-aimdo"

    def __init__(self, n_devices: int = 0, loaded: bool = False):
        self.loaded = loaded
        self.used = [0] * n_devices

    def unavailable_reason(self):
        return None if self.loaded else "comfy-aimdo is not loaded in this process (no dynamic VRAM)"

    def used_bytes(self, index):
        return self.used[index]


SCENARIOS = {
    "no GPU": dict(gpus=0),
    "1 GPU": dict(gpus=1),
    "2 GPUs": dict(gpus=2),
    "NVML missing": dict(gpus=1, nvml_missing=True),
    "cudaMallocAsync": dict(gpus=1, allocator="cudaMallocAsync"),
    "no clear_refs": dict(gpus=0, hwm_allowed=False),
    "dynamic VRAM": dict(gpus=1, aimdo=True),
}


def fake_probes(scenario: str = "no GPU"):
    """Probes over fake backends for one named scenario (see SCENARIOS)."""
    from . import Probes

    spec = SCENARIOS[scenario]
    gpus = spec.get("gpus", 0)
    return Probes(
        host=FakeHost(hwm_allowed=spec.get("hwm_allowed", True)),
        torch_alloc=FakeTorchAllocator(gpus, backend=spec.get("allocator", "native")),
        nvml=FakeNvml(gpus, missing=spec.get("nvml_missing", False)),
        aimdo=FakeAimdo(gpus, loaded=spec.get("aimdo", False)),
    )

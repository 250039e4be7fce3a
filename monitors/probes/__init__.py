"""The one layer through which every backend read goes (psutil, /proc, torch.cuda, NVML).

Any failure becomes None plus a logged reason (once per reading), never an exception.
Tests replace the backends with fakes (see `fake.py`) through `set_probes`.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
import time

from ..lazy import Lazy
from .aimdo import AimdoBackend
from .host import HostBackend
from .nvml import NvmlBackend
from .readings import GpuReading, Snapshot
from .torch_alloc import UNKNOWN_REASONS_KEY, TorchAllocatorBackend

log = logging.getLogger(__name__)

__all__ = ["Probes", "Snapshot", "GpuReading", "get_probes", "set_probes"]

DETAIL_LIGHT = "light"  # RSS and allocator counters only: cheap enough for every node
DETAIL_FULL = "full"  # plus system RAM, CPU and NVML


class Probes:
    def __init__(self, host=None, torch_alloc=None, nvml=None, aimdo=None):
        self.host = host if host is not None else HostBackend()
        self.torch = torch_alloc if torch_alloc is not None else TorchAllocatorBackend()
        self.nvml = nvml if nvml is not None else NvmlBackend()
        self.aimdo = aimdo if aimdo is not None else AimdoBackend()
        self._failures: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- failure handling ---------------------------------------------------------------------
    def call(self, what: str, fn, *args):
        """Run one backend read; any exception gives None and is remembered under `what`."""
        try:
            return fn(*args)
        except Exception as exc:
            self._remember_failure(what, f"{type(exc).__name__}: {exc}")
            return None

    def _remember_failure(self, what: str, reason: str) -> None:
        with self._lock:
            first = what not in self._failures
            self._failures[what] = reason
        if first:
            log.warning("pipeline monitor: reading %s failed, reported as unknown (%s)", what, reason)

    def failures(self) -> dict[str, str]:
        """Reading name -> last failure reason, for reports."""
        with self._lock:
            return dict(self._failures)

    # -- host ---------------------------------------------------------------------------------
    def process_rss_bytes(self) -> int | None:
        return self.call("host.process_rss_bytes", self.host.process_rss_bytes)

    def system_memory(self) -> dict | None:
        return self.call("host.system_memory", self.host.system_memory)

    def cpu_pct(self) -> float | None:
        return self.call("host.cpu_pct", self.host.cpu_pct)

    def reset_peak_rss(self) -> bool:
        return bool(self.call("host.reset_peak_rss", self.host.reset_peak_rss))

    def peak_rss_bytes(self) -> int | None:
        return self.call("host.peak_rss_bytes", self.host.peak_rss_bytes)

    # -- torch allocator ----------------------------------------------------------------------
    def torch_device_count(self) -> int:
        return self.call("torch.device_count", self.torch.device_count) or 0

    def allocator_backend(self) -> str | None:
        return self.call("torch.allocator_backend", self.torch.allocator_backend)

    def torch_memory(self, index: int) -> dict | None:
        values = self.call("torch.memory", self.torch.memory, index)
        if values and UNKNOWN_REASONS_KEY in values:
            values = dict(values)
            for counter, reason in values.pop(UNKNOWN_REASONS_KEY).items():
                self._remember_failure(f"torch.memory.{counter}", reason)
        return values

    def gpu_process_limit(self, index: int) -> dict | None:
        """{fraction, total_bytes, limit_bytes}: the per-process memory fraction torch's allocator
        holds this process to on device `index`; None (with the reason kept) where unknown."""
        return self.call("torch.process_limit", self.torch.process_limit, index)

    def reset_torch_peak(self, index: int) -> bool:
        return bool(self.call("torch.reset_peak", self.torch.reset_peak, index))

    # -- GPU time -----------------------------------------------------------------------------
    def gpu_mark(self) -> tuple[int, object] | None:
        """(device index, event) recorded on the current device's current stream; None where this
        process has no CUDA device in use (CUDA is never initialised for this)."""
        current_device = getattr(self.torch, "current_device", None)  # backends without GPU time
        index = None if current_device is None else self.call("torch.current_device", current_device)
        if index is None:
            return None
        event = self.call("torch.record_event", self.torch.record_event, index)
        return None if event is None else (index, event)

    def gpu_elapsed_s(self, start, end) -> float | None:
        """GPU seconds between two gpu_mark() results of one device; None if either is missing."""
        if start is None or end is None or start[0] != end[0]:
            return None
        return self.call("torch.elapsed_s", self.torch.elapsed_s, start[1], end[1])

    # -- NVML ---------------------------------------------------------------------------------
    def nvml_device_count(self) -> int:
        return self.call("nvml.device_count", self.nvml.device_count) or 0

    def gpu_count(self) -> int:
        return max(self.torch_device_count(), self.nvml_device_count())

    def gpu_utilization_samples(self, index: int, since_unix_s: float) -> list[tuple[float, float]] | None:
        """NVML utilization samples of device `index` newer than `since_unix_s` ((unix s, pct)
        pairs, oldest first); None where NVML cannot say (no NVML, no such device, a failed read)."""
        if index >= self.nvml_device_count():
            return None
        samples = self.call("nvml.utilization_samples", self.nvml.utilization_samples, index, since_unix_s)
        return None if samples is None else sorted(samples)

    # -- this process's device memory beyond torch -------------------------------------------
    def process_device_memory(self, index: int) -> dict[str, int | None]:
        """{process_used_bytes, aimdo_used_bytes} of device `index`: NVML's per-process figure
        (where NVML sees the device) and comfy-aimdo's (where ComfyUI initialised it); None where
        unknown, the reason from device_memory_unknown_reasons."""
        values: dict[str, int | None] = {"process_used_bytes": None, "aimdo_used_bytes": None}
        read = getattr(self.nvml, "process_used_bytes", None)  # a backend without it reads nothing
        if read is not None and index < self.nvml_device_count():
            values["process_used_bytes"] = self.call("nvml.process_used_bytes", read, index, os.getpid())
        if self.aimdo.unavailable_reason() is None:
            values["aimdo_used_bytes"] = self.call("aimdo.used_bytes", self.aimdo.used_bytes, index)
        return values

    def device_memory_unknown_reasons(self, index: int) -> dict[str, str | None]:
        """Why each figure of process_device_memory(index) would be None (None: it is read)."""
        failures = self.failures()
        if not hasattr(self.nvml, "process_used_bytes"):
            process = f"the {getattr(self.nvml, 'name', 'NVML')} backend reads no per-process memory"
        elif index < self.nvml_device_count():
            process = failures.get("nvml.process_used_bytes")
        else:
            why = getattr(self.nvml, "unavailable_reason", None)
            process = f"NVML unavailable ({why})" if why else f"NVML does not see device {index}"
        aimdo = self.aimdo.unavailable_reason() or failures.get("aimdo.used_bytes")
        return {"process_used_bytes": process, "aimdo_used_bytes": aimdo}

    # -- snapshots ----------------------------------------------------------------------------
    def snapshot(self, detail: str = DETAIL_FULL) -> Snapshot:
        full = detail == DETAIL_FULL
        ram = (self.system_memory() or {}) if full else {}
        gpus = tuple(
            self._gpu_reading(i, full)
            for i in range(self.torch_device_count() if not full else self.gpu_count())
        )
        return Snapshot(
            monotonic_s=time.monotonic(),
            unix_time_s=time.time(),
            process_rss_bytes=self.process_rss_bytes(),
            ram_used_bytes=ram.get("used_bytes"),
            ram_available_bytes=ram.get("available_bytes"),
            ram_total_bytes=ram.get("total_bytes"),
            ram_used_pct=ram.get("used_pct"),
            cpu_pct=self.cpu_pct() if full else None,
            gpus=gpus,
        )

    def _gpu_reading(self, index: int, full: bool) -> GpuReading:
        torch_mem = (self.torch_memory(index) if index < self.torch_device_count() else None) or {}
        values = dict(torch_mem)
        values.update(self.process_device_memory(index))
        if full and index < self.nvml_device_count():
            nvml_mem = self.call("nvml.memory", self.nvml.memory, index) or {}
            values.update(
                name=self.call("nvml.device_name", self.nvml.device_name, index),
                nvml_used_bytes=nvml_mem.get("used_bytes"),
                nvml_total_bytes=nvml_mem.get("total_bytes"),
                utilization_pct=self.call("nvml.utilization_pct", self.nvml.utilization_pct, index),
                temperature_c=self.call("nvml.temperature_c", self.nvml.temperature_c, index),
                power_w=self.call("nvml.power_w", self.nvml.power_w, index),
            )
        return GpuReading(index=index, **values)

    def system_info(self) -> dict:
        torch = sys.modules.get("torch")
        gpus = []
        for i in range(self.gpu_count()):
            name = None
            if i < self.nvml_device_count():
                name = self.call("nvml.device_name", self.nvml.device_name, i)
            if name is None and i < self.torch_device_count():
                name = self.call("torch.device_name", self.torch.device_name, i)
            nvml_mem = self.call("nvml.memory", self.nvml.memory, i) if i < self.nvml_device_count() else None
            gpus.append(
                {"device": f"cuda:{i}", "name": name, "total_bytes": (nvml_mem or {}).get("total_bytes")}
            )
        ram = self.system_memory() or {}
        return {
            "platform": platform.platform(),
            "python_version": platform.python_version(),
            "torch_version": getattr(torch, "__version__", None) if torch is not None else None,
            "cpu_count": self.call("host.cpu_count", self.host.cpu_count),
            "ram_total_bytes": ram.get("total_bytes"),
            "allocator_backend": self.allocator_backend(),
            "gpus": gpus,
        }


_default: Lazy[Probes] = Lazy(Probes)
# The process-wide probes, created on first use (nothing is probed at import).
get_probes = _default.get
# Replace the process-wide probes (tests); returns the previous ones. None restores the default.
set_probes = _default.set

"""NVML readings through nvidia-ml-py's `pynvml` module. Handles are cached.

An absent library or driver gives one log line and no readings, never an error.
Methods may raise; the Probes facade turns any failure into None.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class NvmlBackend:
    name = "nvml"

    def __init__(self):
        self._nvml = None
        self._handles: dict[int, object] = {}
        self._unavailable_reason: str | None = None

    def _lib(self):
        if self._nvml is not None:
            return self._nvml
        if self._unavailable_reason is not None:
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as exc:  # library missing, no driver, no GPU
            self._unavailable_reason = f"{type(exc).__name__}: {exc}"
            log.info("NVML unavailable, GPU device readings disabled (%s)", self._unavailable_reason)
            return None
        self._nvml = pynvml
        return pynvml

    @property
    def unavailable_reason(self) -> str | None:
        return self._unavailable_reason

    def device_count(self) -> int:
        lib = self._lib()
        return 0 if lib is None else int(lib.nvmlDeviceGetCount())

    def _handle(self, index: int):
        if index not in self._handles:
            self._handles[index] = self._lib().nvmlDeviceGetHandleByIndex(index)
        return self._handles[index]

    def device_name(self, index: int) -> str:
        name = self._lib().nvmlDeviceGetName(self._handle(index))
        return name.decode() if isinstance(name, bytes) else str(name)

    def memory(self, index: int) -> dict:
        info = self._lib().nvmlDeviceGetMemoryInfo(self._handle(index))
        return {"used_bytes": int(info.used), "total_bytes": int(info.total)}

    def process_used_bytes(self, index: int, pid: int) -> int:
        """Device memory process `pid` holds on device `index`, as the driver counts it: every
        allocation (torch's cached blocks, cuMem allocations outside torch, the CUDA context).
        Raises where NVML cannot say: the process is not in its list (another PID namespace, or no
        CUDA context on that device yet) or the driver reports no per-process figure."""
        # One call: a CUDA context is a compute process (a light snapshot reads this at every node).
        processes = list(self._lib().nvmlDeviceGetComputeRunningProcesses(self._handle(index)))
        mine = {int(p.usedGpuMemory) if p.usedGpuMemory is not None else None for p in processes if p.pid == pid}
        if not mine:
            raise LookupError(
                f"this process (pid {pid}) is not among the {len(processes)} NVML lists on device {index}: "
                "another PID namespace (a container), or no CUDA context there yet"
            )
        if None in mine:
            raise ValueError("the driver reports no per-process memory here (usedGpuMemory not available)")
        return max(mine)

    def utilization_pct(self, index: int) -> float:
        return float(self._lib().nvmlDeviceGetUtilizationRates(self._handle(index)).gpu)

    def temperature_c(self, index: int) -> float:
        lib = self._lib()
        return float(lib.nvmlDeviceGetTemperature(self._handle(index), lib.NVML_TEMPERATURE_GPU))

    def power_w(self, index: int) -> float:
        return self._lib().nvmlDeviceGetPowerUsage(self._handle(index)) / 1000.0

    def utilization_samples(self, index: int, since_unix_s: float) -> list[tuple[float, float]]:
        """NVML's GPU utilization samples newer than `since_unix_s`: (unix seconds, percent of the
        sampling period during which kernels ran). The driver keeps a short ring of them; none newer
        is an empty list, not an error."""
        lib = self._lib()
        since_us = max(0, int(since_unix_s * 1_000_000))
        try:
            _value_type, samples = lib.nvmlDeviceGetSamples(
                self._handle(index), lib.NVML_GPU_UTILIZATION_SAMPLES, since_us
            )
        except lib.NVMLError_NotFound:
            return []
        return [(int(s.timeStamp) / 1_000_000, float(s.sampleValue.uiVal)) for s in samples]

"""Host readings: process RSS, system RAM, CPU, and the kernel's RSS high-water mark.

Methods may raise; the Probes facade turns any failure into None.
"""

from __future__ import annotations

import os

import psutil

PROC_STATUS = "/proc/self/status"
PROC_CLEAR_REFS = "/proc/self/clear_refs"
# Writing "5" to clear_refs resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
RESET_PEAK_RSS_COMMAND = "5"


class HostBackend:
    """Real backend: psutil and /proc."""

    name = "psutil+proc"

    def __init__(self, proc_status: str = PROC_STATUS, proc_clear_refs: str = PROC_CLEAR_REFS):
        self._proc_status = proc_status
        self._proc_clear_refs = proc_clear_refs
        self._process = psutil.Process(os.getpid())

    def process_rss_bytes(self) -> int:
        return int(self._process.memory_info().rss)

    def system_memory(self) -> dict:
        vm = psutil.virtual_memory()
        return {
            "total_bytes": int(vm.total),
            "available_bytes": int(vm.available),
            "used_bytes": int(vm.total - vm.available),
            "used_pct": float(vm.percent),
        }

    def cpu_pct(self) -> float:
        # Non-blocking: percent since the previous call (the first call reads 0.0).
        return float(psutil.cpu_percent(interval=None))

    def cpu_count(self) -> int | None:
        return psutil.cpu_count(logical=True)

    def reset_peak_rss(self) -> bool:
        with open(self._proc_clear_refs, "w") as f:
            f.write(RESET_PEAK_RSS_COMMAND)
        return True

    def peak_rss_bytes(self) -> int:
        """Kernel high-water mark of RSS (VmHWM) since process start or the last reset."""
        with open(self._proc_status) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    kib = int(line.split()[1])
                    return kib * 1024
        raise LookupError(f"VmHWM not found in {self._proc_status}")

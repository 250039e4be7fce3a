"""Host readings: process RSS, system RAM, CPU, and the kernel's RSS high-water mark.

Methods may raise; the Probes facade turns any failure into None.
"""

from __future__ import annotations

import os
import threading

import psutil

PROC_STATUS = "/proc/self/status"
PROC_CLEAR_REFS = "/proc/self/clear_refs"
PROC_STATM = "/proc/self/statm"
PROC_MEMINFO = "/proc/meminfo"
PROC_STAT = "/proc/stat"
# Writing "5" to clear_refs resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
RESET_PEAK_RSS_COMMAND = "5"
MAX_CPU_READERS = 64  # threads whose last /proc/stat reading is kept


class HostBackend:
    """Real backend: psutil and /proc."""

    name = "psutil+proc"

    def __init__(
        self,
        proc_status: str = PROC_STATUS,
        proc_clear_refs: str = PROC_CLEAR_REFS,
        proc_statm: str = PROC_STATM,
        proc_meminfo: str = PROC_MEMINFO,
        proc_stat: str = PROC_STAT,
    ):
        self._proc_status = proc_status
        self._proc_clear_refs = proc_clear_refs
        self._proc_statm = proc_statm
        self._proc_meminfo = proc_meminfo
        self._proc_stat = proc_stat
        self._last_cpu_ticks: dict[int, list[int]] = {}  # thread ident -> /proc/stat's cpu line
        self._process = psutil.Process(os.getpid())
        self._page_bytes = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        # Every profiled node reads these files twice: opening them each time cost ~4x the read
        # (24 us vs 8 us for status), so they stay open and are re-read from offset 0. Keyed by pid:
        # a forked child must not read its parent's files.
        self._fds: dict[str, int] = {}
        self._fds_pid = os.getpid()

    def _fd(self, path: str, flags: int) -> int:
        if self._fds_pid != os.getpid():
            self._fds, self._fds_pid = {}, os.getpid()
        fd = self._fds.get(path)
        if fd is None:
            fd = self._fds[path] = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
        return fd

    def _pread(self, path: str, size: int) -> bytes:
        return os.pread(self._fd(path, os.O_RDONLY), size, 0)

    def close(self) -> None:
        fds, self._fds = self._fds, {}
        if self._fds_pid == os.getpid():
            for fd in fds.values():
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __del__(self):
        self.close()

    def process_rss_bytes(self) -> int:
        try:
            # statm's second field is resident pages, the figure psutil's memory_info().rss reports
            return int(self._pread(self._proc_statm, 256).split()[1]) * self._page_bytes
        except (OSError, IndexError, ValueError):
            return int(self._process.memory_info().rss)

    def system_memory(self) -> dict:
        try:
            total, available = self._meminfo_total_available()
        except (OSError, LookupError, ValueError):  # not Linux, or a kernel before MemAvailable
            vm = psutil.virtual_memory()
            total, available = int(vm.total), int(vm.available)
        return {
            "total_bytes": total,
            "available_bytes": available,
            "used_bytes": total - available,
            "used_pct": round((total - available) / total * 100, 1),  # as psutil's percent
        }

    def _meminfo_total_available(self) -> tuple[int, int]:
        """MemTotal and MemAvailable, the figures psutil.virtual_memory() reports as total and
        available, from the kept-open /proc/meminfo (its first lines): 8 us where psutil takes 25,
        parsing every line; a step reads it at its start and end."""
        text = self._pread(self._proc_meminfo, 512)
        return self._meminfo_field(text, b"MemTotal:"), self._meminfo_field(text, b"\nMemAvailable:")

    @staticmethod
    def _meminfo_field(text: bytes, label: bytes) -> int:
        start = text.find(label)
        if start < 0:
            raise LookupError(f"{label.strip().decode()} not in /proc/meminfo")
        return int(text[start + len(label) : text.index(b"\n", start + 1)].split()[0]) * 1024

    def cpu_pct(self) -> float:
        """System-wide CPU busy percent since this thread's previous call (the first reads 0.0),
        as psutil.cpu_percent(interval=None) computes it, from the kept-open /proc/stat: 8 us
        where psutil takes 60, opening the file each time (every prompt reads it twice)."""
        try:
            ticks = self._cpu_ticks()
        except (OSError, ValueError):  # not Linux
            return float(psutil.cpu_percent(interval=None))
        thread = threading.get_ident()
        previous = self._last_cpu_ticks.get(thread, ticks)
        if len(self._last_cpu_ticks) >= MAX_CPU_READERS and thread not in self._last_cpu_ticks:
            self._last_cpu_ticks.clear()  # threads come and go (the pack's own end once idle)
        self._last_cpu_ticks[thread] = ticks
        return cpu_busy_pct(previous, ticks)

    def _cpu_ticks(self) -> list[int]:
        """user nice system idle iowait irq softirq steal guest guest_nice, as far as the kernel
        has them (the first line of /proc/stat)."""
        line = self._pread(self._proc_stat, 256).split(b"\n", 1)[0].split()
        if not line or line[0] != b"cpu" or len(line) < 5:
            raise ValueError("no cpu line in /proc/stat")
        return [int(field) for field in line[1:11]]

    def cpu_count(self) -> int | None:
        return psutil.cpu_count(logical=True)

    def reset_peak_rss(self) -> bool:
        os.write(self._fd(self._proc_clear_refs, os.O_WRONLY), RESET_PEAK_RSS_COMMAND.encode())
        return True

    def peak_rss_bytes(self) -> int:
        """Kernel high-water mark of RSS (VmHWM) since process start or the last reset."""
        text = self._pread(self._proc_status, 8192)  # VmHWM is in its first lines
        start = text.find(b"\nVmHWM:")
        if start >= 0:
            return int(text[start + 7 : text.index(b"\n", start + 1)].split()[0]) * 1024
        raise LookupError(f"VmHWM not found in {self._proc_status}")


def cpu_busy_pct(before: list[int], after: list[int]) -> float:
    """psutil's cpu_percent between two /proc/stat cpu lines: each field's growth (never below
    zero), guest time left out of the total (the kernel counts it in user and nice too), busy =
    total - idle - iowait; rounded to 0.1, 0.0 when no time passed."""
    deltas = [max(0, b - a) for a, b in zip(before, after, strict=True)]
    total = sum(deltas) - sum(deltas[8:10])
    busy = total - deltas[3] - (deltas[4] if len(deltas) > 4 else 0)
    return round(busy / total * 100, 1) if total > 0 else 0.0

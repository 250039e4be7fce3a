"""Host readings: process RSS, system RAM, CPU, and the kernel's RSS high-water mark.

Methods may raise; the Probes facade turns any failure into None.
"""

from __future__ import annotations

import os

import psutil

PROC_STATUS = "/proc/self/status"
PROC_CLEAR_REFS = "/proc/self/clear_refs"
PROC_STATM = "/proc/self/statm"
PROC_MEMINFO = "/proc/meminfo"
# Writing "5" to clear_refs resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
RESET_PEAK_RSS_COMMAND = "5"


class HostBackend:
    """Real backend: psutil and /proc."""

    name = "psutil+proc"

    def __init__(
        self,
        proc_status: str = PROC_STATUS,
        proc_clear_refs: str = PROC_CLEAR_REFS,
        proc_statm: str = PROC_STATM,
        proc_meminfo: str = PROC_MEMINFO,
    ):
        self._proc_status = proc_status
        self._proc_clear_refs = proc_clear_refs
        self._proc_statm = proc_statm
        self._proc_meminfo = proc_meminfo
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
        # Non-blocking: percent since the previous call (the first call reads 0.0).
        return float(psutil.cpu_percent(interval=None))

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

"""The real-time display line of a profiling session (`display.realtime`), one log line a interval.

    pipeline monitor [t2v] 12.0 s: stage denoise, RSS 812.0 MiB, CPU 45 %,
        RAM 12.5 GiB / 31.3 GiB (39.9 %), cuda:0 8.2 GiB / 24.0 GiB (34.3 %) util 85 % 72 °C 210 W

Memory is shown as used / total (percent) wherever the total is known: system RAM from the host,
a GPU from NVML (the device as the driver sees it, all processes); without NVML the GPU shows the
torch allocator's figure for this process, whose total is unknown and so not shown.
"""

from __future__ import annotations

from ..report import format_bytes


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} %"


def used_of_total(used: int | None, total: int | None, pct: float | None = None) -> str:
    """`used / total (pct %)`; parts that are unknown are left out, never guessed."""
    if used is None:
        return "n/a"
    if not total:
        return format_bytes(used)
    pct = 100.0 * used / total if pct is None else pct
    return f"{format_bytes(used)} / {format_bytes(total)} ({pct:.1f} %)"


def gpu_text(gpu) -> str:
    if gpu.nvml_used_bytes is not None:
        memory = used_of_total(gpu.nvml_used_bytes, gpu.nvml_total_bytes)
    else:
        memory = f"allocated {used_of_total(gpu.allocated_bytes, None)}"
    parts = [f"{gpu.device} {memory}"]
    if gpu.utilization_pct is not None:
        parts.append(f"util {gpu.utilization_pct:.0f} %")
    if gpu.temperature_c is not None:
        parts.append(f"{gpu.temperature_c:.0f} °C")
    if gpu.power_w is not None:
        parts.append(f"{gpu.power_w:.0f} W")
    return " ".join(parts)


def display_line(name: str, t_s: float, stage: str | None, snapshot) -> str:
    ram = used_of_total(snapshot.ram_used_bytes, snapshot.ram_total_bytes, snapshot.ram_used_pct)
    line = (
        f"pipeline monitor [{name}] {t_s:.1f} s: stage {stage or '-'}, "
        f"RSS {used_of_total(snapshot.process_rss_bytes, None)}, CPU {_pct(snapshot.cpu_pct)}, RAM {ram}"
    )
    gpus = ", ".join(gpu_text(g) for g in snapshot.gpus)
    return line + (f", {gpus}" if gpus else "")

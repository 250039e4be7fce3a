"""docs/metrics-reference.md's hand-written rows of the run level (the prompt's span) and of the
node rows: figures outside the step summaries."""

from __future__ import annotations

from .reference_figure import Figure

F = Figure
RUN_AND_NODE_FIGURES: tuple[Figure, ...] = (
    # -- run level -------------------------------------------------------------------------------
    F("prompt wall time", "PROF", "duration_s", "s", "monotonic clock, prompt start to end"),
    F(
        "prompt peak RSS",
        "PROF",
        "span.peak_rss_bytes",
        "bytes",
        "kernel RSS high-water mark (VmHWM) reset at start",
    ),
    F("prompt peak RSS time", "PROF", "span.peaks.process_rss_bytes.at_s", "s", "seconds after start"),
    F("prompt RAM used at start", "PROF", "span.baseline.ram_used_bytes", "bytes", "psutil virtual_memory"),
    F("prompt RAM used at end", "PROF", "span.end.ram_used_bytes", "bytes", "psutil virtual_memory"),
    F("prompt RAM available low", "PROF", "span.lows.ram_available_bytes.value", "bytes", "lowest reading"),
    F(
        "prompt GPU allocated at start",
        "PROF",
        "span.baseline.gpus[].allocated_bytes",
        "bytes",
        "torch",
        True,
    ),
    F("prompt GPU utilisation at end", "PROF", "span.end.gpus[].utilization_pct", "pct", "NVML", True),
    F("GPU name", "USE", "system.gpus[].name", None, "NVML, else torch", True),
    F("GPU total memory", "VAE", "system.gpus[].total_bytes", "bytes", "NVML total memory", True),
    F("system RAM total", "VAE", "system.ram_total_bytes", "bytes", "psutil"),
    # -- node rows (cheap: RSS and allocator counters only) ---------------------------------------
    F("node time", "PROF", "nodes[].duration_s", "s", "ComfyUI progress hook, node start to finish"),
    F(
        "node GPU stream span",
        "PROF",
        "nodes[].gpu_time_s",
        "s",
        "CUDA events on the current stream at the node's start and end: idle time included (a node that "
        "waits for the GPU gets its wall time); why null: gpu_time_unknown_reason",
        True,
    ),
    F(
        "node GPU busy time",
        "PROF",
        "nodes[].gpu_busy_s",
        "s",
        "NVML utilization samples within the node's window: time a kernel ran (about 0 for an idle node), "
        "other processes' kernels included; null for a node shorter than the sampling period "
        "(gpu_busy_unknown_reason)",
        True,
    ),
    F("node RSS at start", "TXT", "nodes[].rss_start_bytes", "bytes", "/proc RSS at the node's start"),
    F("node RSS at end", "TXT", "nodes[].rss_end_bytes", "bytes", "/proc RSS at the node's end"),
    F("node RSS change", "TXT", "nodes[].rss_change_bytes", "bytes", "end minus start"),
    F("node peak RSS", "TXT", "nodes[].peak_rss_bytes", "bytes", "VmHWM since the previous node ended (reset there)"),
    F("node peak RSS above start", "TXT", "nodes[].peak_rss_above_start_bytes", "bytes", "peak minus start"),
    F("node peak RSS time", "TXT", "nodes[].peak_rss_at_s", "s", "seconds after the node's start"),
    F(
        "node GPU allocated at start",
        "TXT",
        "nodes[].gpu_peaks[].allocated_start_bytes",
        "bytes",
        "torch",
        True,
    ),
    F("node GPU allocated at end", "TXT", "nodes[].gpu_peaks[].allocated_end_bytes", "bytes", "torch", True),
    F(
        "node GPU allocated change",
        "TXT",
        "nodes[].gpu_peaks[].allocated_change_bytes",
        "bytes",
        "torch",
        True,
    ),
    F("node GPU allocated peak", "TXT", "nodes[].gpu_peaks[].peak_allocated_bytes", "bytes", "torch", True),
    F("node GPU allocated peak time", "TXT", "nodes[].gpu_peaks[].peak_allocated_at_s", "s", "torch", True),
    F(
        "node GPU reserved at start",
        "TXT",
        "nodes[].gpu_peaks[].reserved_start_bytes",
        "bytes",
        "torch",
        True,
    ),
    F("node GPU reserved at end", "TXT", "nodes[].gpu_peaks[].reserved_end_bytes", "bytes", "torch", True),
    F("node GPU reserved change", "TXT", "nodes[].gpu_peaks[].reserved_change_bytes", "bytes", "torch", True),
    F("node GPU reserved peak", "TXT", "nodes[].gpu_peaks[].peak_reserved_bytes", "bytes", "torch", True),
    F("node GPU reserved peak time", "TXT", "nodes[].gpu_peaks[].peak_reserved_at_s", "s", "torch", True),
)

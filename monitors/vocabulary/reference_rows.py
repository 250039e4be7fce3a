"""docs/metrics-reference.md's hand-written rows of a run report: the figures outside the step
summaries, the declared details and the node rows.

The run level (the prompt's span and the system), and of the steps' details the memory pictures
(generated from their layout, reference_figure.py picture_figures), the monitors' errors and the
findings. Every other key of the details of the VAE encode, text encoding and LoRA steps is
declared in its stage's details.py and listed from there (metrics_reference.py detail_figures).
"""

from __future__ import annotations

from .reference_figure import UPSTREAM_SCOPE, Figure, picture_figures

F = Figure
RUN_FIGURES: tuple[Figure, ...] = (
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
)

DETAIL_FIGURES: tuple[Figure, ...] = (
    *picture_figures("vae_encode", "VAE", "VAE encode "),
    *picture_figures("conditioning", "TXT", "text encode ", UPSTREAM_SCOPE.format(nodes="text encode nodes")),
    *picture_figures("lora", "LORA", "LoRA application ", UPSTREAM_SCOPE.format(nodes="LoRA loader nodes")),
    F("errors of a monitor", "TXT", "steps[].monitor_errors", None, "what monitoring failed to do"),
    F("findings", "TXT", "steps[].findings[].message", None, "checks of each step"),
)

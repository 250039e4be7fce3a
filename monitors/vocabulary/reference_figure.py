"""One row of docs/metrics-reference.md (a Figure: its name, the specification document that names
it, its JSON path, unit and how it is measured), and the rows of a step's memory picture."""

from __future__ import annotations

from dataclasses import dataclass

# the specification documents (shared seeds), by short name
SPECS = {
    "VAE": "VAE encode step (latent generation)",
    "TXT": "text encoding",
    "LORA": "LoRA application",
    "USE": "usage statistics",
    "PROF": "profiling module guide",
}


@dataclass(frozen=True)
class Figure:
    figure: str
    spec: str  # key of SPECS
    path: str
    unit: str | None
    how: str
    gpu_only: bool = False


def picture_figures(kind: str, spec: str, prefix: str, scope: str = "") -> list[Figure]:
    """The memory picture of a step with a span (monitors.engine.span.memory_picture); `scope` says what
    the span covers when it is not the step's own work."""
    base = f"steps[kind={kind}].details.memory"
    suffix = f"; {scope}" if scope else ""
    rows: list[Figure] = []
    for name, label, unit in (
        ("system_ram.used_bytes", "system RAM used", "bytes"),
        ("system_ram.used_pct", "system RAM used", "pct"),
        ("process_rss_bytes", "process RSS", "bytes"),
    ):
        for part, what in (
            ("baseline", "at the step's start"),
            ("end", "at the step's end"),
            ("change", "end minus start"),
            ("peak", "highest seen during the step"),
            ("peak_at_s", "seconds after the start when the peak was seen"),
        ):
            rows.append(
                Figure(
                    f"{prefix}{label}: {part}",
                    spec,
                    f"{base}.{name}.{part}",
                    "s" if part == "peak_at_s" else unit,
                    f"{what}; full span readings (psutil, VmHWM for the RSS peak), sampler ticks in between"
                    + suffix,
                )
            )
    for part, what in (
        ("baseline", "at the step's start"),
        ("end", "at the step's end"),
        ("change", "end minus start"),
        ("low", "lowest seen during the step"),
        ("low_at_s", "seconds after the start when it was lowest"),
    ):
        rows.append(
            Figure(
                f"{prefix}system RAM available: {part}",
                spec,
                f"{base}.system_ram.available_bytes.{part}",
                "s" if part == "low_at_s" else "bytes",
                f"{what} (psutil available memory; its low point is what matters){suffix}",
            )
        )
    for name, label, how in (
        (
            "allocated_bytes",
            "GPU allocated (torch)",
            "torch.cuda memory_allocated; peak from max_memory_allocated",
        ),
        (
            "reserved_bytes",
            "GPU reserved (torch)",
            "torch.cuda memory_reserved; peak from max_memory_reserved",
        ),
        ("nvml_used_bytes", "GPU used (NVML)", "NVML device memory used (all processes)"),
        ("utilization_pct", "GPU utilisation", "NVML utilisation at start, end and sampler ticks"),
    ):
        unit = "pct" if name == "utilization_pct" else "bytes"
        for part in ("baseline", "end", "change", "peak", "peak_at_s"):
            rows.append(
                Figure(
                    f"{prefix}{label}: {part}",
                    spec,
                    f"{base}.gpus[].{name}.{part}",
                    "s" if part == "peak_at_s" else unit,
                    f"per GPU ({base}.gpus[].device); {how}{suffix}",
                    gpu_only=True,
                )
            )
    return rows


# how the pictures of the passthrough monitors are measured (monitors/engine/upstream_memory.py)
UPSTREAM_SCOPE = (
    "over the {nodes} feeding the monitor (full-detail spans of those nodes only, merged: baseline at "
    "the first one's start, end at the last one's end, peaks over their spans)"
)

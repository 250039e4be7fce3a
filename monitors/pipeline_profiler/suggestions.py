"""Suggestions from explicit rules, aware of the hardware the run had.

Every rule reads plain report data (the JSON dict of a run report): the system info, the run's
span (peaks, baseline, end), the phases and, for reports of the profiling API, its step's
details. GPU rules run only when the run had a GPU (a GPU listed in `system.gpus` or a `cuda:`
reading in the span), so a CPU-only run never gets GPU advice.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from ..profiler_step.phases import profiling_step, report_phases
from ..report import Finding, format_bytes

GiB = 1024**3
MEMORY_NEAR_LIMIT_PCT = 90.0
VAE_DECODE_GPU_PCT = 80.0
FRAGMENTATION_RATIO = 1.5
FRAGMENTATION_MIN_BYTES = 1 * GiB
UNDERUSED_GPU_PCT = 40.0
MIN_UTILISATION_SAMPLES = 5
DOMINANT_PHASE_PCT = 70.0
MIN_RUN_S = 0.5
WARMUP_FACTOR = 3.0
JITTER_CV = 0.5


def _peak(span: Mapping, metric: str):
    value = ((span.get("peaks") or {}).get(metric) or {}).get("value")
    return value if isinstance(value, (int, float)) else None


def gpu_devices(report: Mapping) -> list[str]:
    """The CUDA devices the run saw: from system info and from the span's readings."""
    devices = {
        g.get("device") for g in (report.get("system") or {}).get("gpus") or [] if isinstance(g, Mapping)
    }
    devices |= {
        m.split(".")[0] for m in ((report.get("span") or {}).get("peaks") or {}) if m.startswith("cuda:")
    }
    return sorted(d for d in devices if isinstance(d, str))


def _gpu_total(report: Mapping, device: str) -> int | None:
    for gpu in (report.get("system") or {}).get("gpus") or []:
        if isinstance(gpu, Mapping) and gpu.get("device") == device and gpu.get("total_bytes"):
            return gpu["total_bytes"]
    return None


def _details(report: Mapping) -> Mapping:
    return (profiling_step(report) or {}).get("details") or {}


def _gpu_rules(report: Mapping, span: Mapping, phases: list[dict]) -> list[Finding]:
    findings = []
    samples = _details(report).get("samples") or {}
    for device in gpu_devices(report):
        total = _gpu_total(report, device)
        allocated = _peak(span, f"{device}.allocated_bytes")
        reserved = _peak(span, f"{device}.reserved_bytes")
        used = reserved if reserved is not None else allocated
        if total and used is not None and 100.0 * used / total >= MEMORY_NEAR_LIMIT_PCT:
            findings.append(
                Finding(
                    "warning",
                    f"{device} memory peaked at {format_bytes(used)} of {format_bytes(total)} "
                    f"({100.0 * used / total:.0f} %): keep headroom with VAE tiling, model CPU offload, "
                    "or a smaller batch or resolution",
                    "gpu_memory_near_limit",
                )
            )
        if (
            allocated
            and reserved is not None
            and reserved >= FRAGMENTATION_RATIO * allocated
            and reserved - allocated >= FRAGMENTATION_MIN_BYTES
        ):
            findings.append(
                Finding(
                    "info",
                    f"{device}: the allocator reserved {format_bytes(reserved)} for a peak of "
                    f"{format_bytes(allocated)} allocated: fragmentation; try "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                    "gpu_allocator_fragmentation",
                )
            )
        utilisation = [
            v for v in samples.get(f"{device}.utilization_pct") or [] if isinstance(v, (int, float))
        ]
        if (
            len(utilisation) >= MIN_UTILISATION_SAMPLES
            and (report.get("duration_s") or 0) >= MIN_RUN_S
            and statistics.fmean(utilisation) < UNDERUSED_GPU_PCT
        ):
            findings.append(
                Finding(
                    "info",
                    f"{device} was busy {statistics.fmean(utilisation):.0f} % of the time on average: the "
                    "pipeline waits on CPU-side work (data loading, tokenisation, Python overhead) or "
                    "synchronisation; larger batches, torch.compile or CUDA graphs may help",
                    "gpu_underused",
                )
            )
        for phase in phases:
            gpu_peak = phase.get("peak_gpu_allocated_bytes")
            if (
                phase["stage"] == "vae_decode"
                and total
                and gpu_peak
                and 100.0 * gpu_peak / total >= VAE_DECODE_GPU_PCT
            ):
                findings.append(
                    Finding(
                        "warning",
                        f"vae_decode allocated up to {format_bytes(gpu_peak)} of {format_bytes(total)} on "
                        f"{device}: decode tiled (e.g. vae.enable_tiling()) to lower the peak",
                        "vae_decode_gpu_memory",
                    )
                )
    return findings


def _host_rules(report: Mapping, span: Mapping, gpu_run: bool) -> list[Finding]:
    findings = []
    system = report.get("system") or {}
    ram_total = system.get("ram_total_bytes")
    ram_peak = _peak(span, "ram_used_bytes")
    if ram_total and ram_peak is not None and 100.0 * ram_peak / ram_total >= MEMORY_NEAR_LIMIT_PCT:
        findings.append(
            Finding(
                "warning",
                f"system memory peaked at {format_bytes(ram_peak)} of {format_bytes(ram_total)}: the "
                "machine is close to swapping; load weights in bfloat16/float16, free models between "
                "stages, or lower the batch size",
                "ram_near_limit",
            )
        )
    threads, cores = system.get("torch_num_threads"), system.get("cpu_count")
    if not gpu_run and isinstance(threads, int) and isinstance(cores, int) and threads < cores:
        findings.append(
            Finding(
                "info",
                f"torch computes on {threads} of {cores} logical cores on this CPU-only run: "
                f"torch.set_num_threads({cores}) may be faster",
                "cpu_threads",
            )
        )
    return findings


def _timing_rules(report: Mapping, phases: list[dict], gpu_run: bool, span: Mapping) -> list[Finding]:
    findings = []
    duration = report.get("duration_s") or 0
    for phase in phases:
        if phase.get("n_errors"):
            findings.append(
                Finding(
                    "warning", f"stage {phase['stage']} failed {phase['n_errors']} time(s)", "stage_errors"
                )
            )
        share = phase.get("share_pct")
        if (
            duration >= MIN_RUN_S
            and phase.get("depth") == 0
            and share is not None
            and share >= DOMINANT_PHASE_PCT
        ):
            findings.append(
                Finding(
                    "info",
                    f"{phase['stage']} takes {share:.0f} % of the run: optimise there first",
                    "dominant_stage",
                )
            )
    steps = [
        s.get("duration_s") for s in _details(report).get("diffusion_steps") or [] if isinstance(s, Mapping)
    ]
    steps = [s for s in steps if isinstance(s, (int, float))]
    if len(steps) >= 3:
        rest = steps[1:]
        median = statistics.median(rest)
        if median > 0 and steps[0] >= WARMUP_FACTOR * median:
            findings.append(
                Finding(
                    "info",
                    f"the first denoising step took {steps[0]:.3f} s against a median of {median:.3f} s: "
                    "warm-up (kernel selection, compilation, lazy loading); warm up before timing or "
                    "leave it out of throughput figures",
                    "first_step_warmup",
                )
            )
        mean = statistics.fmean(rest)
        if len(rest) >= 3 and mean > 0 and statistics.pstdev(rest) / mean > JITTER_CV:
            why = "other load on the machine"
            temperature = max(
                (_peak(span, f"{d}.temperature_c") or 0 for d in gpu_devices(report)), default=0
            )
            if gpu_run and temperature:
                why += f" or thermal throttling (GPU temperature peaked at {temperature:.0f} C)"
            findings.append(
                Finding(
                    "info",
                    f"denoising step times vary by {100.0 * statistics.pstdev(rest) / mean:.0f} % of their "
                    f"mean: {why}",
                    "step_time_jitter",
                )
            )
    return findings


def suggest(report: Mapping, phases: list[dict] | None = None) -> list[Finding]:
    """Findings for a run report dict; GPU advice only when the run had a GPU."""
    span = report.get("span") or {}
    phases = report_phases(report) if phases is None else phases
    gpu_run = bool(gpu_devices(report))
    findings = _gpu_rules(report, span, phases) if gpu_run else []
    findings += _host_rules(report, span, gpu_run)
    findings += _timing_rules(report, phases, gpu_run, span)
    return findings

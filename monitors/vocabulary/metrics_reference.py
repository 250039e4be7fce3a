"""`docs/metrics-reference.md`: every figure the specification documents name, where it is in a
report (JSON path), its unit and how it is measured.

The step summaries' rows are generated from the vocabulary declaration (monitors/<kind>/summary.py);
the figures outside summaries (run span, node rows, step details, usage statistics) are the
hand-written rows below. `python -m monitors.vocabulary.generated_files --write` regenerates the document with the
schema; a unit test checks that every path named here appears in reports the test suite builds.

Path syntax: `steps[kind=K]` is the step of kind K, `[]` any element of a list, `usage.` the dict of
`get_usage_statistics()` (not a run report).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .registry import registry

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC_PATH = os.path.join(REPO_ROOT, "docs", "metrics-reference.md")

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


def _picture(kind: str, spec: str, prefix: str, scope: str = "") -> list[Figure]:
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
_UPSTREAM_SCOPE = (
    "over the {nodes} feeding the monitor (full-detail spans of those nodes only, merged: baseline at "
    "the first one's start, end at the last one's end, peaks over their spans)"
)

F = Figure
HAND_WRITTEN: tuple[Figure, ...] = (
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
    # -- VAE encode details ------------------------------------------------------------------------
    F("strategy attempts", "VAE", "steps[kind=vae_encode].details.attempts[].strategy", None, "chain order"),
    F(
        "attempt outcome",
        "VAE",
        "steps[kind=vae_encode].details.attempts[].outcome",
        None,
        "ok, oom, error...",
    ),
    F(
        "attempt error",
        "VAE",
        "steps[kind=vae_encode].details.attempts[].error_message",
        None,
        "exception text",
    ),
    F("latent element count", "VAE", "steps[kind=vae_encode].details.latent.n_elements", "count", "numel"),
    *_picture("vae_encode", "VAE", "VAE encode "),
    # -- text encoding details ---------------------------------------------------------------------
    F("conditioning shape", "TXT", "steps[kind=conditioning].details.positive.shape", None, "first entry"),
    F("conditioning dtype", "TXT", "steps[kind=conditioning].details.positive.dtype", None, "first entry"),
    F("conditioning device", "TXT", "steps[kind=conditioning].details.positive.device", None, "first entry"),
    F(
        "conditioning elements",
        "TXT",
        "steps[kind=conditioning].details.positive.entries[].n_elements",
        "count",
        "numel",
    ),
    F(
        "prompt text",
        "TXT",
        "steps[kind=conditioning].details.positive.encoders[].texts[].text",
        None,
        "traced upstream",
    ),
    F("CLIP id", "TXT", "steps[kind=conditioning].details.clip.object_id", None, "Python id() of the CLIP"),
    F("CLIP class", "TXT", "steps[kind=conditioning].details.clip.class", None, "type name"),
    F("CLIP device", "TXT", "steps[kind=conditioning].details.clip.device", None, "module device"),
    F("CLIP patch count", "TXT", "steps[kind=conditioning].details.clip.n_patches", "count", "patcher"),
    F("CLIP patches UUID", "TXT", "steps[kind=conditioning].details.clip.patches_uuid", None, "patcher"),
    F(
        "diffusion model id",
        "TXT",
        "steps[kind=conditioning].details.diffusion_model.object_id",
        None,
        "MODEL input",
    ),
    F(
        "diffusion model class",
        "TXT",
        "steps[kind=conditioning].details.diffusion_model.class",
        None,
        "MODEL input",
    ),
    F(
        "diffusion model device",
        "TXT",
        "steps[kind=conditioning].details.diffusion_model.device",
        None,
        "MODEL input",
    ),
    F(
        "encode time (all)",
        "TXT",
        "steps[kind=conditioning].details.encode.total_s",
        "s",
        "sum over encode nodes",
    ),
    F(
        "encoder time",
        "TXT",
        "steps[kind=conditioning].details.encode.encoders[].duration_s",
        "s",
        "its node row",
    ),
    F(
        "encoder memory added",
        "TXT",
        "steps[kind=conditioning].details.encode.encoders[].memory_above_start_bytes",
        "bytes",
        "GPU allocated peak above start, else RSS peak above start",
    ),
    F(
        "encoder RSS change",
        "TXT",
        "steps[kind=conditioning].details.encode.encoders[].rss_change_bytes",
        "bytes",
        "node row",
    ),
    F(
        "encoder RSS peak time",
        "TXT",
        "steps[kind=conditioning].details.encode.encoders[].peak_rss_at_s",
        "s",
        "node row",
    ),
    F(
        "encoder GPU allocated change",
        "TXT",
        "steps[kind=conditioning].details.encode.encoders[].gpu_allocated_change_bytes",
        "bytes",
        "node row",
        True,
    ),
    F(
        "memory budget",
        "TXT",
        "steps[kind=conditioning].details.encode.memory_budget.budget_bytes",
        "bytes",
        "input",
    ),
    F("errors of a monitor", "TXT", "steps[].monitor_errors", None, "what monitoring failed to do"),
    *_picture("conditioning", "TXT", "text encode ", _UPSTREAM_SCOPE.format(nodes="text encode nodes")),
    F(
        "text encode memory unknown",
        "TXT",
        "steps[kind=conditioning].details.memory_unknown_reason",
        None,
        "why details.memory is None, e.g. the encode nodes were cached and did not run this prompt",
    ),
    # -- LoRA details (per side: details.model / details.clip) ----------------------------------------
    F(
        "total state-dict keys, original",
        "LORA",
        "steps[kind=lora].details.model.weight_modifications.n_state_dict_keys_before",
        "count",
        "len(module.state_dict()) of the base patcher's module",
    ),
    F(
        "total state-dict keys, modified",
        "LORA",
        "steps[kind=lora].details.model.weight_modifications.n_state_dict_keys_after",
        "count",
        "len(module.state_dict()) of the patcher going out",
    ),
    F(
        "original shape (per weight)",
        "LORA",
        "steps[kind=lora].details.model.overall.weights[].shape_before",
        None,
        "state-dict tensor shape in the base module",
    ),
    F(
        "modified shape (per weight)",
        "LORA",
        "steps[kind=lora].details.model.overall.weights[].shape_after",
        None,
        "state-dict tensor shape in the module going out",
    ),
    F(
        "patch count (per key)",
        "LORA",
        "steps[kind=lora].details.model.overall.weights[].n_patches",
        "count",
        "len(patches[key]) of the patcher going out",
    ),
    F(
        "model id before",
        "LORA",
        "steps[kind=lora].details.model.identity.model_object_id_before",
        None,
        "Python id() of the MODEL before the loaders",
    ),
    F(
        "CLIP id before",
        "LORA",
        "steps[kind=lora].details.clip.identity.clip_object_id_before",
        None,
        "id() of clip_before; null with a reason when only the parent chain is known",
    ),
    F(
        "MODEL returned",
        "LORA",
        "steps[kind=lora].details.returned.model_object_id",
        None,
        "id() of the MODEL the node hands on",
    ),
    F(
        "CLIP returned",
        "LORA",
        "steps[kind=lora].details.returned.clip_object_id",
        None,
        "id() of the CLIP the node hands on",
    ),
    F(
        "exception details",
        "LORA",
        "steps[kind=lora].details.exceptions[].traceback",
        None,
        "exceptions the analysis caught, with their traceback (bounded)",
    ),
    *_picture("lora", "LORA", "LoRA application ", _UPSTREAM_SCOPE.format(nodes="LoRA loader nodes")),
    F(
        "LoRA application memory unknown",
        "LORA",
        "steps[kind=lora].details.memory_unknown_reason",
        None,
        "why details.memory is None, e.g. the LoRA loaders were cached and did not run this prompt",
    ),
    F(
        "LoRA loaders measured",
        "LORA",
        "steps[kind=lora].details.memory_scope.measured_node_ids",
        None,
        "the upstream nodes whose spans the picture merges (not_run_node_ids: the ones that did not run)",
    ),
    F("findings", "TXT", "steps[].findings[].message", None, "checks of each step"),
    # -- profiling sessions --------------------------------------------------------------------------
    F(
        "GPU utilisation before",
        "USE",
        "steps[kind=profiling].details.gpu_utilization_before_pct",
        "pct",
        "NVML",
        True,
    ),
    F(
        "GPU utilisation after",
        "USE",
        "steps[kind=profiling].details.gpu_utilization_after_pct",
        "pct",
        "NVML",
        True,
    ),
    *_picture("profiling", "PROF", "session "),
    # -- usage statistics (get_usage_statistics(), not a run report) -----------------------------------
    F("initialisation time", "USE", "usage.model_init_s", "s", "profile_model_parameters, summed"),
    F("generations", "USE", "usage.n_generations", "count", "profile_session calls"),
    F("total inference time", "USE", "usage.total_generation_s", "s", "sum of session times"),
    F("mean inference time", "USE", "usage.mean_generation_s", "s", "total / generations"),
    F("peak memory (RSS)", "USE", "usage.peak_rss_bytes", "bytes", "highest session peak"),
    F("peak GPU allocated", "USE", "usage.peak_gpu_allocated_bytes", "bytes", "highest session peak", True),
    F(
        "current GPU allocated",
        "USE",
        "usage.current_gpu_allocated_bytes",
        "bytes",
        "torch, summed over GPUs",
        True,
    ),
    F(
        "current GPU reserved",
        "USE",
        "usage.current_gpu_reserved_bytes",
        "bytes",
        "torch, summed over GPUs",
        True,
    ),
    F(
        "current GPU allocated per GPU",
        "USE",
        "usage.current_gpu_memory[].allocated_bytes",
        "bytes",
        "torch",
        True,
    ),
    F("current process RSS", "USE", "usage.current_process_rss_bytes", "bytes", "/proc RSS now"),
    F("device name", "USE", "usage.device_name", None, "NVML or torch"),
    F("generation time", "USE", "usage.generations[].duration_s", "s", "one session"),
    F(
        "GPU utilisation before inference",
        "USE",
        "usage.generations[].gpu_utilization_before_pct",
        "pct",
        "NVML",
        True,
    ),
    F(
        "GPU utilisation after inference",
        "USE",
        "usage.generations[].gpu_utilization_after_pct",
        "pct",
        "NVML",
        True,
    ),
)

SPEC_OF_KIND = {
    "vae_encode": "VAE",
    "conditioning": "TXT",
    "lora": "LORA",
    "models": "TXT",
    "profiling": "PROF",
}


def summary_figures() -> list[Figure]:
    """One row per declared summary field of every step kind."""
    rows = []
    for kind, vocab in registry().items():
        for f in vocab.fields:
            rows.append(
                Figure(
                    f.label,
                    SPEC_OF_KIND.get(kind, "-"),
                    f"steps[kind={kind}].summary.{f.name}",
                    f.unit,
                    f.description,
                )
            )
    return rows


def deep_profile_figures() -> list[Figure]:
    """The rows of a deep profile's `details.nodes` and their `top_ops`, from their declaration."""
    from ..deep_profile.summary import NODE_FIELDS, TOP_OP_FIELDS

    base = "steps[kind=deep_profile].details.nodes[]"
    rows = [Figure(f"deep profile node {f.label}", "PROF", f"{base}.{f.name}", f.unit, f.description)
            for f in NODE_FIELDS]
    rows += [Figure(f"deep profile top op {f.label}", "PROF", f"{base}.top_ops[].{f.name}", f.unit, f.description)
             for f in TOP_OP_FIELDS]
    return rows


def all_figures() -> list[Figure]:
    return [*summary_figures(), *deep_profile_figures(), *HAND_WRITTEN]


def _cell(text) -> str:
    return "–" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


def _table(rows: list[Figure]) -> list[str]:
    lines = ["| figure | spec | JSON path | unit | how it is measured |", "|---|---|---|---|---|"]
    for r in rows:
        how = r.how + (" (GPU only)" if r.gpu_only else "")
        lines.append(f"| {_cell(r.figure)} | {r.spec} | `{r.path}` | {_cell(r.unit)} | {_cell(how)} |")
    return lines


def document_text() -> str:
    lines = [
        "# Metrics reference",
        "",
        "<!-- GENERATED by `python -m monitors.vocabulary.generated_files --write` (monitors/vocabulary/metrics_reference.py); do not edit -->",
        "",
        "Every figure the specification documents name: where it is in a report (JSON path), its unit,",
        "and how it is measured. Unknown values are `null` with a reason beside them, never -1.",
        "Path syntax: `steps[kind=K]` is the step of kind K, `[]` any element of a list, `usage.` the",
        "dict `get_usage_statistics()` returns (not a run report). Specifications: "
        + ", ".join(f"{k} = {v}" for k, v in SPECS.items())
        + ".",
        "",
        "Node rows are cheap (process RSS and torch allocator counters only); system RAM, NVML and",
        "GPU utilisation per step come with the steps that have a span of their own (`details.memory`:",
        "the VAE encode and profiling sessions). A text encode's figures are its node row's.",
        "",
        "## Step summaries (from the vocabulary declaration)",
        "",
    ]
    by_kind: dict[str, list[Figure]] = {}
    for row in summary_figures():
        kind = row.path.split("]")[0].split("=")[1]
        by_kind.setdefault(kind, []).append(row)
    for kind, rows in by_kind.items():
        lines += [f"### {registry()[kind].title} (`{kind}`)", "", *_table(rows), ""]
    lines += [
        "## Deep profile per node (from the vocabulary declaration)",
        "",
        "A deep-profiled prompt (`torch.profiler` over one prompt, asked for from the panel, the",
        "`/pipeline_monitor/deep_profile` route or `PIPELINE_MONITOR_DEEP_PROFILE=1`) has one row per",
        "executed node in `details.nodes`; ops and kernels are attributed to the node whose",
        "`record_function` range launched them.",
        "",
        *_table(deep_profile_figures()),
        "",
    ]
    lines += ["## Outside the summaries", "", *_table(list(HAND_WRITTEN)), ""]
    return "\n".join(lines)

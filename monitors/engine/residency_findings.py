"""Findings that name why weights moved in a prompt (monitors/engine/model_residency.py's events):
a model evicted to make room and loaded again, a LoRA change that unpatched and repatched the
weights, a partial load that streams part of a model through every step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..report import Finding, format_bytes
from .model_residency import LOAD_KINDS, ModelEvent, residency_report

RELOAD_ADVICE = "`--reserve-vram` or a smaller VAE tile size would keep it loaded"


def _node(node_id, node_class) -> str:
    if node_id is None:
        return "no node (between nodes or prompts)"
    return f"node {node_id}" + (f" ({node_class})" if node_class else "")


def _seconds(value) -> str:
    return "unknown time" if value is None else f"{value:.2f} s"


def _advice(earlier: Mapping) -> str:
    """What would keep a model evicted to make room for another one loaded."""
    return f"; {RELOAD_ADVICE}" if "memory for" in str(earlier.get("reason") or "") else ""


def reload_findings(events: Sequence[ModelEvent]) -> list[Finding]:
    findings = []
    for event in events:
        earlier = event.reloaded_after
        if event.kind not in LOAD_KINDS or not isinstance(earlier, Mapping):
            continue
        prompt_id = earlier.get("prompt_id")
        where = f"in prompt {prompt_id}" if prompt_id else "between prompts"
        why = f" ({earlier.get('reason')})" if earlier.get("reason") else ""
        findings.append(
            Finding(
                "warning",
                f"{event.model_class} was unloaded by {_node(earlier.get('node_id'), earlier.get('node_class'))} "
                f"{where}{why} and loaded again by {_node(event.node_id, event.node_class)}: "
                f"{format_bytes(event.bytes_moved)} in {_seconds(event.duration_s)}{_advice(earlier)}",
                "model_reloaded",
            )
        )
    return findings


def patch_findings(events: Sequence[ModelEvent]) -> list[Finding]:
    """A model whose LoRA weights were unpatched and patched again in this prompt."""
    findings = []
    for model_id in dict.fromkeys(e.model_id for e in events if e.kind == "unpatch"):
        unpatched = [e for e in events if e.model_id == model_id and e.kind == "unpatch"]
        patched = [e for e in events if e.model_id == model_id and e.kind == "patch"]
        if not patched:
            continue
        seconds = sum(e.duration_s or 0.0 for e in unpatched + patched)
        findings.append(
            Finding(
                "info",
                f"LoRA weights changed on {patched[-1].model_class}: "
                f"{sum(e.n_weights or 0 for e in unpatched)} weights unpatched and "
                f"{sum(e.n_weights or 0 for e in patched)} patched again ({seconds:.2f} s) by "
                f"{_node(patched[-1].node_id, patched[-1].node_class)}",
                "lora_repatched",
            )
        )
    return findings


def partial_findings(events: Sequence[ModelEvent]) -> list[Finding]:
    findings = []
    for event in events:
        size, loaded = event.model_size_bytes, event.loaded_after_bytes
        if event.kind != "load_partial" or not size or loaded is None:
            continue
        streamed = 100.0 * (size - loaded) / size
        findings.append(
            Finding(
                "warning",
                f"partial load: {streamed:.0f} % of the {event.model_class} ({format_bytes(size - loaded)} of "
                f"{format_bytes(size)}) stays off {event.device} and is streamed every step",
                "partial_load",
            )
        )
    return findings


def residency_findings(events: Sequence[ModelEvent]) -> list[dict]:
    found = [*reload_findings(events), *patch_findings(events), *partial_findings(events)]
    return [f.to_dict() for f in found]


def residency_of_run(run, duration_s: float | None) -> dict:
    """The run's `model_residency` object from its RunRecord (monitors/engine/run_record.py)."""
    log = run.residency
    return residency_report(log, duration_s, run.resident_at_end, residency_findings(log.events))

"""docs/metrics-reference.md's rows of the steps' memory pictures (generated from their layout,
reference_figure.py picture_figures), the monitors' errors and the findings. Every other key of the
details of the VAE encode, text encoding and LoRA steps is declared in its stage's details.py and
listed from there (metrics_reference.py detail_figures)."""

from __future__ import annotations

from .reference_figure import UPSTREAM_SCOPE, Figure, picture_figures

F = Figure
DETAIL_FIGURES: tuple[Figure, ...] = (
    *picture_figures("vae_encode", "VAE", "VAE encode "),
    *picture_figures("conditioning", "TXT", "text encode ", UPSTREAM_SCOPE.format(nodes="text encode nodes")),
    *picture_figures("lora", "LORA", "LoRA application ", UPSTREAM_SCOPE.format(nodes="LoRA loader nodes")),
    F("errors of a monitor", "TXT", "steps[].monitor_errors", None, "what monitoring failed to do"),
    F("findings", "TXT", "steps[].findings[].message", None, "checks of each step"),
)

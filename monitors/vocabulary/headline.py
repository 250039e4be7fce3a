"""A monitor node's UI text: its kind's headline figures, then its first warnings and errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .formatting import format_value
from .registry import vocabulary


def headline_lines(kind: str, summary: Mapping[str, Any]) -> list[str]:
    """`label: value` for each headline figure that is known, in declared order."""
    vocab = vocabulary(kind)
    if vocab is None or not summary:
        return []
    return [
        f"{f.label}: {format_value(f, summary[f.name])}"
        for f in vocab.fields
        if f.headline and summary.get(f.name) is not None
    ]


def headline_text(kind: str, summary: Mapping[str, Any]) -> str:
    """A node's UI text: its kind's headline figures, one per line."""
    lines = headline_lines(kind, summary)
    return "\n".join(lines) if lines else "no figures"


MAX_PROBLEM_LINES = 5


def step_text(step) -> str:
    """A monitor node's UI text: its kind's headline figures, then the first warnings and errors
    (a fallback or a dummy latent must show on the node, not only in the report)."""
    problems = [f.message for f in step.findings if f.level in ("warning", "error")]
    return "\n".join([headline_text(step.kind, step.summary), *problems[:MAX_PROBLEM_LINES]])

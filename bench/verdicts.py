"""What every bench prints last: one `verdict: met|not met` line per target, with its figures.

Ratios come from interleaved pairs (the variant timed right next to its yardstick), so noise from
the other processes of a shared machine falls on both sides of a pair; min/median/max of the
per-pair ratios state that noise. The median decides the verdict.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def fmt_spread(values: Sequence[float], fmt: str = ".3f", unit: str = "") -> str:
    s = spread(values)
    return (
        f"median {s['median']:{fmt}}{unit} (min {s['min']:{fmt}}, max {s['max']:{fmt}}, {len(values)} pairs)"
    )


def verdict_line(met: bool, target: str, figures: str) -> str:
    return f"verdict: {'met' if met else 'not met'} | {target} | {figures}"


def add_quick_flag(parser) -> None:
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes, 1-2 repeats: checks that the bench runs; its figures mean nothing",
    )

"""What every bench prints last: one `verdict: met|not met` line per target, with its figures.

Ratios come from interleaved pairs (the variant timed right next to its yardstick), so noise from
the other processes of a shared machine falls on both sides of a pair; min/median/max of the
per-pair ratios state that noise. The median decides the verdict.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

VERDICT = re.compile(r"^verdict: (met|not met) \| [^|]+ \| .+$")


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


def chosen_device(choice: str) -> str:
    """A bench's `--device` choice: `auto` is CUDA when torch sees a GPU, else the CPU (also where
    torch cannot be imported: a bench that only drives a ComfyUI server needs none)."""
    if choice != "auto":
        return choice
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def trailing_verdicts(output: str) -> list[str]:
    """The verdict lines a bench's output ends with (every line from the first verdict line on
    must be one); [] when it does not end with verdicts."""
    lines = [line for line in output.strip().splitlines() if line.strip()]
    first = next((i for i, line in enumerate(lines) if line.startswith("verdict:")), len(lines))
    tail = lines[first:]
    return tail if tail and all(VERDICT.match(line) for line in tail) else []

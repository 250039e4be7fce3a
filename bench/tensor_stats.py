"""Tensor statistics (`value_stats`) and comparison (`compare_pair`) against one plain torch pass.

Run from the repo root:

    python -m bench.tensor_stats [--elements 67108864] [--pairs 11] [--quick] [--json out.json]

Yardstick: a single `torch.aminmax` + `sum` over the whole tensor (for the comparison: over each of
the two tensors), the least any exact min/max/mean can cost. Each pair times the yardstick and the
variant back to back, alternating which goes first, after one untimed warm-up of each; the ratio
variant/yardstick per pair and the throughput (bytes of the input tensors read per second) are
reported as min/median/max. Inputs: float32 standard normal (all finite, the common case) and the
same as float16; the comparison's second tensor is the first plus 1e-3 noise (close, not equal).

Targets (issue 14): >= 1 GB/s on this machine's CPU and within 1.3x of the yardstick, for the
statistics and for the comparison; one verdict line per target, decided by the median.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.verdicts import add_quick_flag, fmt_spread, spread, verdict_line  # noqa: E402

THROUGHPUT_TARGET_BPS = 1e9
RATIO_TARGET = 1.3


def _time(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def paired(variant, yardstick, pairs: int) -> tuple[list[float], list[float]]:
    """Seconds of the variant and of the yardstick, one of each per pair, order alternating."""
    variant(), yardstick()  # warm-up: first calls allocate and dispatch more
    v_s, y_s = [], []
    for index in range(pairs):
        if index % 2 == 0:
            y_s.append(_time(yardstick))
            v_s.append(_time(variant))
        else:
            v_s.append(_time(variant))
            y_s.append(_time(yardstick))
    return v_s, y_s


def measure(elements: int, pairs: int) -> dict:
    import torch

    from monitors.dumps.compare import compare_pair
    from monitors.tensor_stats import value_stats

    generator = torch.Generator().manual_seed(0)
    a32 = torch.randn(elements, generator=generator)
    b32 = a32 + 1e-3 * torch.randn(elements, generator=generator)
    cases = {}
    for dtype in (torch.float32, torch.float16):
        a, b = a32.to(dtype), b32.to(dtype)
        name = str(dtype).replace("torch.", "")

        def stats_yardstick(a=a):
            torch.aminmax(a), a.sum()

        def compare_yardstick(a=a, b=b):
            torch.aminmax(a), a.sum(), torch.aminmax(b), b.sum()

        for kind, variant, yardstick, nbytes in (
            ("value_stats", lambda a=a: value_stats(a), stats_yardstick, a.numel() * a.element_size()),
            (
                "compare_pair",
                lambda a=a, b=b: compare_pair(a, b, 1e-5, 1e-8),
                compare_yardstick,
                2 * a.numel() * a.element_size(),
            ),
        ):
            v_s, y_s = paired(variant, yardstick, pairs)
            cases[f"{kind} {name}"] = {
                "bytes": nbytes,
                "variant_s": v_s,
                "yardstick_s": y_s,
                "ratios": [v / y for v, y in zip(v_s, y_s, strict=True)],
                "throughput_bps": [nbytes / v for v in v_s],
            }
        del a, b
    return {"elements": elements, "pairs": pairs, "threads": torch.get_num_threads(), "cases": cases}


def verdicts(result: dict) -> list[str]:
    lines = []
    for name, case in result["cases"].items():
        gbps = [t / 1e9 for t in case["throughput_bps"]]
        lines.append(
            verdict_line(
                spread(gbps)["median"] >= THROUGHPUT_TARGET_BPS / 1e9,
                f"{name} >= {THROUGHPUT_TARGET_BPS / 1e9:g} GB/s",
                fmt_spread(gbps, ".2f", " GB/s"),
            )
        )
        lines.append(
            verdict_line(
                spread(case["ratios"])["median"] <= RATIO_TARGET,
                f"{name} <= {RATIO_TARGET}x one aminmax+sum pass",
                "ratio " + fmt_spread(case["ratios"], ".2f"),
            )
        )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1 << 26, help="elements per tensor (default 64 Mi)")
    parser.add_argument("--pairs", type=int, default=11)
    parser.add_argument("--json", help="also write the figures to this file")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.elements, args.pairs = 1 << 16, 1
    result = measure(args.elements, args.pairs)
    print(
        f"{result['elements']} elements per tensor, {result['threads']} torch threads, {result['pairs']} pairs"
    )
    print(f"{'case':<24}{'variant ms':>11}{'yardstick ms':>13}{'ratio':>7}{'GB/s':>7}   (medians)")
    for name, case in result["cases"].items():
        v, y = spread(case["variant_s"]), spread(case["yardstick_s"])
        print(
            f"{name:<24}{v['median'] * 1e3:>11.1f}{y['median'] * 1e3:>13.1f}"
            f"{spread(case['ratios'])['median']:>7.2f}{spread(case['throughput_bps'])['median'] / 1e9:>7.2f}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    for line in verdicts(result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Tensor statistics (`value_stats`) and comparison (`compare_pair`) against plain torch passes.

Run from the repo root:

    python -m bench.tensor_stats [--elements 67108864] [--pairs 11] [--quick] [--json out.json]
        [--yardstick-threads variant|default] [--fused on|off|auto]

Yardsticks (each timed in the same pairs as the variant, in rotating order, after one untimed
warm-up of each; the ratio variant/yardstick per pair and the throughput, bytes of the input
tensors read per second, are reported as min/median/max):
- statistics: one `torch.aminmax` + `sum` over the tensor, the least any exact min/max/mean can
  cost. For float16 and bfloat16 also the same with the sum accumulated and returned in float32
  (`sum(dtype=float32)`): value_stats must accumulate in float32, and that is the least pass that
  does; its ratio shows what the plain half-precision yardstick leaves out.
- comparison, two yardsticks: "inputs" = aminmax + sum over each of the two tensors (reads both
  twice); "difference" = b - a into a preallocated tensor, then aminmax + sum over it (the least a
  plain torch comparison does: form the difference and reduce it).
By default every yardstick runs on the variant's CPU threads (monitors.numeric.tensor_stats.one_cpu_thread:
one intra-op thread), so the ratio compares passes, not thread counts; `--yardstick-threads
default` runs them on torch's default thread count instead.
Inputs: float32 standard normal (all finite, the common case) and the same as float16 and bfloat16; the
comparison's second tensor is the first plus 1e-3 noise, compared at rtol=1e-5, atol=1e-8 (most
elements outside tolerance: the count is part of the work).

Targets (issue 14): >= 1 GB/s on this machine's CPU and within 1.3x of the yardstick, for the
statistics and for the comparison; one verdict line per target and yardstick, decided by the median.

Inputs on the CPU: float32, float16 and bfloat16 (one verdict line per dtype and target).

`--device cuda` (issue 25; `auto`: cuda when torch sees one): 1 GiB tensors (256 Mi float32
elements) on the GPU, float32, float16 and bfloat16, every call timed between synchronisations.
Yardsticks there: statistics against one aminmax + sum + sum-of-squares pass (target <= 1.2x,
issue 35), the comparison against max |b - a| + isclose (target <= 1x, issue 35).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.verdicts import add_quick_flag, chosen_device, fmt_spread, spread, verdict_line  # noqa: E402

THROUGHPUT_TARGET_BPS = 1e9
RATIO_TARGET = 1.3
CUDA_STATS_RATIO_TARGET = 1.2
CUDA_COMPARE_RATIO_TARGET = 1.0
CUDA_BYTES = 1 << 30  # per tensor on a GPU: 1 GiB
FUSED_COMPILE_TIMEOUT_S = 300


SYNC = [lambda: None]  # torch.cuda.synchronize on a GPU: each timing covers its kernels


def case_figures(read_bytes: int, variant_s: list[float], yardstick_s: dict[str, list[float]]) -> dict:
    """One case's times, per-pair ratios against each yardstick, and throughput."""
    return {
        "bytes": read_bytes,
        "variant_s": variant_s,
        "yardsticks": {
            k: {"seconds": s, "ratios": [v / y for v, y in zip(variant_s, s, strict=True)]}
            for k, s in yardstick_s.items()
        },
        "throughput_bps": [read_bytes / v for v in variant_s],
    }


def _time(fn) -> float:
    SYNC[0]()
    started = time.perf_counter()
    fn()
    SYNC[0]()
    return time.perf_counter() - started


def paired(variant, yardsticks: dict, pairs: int) -> tuple[list[float], dict[str, list[float]]]:
    """Seconds of the variant and of each yardstick, one of each per pair, in rotating order."""
    from monitors.numeric.fused_kernels import KERNELS

    runs = {"variant": variant, **yardsticks}
    for fn in runs.values():  # warm-up: first calls allocate and dispatch more
        fn()
    # The variant's first call asks for its fused kernels (monitors/numeric/fused_kernels.py): timed once
    # they are compiled, as in a long-running server after its first large tensor.
    KERNELS.wait_idle(FUSED_COMPILE_TIMEOUT_S)
    variant()
    names = list(runs)
    seconds = {name: [] for name in names}
    for index in range(pairs):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name].append(_time(runs[name]))
    return seconds.pop("variant"), seconds


def measure(elements: int, pairs: int, yardstick_threads: str = "variant") -> dict:
    import torch

    from monitors.dumps.compare import compare_pair
    from monitors.numeric.tensor_stats import one_cpu_thread, value_stats

    def as_variant(fn):
        if yardstick_threads == "default":
            return fn

        def run():
            with one_cpu_thread("cpu"):
                fn()

        return run

    generator = torch.Generator().manual_seed(0)
    a32 = torch.randn(elements, generator=generator)
    b32 = a32 + 1e-3 * torch.randn(elements, generator=generator)
    cases = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        a, b = a32.to(dtype), b32.to(dtype)
        difference = torch.empty_like(a)
        name = str(dtype).replace("torch.", "")
        stats_yardsticks = {"aminmax+sum": lambda a=a: (torch.aminmax(a), a.sum())}
        if dtype != torch.float32:
            stats_yardsticks["aminmax+float32 sum"] = lambda a=a: (
                torch.aminmax(a),
                a.sum(dtype=torch.float32),
            )
        compare_yardsticks = {
            "aminmax+sum of both inputs": lambda a=a, b=b: (
                torch.aminmax(a),
                a.sum(),
                torch.aminmax(b),
                b.sum(),
            ),
            "aminmax+sum of b - a": lambda a=a, b=b, d=difference: (
                torch.aminmax(torch.sub(b, a, out=d)),
                d.sum(),
            ),
        }
        nbytes = a.numel() * a.element_size()
        for kind, variant, yardsticks, read_bytes in (
            ("value_stats", lambda a=a: value_stats(a), stats_yardsticks, nbytes),
            ("compare_pair", lambda a=a, b=b: compare_pair(a, b, 1e-5, 1e-8), compare_yardsticks, 2 * nbytes),
        ):
            v_s, y_s = paired(variant, {k: as_variant(fn) for k, fn in yardsticks.items()}, pairs)
            cases[f"{kind} {name}"] = case_figures(read_bytes, v_s, y_s)
        del a, b, difference
    threads = torch.get_num_threads()
    return {
        "elements": elements,
        "pairs": pairs,
        "threads": threads,
        "yardstick_threads": "1 (the variant's)"
        if yardstick_threads == "variant"
        else f"{threads} (default)",
        "cases": cases,
    }


def measure_cuda(pairs: int, elements: int | None = None) -> dict:
    """The GPU yardsticks of issue 25, on 1 GiB tensors of each dtype."""
    import torch

    from monitors.dumps.compare import compare_pair
    from monitors.numeric.tensor_stats import value_stats

    SYNC[0] = torch.cuda.synchronize
    cases = {}
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        n = elements or CUDA_BYTES // torch.tensor([], dtype=dtype).element_size()
        generator = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(n, generator=generator, device="cuda").to(dtype)
        b = (a.float() + 1e-3 * torch.randn(n, generator=generator, device="cuda")).to(dtype)
        name = str(dtype).replace("torch.", "")
        nbytes = a.numel() * a.element_size()
        stats_yardsticks = {
            "aminmax+sum+sum of squares": lambda a=a: (
                torch.aminmax(a),
                a.sum(dtype=torch.float32),
                torch.linalg.vector_norm(a, dtype=torch.float32),
            )
        }
        compare_yardsticks = {
            "max |b - a| + isclose": lambda a=a, b=b: ((b - a).abs().max(), torch.isclose(b, a, 1e-5, 1e-8))
        }
        for kind, variant, yardsticks, read_bytes in (
            ("value_stats", lambda a=a: value_stats(a), stats_yardsticks, nbytes),
            ("compare_pair", lambda a=a, b=b: compare_pair(a, b, 1e-5, 1e-8), compare_yardsticks, 2 * nbytes),
        ):
            v_s, y_s = paired(variant, yardsticks, pairs)
            cases[f"{kind} {name}"] = case_figures(read_bytes, v_s, y_s)
        del a, b
        torch.cuda.empty_cache()
    return {
        "elements": "1 GiB per tensor" if elements is None else elements,
        "pairs": pairs,
        "device": torch.cuda.get_device_name(),
        "yardstick_threads": "GPU",
        "cases": cases,
    }


def cuda_verdicts(result: dict) -> list[str]:
    lines = []
    for name, case in result["cases"].items():
        target = CUDA_STATS_RATIO_TARGET if name.startswith("value_stats") else CUDA_COMPARE_RATIO_TARGET
        for yardstick, figures in case["yardsticks"].items():
            gbps = spread(case["throughput_bps"])["median"] / 1e9
            lines.append(
                verdict_line(
                    spread(figures["ratios"])["median"] <= target,
                    f"{name} on CUDA <= {target:g}x {yardstick}",
                    "ratio " + fmt_spread(figures["ratios"], ".2f") + f", {gbps:.0f} GB/s",
                )
            )
    return lines


def verdicts(result: dict) -> list[str]:
    if result.get("yardstick_threads") == "GPU":
        return cuda_verdicts(result)
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
        for yardstick, figures in case["yardsticks"].items():
            lines.append(
                verdict_line(
                    spread(figures["ratios"])["median"] <= RATIO_TARGET,
                    f"{name} <= {RATIO_TARGET}x one {yardstick} pass",
                    "ratio " + fmt_spread(figures["ratios"], ".2f"),
                )
            )
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1 << 26, help="elements per tensor (default 64 Mi)")
    parser.add_argument("--pairs", type=int, default=11)
    parser.add_argument(
        "--yardstick-threads",
        choices=("variant", "default"),
        default="variant",
        help="yardsticks on the variant's one intra-op thread (default) or torch's default count",
    )
    parser.add_argument(
        "--fused",
        choices=("on", "off", "auto"),
        default="on",
        help="PIPELINE_MONITOR_FUSED_KERNELS for the variant (default on: compiled at its first call)",
    )
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    os.environ["PIPELINE_MONITOR_FUSED_KERNELS"] = args.fused  # read when monitors is first imported
    device = chosen_device(args.device)
    if args.quick:
        args.elements, args.pairs = 1 << 16, 1
    if device == "cuda":
        result = measure_cuda(args.pairs, args.elements if args.quick else None)
    else:
        result = measure(args.elements, args.pairs, args.yardstick_threads)
    from monitors.numeric.fused_kernels import KERNELS

    print(
        f"{result['elements']} elements per tensor, {result['pairs']} pairs, {device}; yardsticks on "
        f"{result['yardstick_threads']} threads; fused kernels {KERNELS.status()}"
    )
    print(
        f"{'case':<24}{'yardstick':<30}{'variant ms':>11}{'yardstick ms':>13}{'ratio':>7}{'GB/s':>7}   (medians)"
    )
    for name, case in result["cases"].items():
        v = spread(case["variant_s"])["median"]
        gbps = spread(case["throughput_bps"])["median"] / 1e9
        for yardstick, figures in case["yardsticks"].items():
            y = spread(figures["seconds"])["median"]
            print(
                f"{name:<24}{yardstick:<30}{v * 1e3:>11.1f}{y * 1e3:>13.1f}"
                f"{spread(figures['ratios'])['median']:>7.2f}{gbps:>7.2f}"
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    for line in verdicts(result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CPU cost of the background Sampler (real probes) at 2 Hz and 20 Hz, plus snapshot and span costs.

Run from the repo root:

    python -m bench.sampler_cost [--window 10] [--repeats 2] [--json out.json]
    python bench/sampler_cost.py

Method: process CPU time (all threads, time.process_time) over fixed wall-clock windows. Each
round runs one window with no sampler (baseline), one with the sampler at 2 Hz and one at 20 Hz,
in a rotating order so drift and background noise fall on all three alike. The cost of a rate
is its window's CPU fraction minus the baseline's of the same round; the table shows the median
over rounds, as a fraction of one core. CPU time per tick is reported too (less sensitive to
noise than the fraction). Torch is imported first (as inside ComfyUI) unless --no-torch.

Per-call costs (one snapshot, light and full detail; one Span start+stop) are timed hot (calls
back to back) and spaced (one call after 50 ms idle, as the sampler and the per-node hook make
them). On small VMs the spaced figure is several times the hot one: caches are cold again.

Targets (set here; the sampler runs for the whole prompt): net CPU at 2 Hz <= 1 % of one core and
at 20 Hz <= 5 %, decided by the median over rounds (each round's rates measured against its own
baseline window); one verdict line each, last. --quick: 0.5 s windows, 1 round, 20 calls, 3 spaced.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.verdicts import add_quick_flag, fmt_spread, spread, verdict_line  # noqa: E402

RATES_HZ = (2.0, 20.0)
NET_CPU_TARGETS = {2.0: 0.01, 20.0: 0.05}  # fraction of one core


def measure_window(window_s: float, rate_hz: float | None, probes) -> dict:
    """CPU seconds used by the whole process during window_s of wall time, sampler on or off."""
    from monitors.engine.sampler import Sampler

    sampler = Sampler(interval_s=1.0 / rate_hz, probes=probes) if rate_hz else None
    cpu0, wall0 = time.process_time(), time.monotonic()
    if sampler is not None:
        sampler.ensure_started()
    time.sleep(window_s)
    if sampler is not None:
        sampler.stop()
    cpu1, wall1 = time.process_time(), time.monotonic()
    wall = wall1 - wall0
    return {
        "rate_hz": rate_hz,
        "wall_s": wall,
        "cpu_s": cpu1 - cpu0,
        "cpu_fraction": (cpu1 - cpu0) / wall,
        "ticks": 0 if sampler is None else sampler.tick_count,
    }


def run_windows(window_s: float, repeats: int, probes) -> list[dict]:
    conditions = [None, *RATES_HZ]
    rounds = []
    for r in range(repeats):
        order = conditions[r % len(conditions) :] + conditions[: r % len(conditions)]
        results = {}
        for rate in order:
            results[rate] = measure_window(window_s, rate, probes)
            label = "baseline" if rate is None else f"{rate:g} Hz"
            res = results[rate]
            print(
                f"  round {r + 1}/{repeats} {label:>8}: cpu {res['cpu_s'] * 1000:8.1f} ms "
                f"in {res['wall_s']:.2f} s, {res['ticks']} ticks",
                file=sys.stderr,
            )
        rounds.append(results)
    return rounds


def summarize_windows(rounds: list[dict]) -> dict:
    summary = {"baseline_cpu_fraction_median": statistics.median(r[None]["cpu_fraction"] for r in rounds)}
    for rate in RATES_HZ:
        net = [r[rate]["cpu_fraction"] - r[None]["cpu_fraction"] for r in rounds]
        per_tick_us = [
            1e6 * (r[rate]["cpu_s"] - r[None]["cpu_fraction"] * r[rate]["wall_s"]) / max(1, r[rate]["ticks"])
            for r in rounds
        ]
        summary[f"{rate:g}hz"] = {
            "net_cpu_fraction_median": statistics.median(net),
            "net_cpu_fraction_min": min(net),
            "net_cpu_fraction_max": max(net),
            "net_cpu_fraction_per_round": net,
            "gross_cpu_fraction_median": statistics.median(r[rate]["cpu_fraction"] for r in rounds),
            "cpu_us_per_tick_median": statistics.median(per_tick_us),
            "ticks_per_window_median": statistics.median(r[rate]["ticks"] for r in rounds),
        }
    return summary


def time_call(fn, number: int, repeats: int = 5, spaced: int = 40, gap_s: float = 0.05) -> dict:
    """Microseconds per call, two ways.

    hot: back-to-back calls, the best of `repeats` loops of `number` (a lower bound).
    spaced: single calls after `gap_s` of sleep, median of `spaced` (how the sampler and the
    per-node hook really call them; caches are cold after the idle gap, which can cost 5-10x).
    """
    fn()  # warm up (first NVML/psutil calls do one-time work)
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(number):
            fn()
        wall.append((time.perf_counter() - w0) / number * 1e6)
        cpu.append((time.process_time() - c0) / number * 1e6)
    spaced_wall, spaced_cpu = [], []
    for _ in range(spaced):
        time.sleep(gap_s)
        w0, c0 = time.perf_counter(), time.thread_time()
        fn()
        spaced_wall.append((time.perf_counter() - w0) * 1e6)
        spaced_cpu.append((time.thread_time() - c0) * 1e6)
    return {
        "hot_wall_us_min": min(wall),
        "hot_wall_us_median": statistics.median(wall),
        "hot_cpu_us_median": statistics.median(cpu),
        "spaced_wall_us_median": statistics.median(spaced_wall),
        "spaced_cpu_us_median": statistics.median(spaced_cpu),
        "spaced_gap_s": gap_s,
    }


def micro_benchmarks(probes, number: int, spaced: int = 40) -> dict:
    from monitors.engine.span import Span
    from monitors.probes import DETAIL_FULL, DETAIL_LIGHT

    def span(detail):
        def fn():
            Span("bench", probes=probes, detail=detail).start().stop()

        return fn

    return {
        "snapshot_light": time_call(lambda: probes.snapshot(DETAIL_LIGHT), number, spaced=spaced),
        "snapshot_full": time_call(lambda: probes.snapshot(DETAIL_FULL), number, spaced=spaced),
        "span_light_start_stop": time_call(span(DETAIL_LIGHT), number, spaced=spaced),
        "span_full_start_stop": time_call(span(DETAIL_FULL), number, spaced=spaced),
    }


def print_report(result: dict) -> None:
    w = result["windows"]
    print()
    print(
        f"Sampler CPU cost ({result['config']['window_s']:g} s windows x {result['config']['repeats']} rounds, "
        f"cpu_count={os.cpu_count()}, torch={'yes' if result['config']['torch'] else 'no'})"
    )
    print(f"  baseline (no sampler): {100 * w['baseline_cpu_fraction_median']:.3f} % of one core")
    print(
        f"  {'rate':>6} | {'net % of one core (median)':>26} | {'min..max':>17} | {'CPU us/tick':>11} | ticks/window"
    )
    for rate in RATES_HZ:
        s = w[f"{rate:g}hz"]
        print(
            f"  {rate:>4g}Hz | {100 * s['net_cpu_fraction_median']:>26.3f} | "
            f"{100 * s['net_cpu_fraction_min']:>7.3f}..{100 * s['net_cpu_fraction_max']:<8.3f} | "
            f"{s['cpu_us_per_tick_median']:>11.0f} | {s['ticks_per_window_median']:g}"
        )
    print()
    print(
        f"Per-call cost: hot = {result['config']['number']} calls back to back x 5 loops; "
        "spaced = one call after 50 ms idle, median of 40"
    )
    print(
        f"  {'operation':<22} | {'hot wall us (min)':>17} {'(median)':>9} | "
        f"{'spaced wall us (median)':>23} {'CPU us':>7}"
    )
    for name, m in result["calls"].items():
        print(
            f"  {name:<22} | {m['hot_wall_us_min']:>17.1f} {m['hot_wall_us_median']:>9.1f} | "
            f"{m['spaced_wall_us_median']:>23.1f} {m['spaced_cpu_us_median']:>7.1f}"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--window", type=float, default=10.0, help="seconds per measurement window (default 10)"
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="rounds of baseline/2 Hz/20 Hz windows (default 2)"
    )
    parser.add_argument("--number", type=int, default=500, help="calls per loop in the per-call timings")
    parser.add_argument("--no-torch", action="store_true", help="do not import torch first")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.window, args.repeats, args.number = 0.5, 1, 20
    logging.basicConfig(level=logging.WARNING)

    torch_loaded = False
    if not args.no_torch:
        try:
            import torch  # noqa: F401  (inside ComfyUI torch is always loaded; the probes look at it)

            torch_loaded = True
        except ImportError:
            pass
    from monitors.probes import Probes

    probes = Probes()
    probes.snapshot()  # one-time setup (NVML init attempt, psutil.cpu_percent priming)
    print(f"Measuring {args.repeats} rounds of {3 * args.window:g} s...", file=sys.stderr)
    rounds = run_windows(args.window, args.repeats, probes)
    result = {
        "config": {
            "window_s": args.window,
            "repeats": args.repeats,
            "number": args.number,
            "torch": torch_loaded,
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
        },
        "windows": summarize_windows(rounds),
        "raw_rounds": [{("baseline" if k is None else f"{k:g}hz"): v for k, v in r.items()} for r in rounds],
        "calls": micro_benchmarks(probes, args.number, spaced=3 if args.quick else 40),
        "probe_failures": probes.failures(),
    }
    print_report(result)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
        print(f"\nwrote {args.json}")
    for rate, target in NET_CPU_TARGETS.items():
        net_pct = [100 * v for v in result["windows"][f"{rate:g}hz"]["net_cpu_fraction_per_round"]]
        print(
            verdict_line(
                spread(net_pct)["median"] <= 100 * target,
                f"sampler at {rate:g} Hz <= {100 * target:g} % of one core",
                "net CPU " + fmt_spread(net_pct, ".3f", " %").replace("pairs", "rounds"),
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-call cost of the profiling API's decorators: disabled, and enabled inside a session, next to
the same function undecorated, in one run.

Run from the repo root:

    python -m bench.profiling_overhead [--calls 200000] [--enabled-calls 2000] [--rounds 5] [--quick]
        [--json out.json]

Method: each round times N back-to-back calls of a trivial function (returns its argument), so
the figure is the decorator's own cost, not the work's. Variants: undecorated; each decorator
with profiling disabled (`configure(enabled=False)`: the path every call takes outside a session);
each decorator enabled inside an open session, in two configurations: `time only` (the production
preset with metrics.system_memory and gpu_memory off: two clock reads per stage, no probe) and
`memory` (the production preset as is: a Span per call, RSS and allocator readings, the kernel's
RSS high-water-mark reset). Rounds rotate the order so drift falls on all variants alike;
the table shows the minimum over rounds (the least disturbed) and the median. Overhead = variant
minus undecorated, per call; ratio = variant / undecorated.

Targets: disabled, a decorator costs under 1 us per call (README); enabled with no memory figure
configured, at most 20 us per call (issue 14). Each variant is timed right after an undecorated
timing in the same round (interleaved pairs); its overhead per round is the difference within the
pair, and one verdict line per variant and target gives `met` when the median paired overhead is
within the target, with min/median/max. The memory configuration's overhead is printed too (no
target: it measures exact peaks). The exit status stays 0 (a benchmark reports; it does not gate).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.verdicts import add_quick_flag, verdict_line  # noqa: E402
from monitors import pipeline_profiler as pm  # noqa: E402

DISABLED_TARGET_S = 1e-6  # README: a disabled decorator costs well under a microsecond per call
ENABLED_TIME_ONLY_TARGET_S = 20e-6  # issue 14: enabled, no memory figure configured
CONFIGURATIONS = {  # enabled variants: name -> the metrics the production preset is run with
    "time only": {"system_memory": False, "gpu_memory": False},
    "memory": {},
}


def plain(x):
    return x


def decorated_variants(fn=plain) -> dict:
    """name -> a callable of one argument that calls `fn` once, built once (decoration cost is not
    per call). The unit tests pass a spy as `fn` to check what a disabled decorator does."""
    method = pm.profile_method("stage")(fn)
    step = pm.profile_diffusion_step(lambda args, kwargs, result: {"step_index": args[0]})(fn)
    block = pm.profile_block_computation(lambda args, kwargs, result: {"block_index": 0, "n_frames": 1})(fn)
    model = pm.profile_model_parameters(lambda args, kwargs, result: {})(fn)
    block_ctx = pm.profile_method("with_block")

    def with_block(x):
        with block_ctx:
            return fn(x)

    def event(x):
        pm.record_event("event", lambda: {"x": x})
        return fn(x)

    return {
        "profile_method": method,
        "profile_diffusion_step": step,
        "profile_block_computation": block,
        "profile_model_parameters": model,
        "with profile_method(...)": with_block,
        "record_event": event,
    }


def time_calls(fn, calls: int) -> float:
    """Seconds per call over `calls` back-to-back calls."""
    started = time.perf_counter()
    for i in range(calls):
        fn(i)
    return (time.perf_counter() - started) / calls


def measure(calls: int, enabled_calls: int, rounds: int) -> dict:
    variants = decorated_variants()
    modes = ("off", *CONFIGURATIONS)
    results: dict[str, dict[str, list[float]]] = {"undecorated": {"off": []}}
    for name in variants:
        results[name] = {mode: [] for mode in modes}
    # per variant and mode: the variant's time minus its pair's undecorated time, per call
    paired: dict[str, dict[str, list[float]]] = {name: {mode: [] for mode in modes} for name in variants}
    out_dir = tempfile.mkdtemp(prefix="pm_bench_")
    names = list(variants)

    def pair(name: str, mode: str, n: int) -> None:
        base = time_calls(plain, n)
        if mode == "off":
            results["undecorated"]["off"].append(base)
        results[name][mode].append(time_calls(variants[name], n))
        paired[name][mode].append(results[name][mode][-1] - base)

    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        pm.configure(enabled=False)
        for name in order:
            pair(name, "off", calls)
        # Enabled: inside one session per round and configuration; production-like, no files kept.
        for mode, metrics in CONFIGURATIONS.items():
            pm.configure(
                preset="production",
                report={"output_dir": out_dir, "format": "json", "trace": False},
                max_data_points=100,
                metrics=metrics,
            )
            with pm.profile_session("bench"):
                for name in order:
                    # model parameters record into the usage statistics: bounded
                    n = min(enabled_calls, 500) if name == "profile_model_parameters" else enabled_calls
                    pair(name, mode, n)
    pm.configure()
    shutil.rmtree(out_dir, ignore_errors=True)
    base = min(results["undecorated"]["off"])
    labels = {"off": "disabled", **{mode: f"enabled, {mode}" for mode in CONFIGURATIONS}}
    rows = []
    for name, by_mode in results.items():
        for mode, values in by_mode.items():
            best = min(values)
            rows.append(
                {
                    "variant": name,
                    "profiling": labels[mode],
                    "per_call_ns_min": best * 1e9,
                    "per_call_ns_median": statistics.median(values) * 1e9,
                    "overhead_ns": (best - base) * 1e9,
                    "ratio_to_undecorated": best / base,
                }
            )
    targets = {"off": DISABLED_TARGET_S, "time only": ENABLED_TIME_ONLY_TARGET_S}
    verdicts = [
        {
            "variant": name,
            "profiling": labels[mode],
            "target_ns": target * 1e9,
            "overhead_ns_min": min(paired[name][mode]) * 1e9,
            "overhead_ns_median": statistics.median(paired[name][mode]) * 1e9,
            "overhead_ns_max": max(paired[name][mode]) * 1e9,
            "passed": statistics.median(paired[name][mode]) <= target,
        }
        for mode, target in targets.items()
        for name in variants
    ]
    memory = {
        name: {
            "overhead_ns_min": min(paired[name]["memory"]) * 1e9,
            "overhead_ns_median": statistics.median(paired[name]["memory"]) * 1e9,
            "overhead_ns_max": max(paired[name]["memory"]) * 1e9,
        }
        for name in variants
    }
    return {
        "calls": calls,
        "enabled_calls": enabled_calls,
        "rounds": rounds,
        "rows": rows,
        "verdicts": verdicts,
        "memory_overheads": memory,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000, help="calls per disabled/undecorated timing")
    parser.add_argument("--enabled-calls", type=int, default=2_000, help="calls per enabled timing")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="write the figures here too")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.enabled_calls, args.rounds = 200, 20, 1
    logging.basicConfig(level=logging.WARNING)
    result = measure(args.calls, args.enabled_calls, args.rounds)
    print(f"{'variant':<28}{'profiling':<26}{'ns/call min':>12}{'median':>10}{'overhead':>12}{'ratio':>9}")
    for row in result["rows"]:
        print(
            f"{row['variant']:<28}{row['profiling']:<26}{row['per_call_ns_min']:>12.0f}"
            f"{row['per_call_ns_median']:>10.0f}{row['overhead_ns']:>12.0f}{row['ratio_to_undecorated']:>9.1f}"
        )
    print()
    for name, m in result["memory_overheads"].items():
        print(
            f"enabled, memory {name}: overhead median {m['overhead_ns_median'] / 1e3:.1f} us "
            f"(min {m['overhead_ns_min'] / 1e3:.1f}, max {m['overhead_ns_max'] / 1e3:.1f}; exact peaks, no target)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    for v in result["verdicts"]:
        print(
            verdict_line(
                v["passed"],
                f"{v['profiling']} {v['variant']} overhead <= {v['target_ns'] / 1e3:g} us",
                f"median {v['overhead_ns_median'] / 1e3:.2f} us (min {v['overhead_ns_min'] / 1e3:.2f}, "
                f"max {v['overhead_ns_max'] / 1e3:.2f}, {args.rounds} interleaved pairs)",
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

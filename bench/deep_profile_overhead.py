"""What the deep profile costs: off (the check every node makes while no deep profile is asked
for), and on (one prompt under torch.profiler against the same prompt plain), in one run.

Run from the repo root:

    python -m bench.deep_profile_overhead [--rounds 7] [--size 64] [--off-calls 200000] [--quick]

Method. Off: N node start/finish calls on an idle DeepProfileController, each timed right after N
iterations of an empty loop (interleaved pairs); the overhead per node is the difference. On: a
three-node "prompt" on the CPU (a conv stack like a sampler step, linear layers like a text
encoder, a conv decode), timed plain and then deep-profiled (the profiler started, one
record_function range per node, stopped, its events read into the deep_profile step) in
interleaved pairs; the ratio is deep / plain per pair. Targets: off, at most 1 us per node (README:
"costs one attribute read per node"); on, at most 2x the plain prompt for ops of this size (the
profiler's cost grows with the number of ops, not their size: many tiny ops cost more). The exit
status stays 0 (a benchmark reports; it does not gate).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from bench.verdicts import add_quick_flag, fmt_spread, spread, verdict_line  # noqa: E402
from monitors.deep_profile import DeepProfileController, DeepProfiler, DeepProfileSwitch, build_step  # noqa: E402

OFF_TARGET_S = 1e-6
ON_TARGET_RATIO = 2.0


def make_prompt(size: int):
    torch.manual_seed(0)
    convs = torch.nn.Sequential(*[torch.nn.Conv2d(16, 16, 3, padding=1) for _ in range(4)])
    linears = torch.nn.Sequential(*[torch.nn.Linear(size * 4, size * 4) for _ in range(4)])
    decode = torch.nn.Conv2d(16, 3, 3, padding=1)
    latent, tokens = torch.randn(1, 16, size, size), torch.randn(77, size * 4)

    def nodes():
        with torch.no_grad():
            yield "3", "KSampler", lambda: [convs(latent) for _ in range(4)]
            yield "6", "CLIPTextEncode", lambda: linears(tokens)
            yield "8", "VAEDecode", lambda: decode(convs(latent))

    return nodes


def run_plain(nodes) -> float:
    started = time.perf_counter()
    for _, _, work in nodes():
        work()
    return time.perf_counter() - started


def run_deep(nodes) -> float:
    started = time.perf_counter()
    profiler = DeepProfiler("bench", cuda=False).start()
    for node_id, class_type, work in nodes():
        profiler.node_started(node_id, class_type)
        work()
        profiler.node_finished(node_id)
    build_step(profiler, profiler.stop())
    return time.perf_counter() - started


def off_pair(calls: int) -> float:
    controller = DeepProfileController(DeepProfileSwitch(environ={}))
    started = time.perf_counter()
    for _ in range(calls):
        pass
    empty = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(calls):
        controller.node_started("3")
        controller.node_finished("3")
    return (time.perf_counter() - started - empty) / calls


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size", type=int, default=64, help="latent side and a quarter of the linear width")
    parser.add_argument("--off-calls", type=int, default=200_000)
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.size, args.off_calls = 2, 8, 2000
    torch.set_num_threads(1)
    nodes = make_prompt(args.size)
    run_plain(nodes)  # warm-up: allocator, kernels, the profiler's first start
    run_deep(nodes)
    ratios, off, plains, fixed = [], [], [], []
    for _ in range(args.rounds):
        plain = run_plain(nodes)
        ratios.append(run_deep(nodes) / plain)
        plains.append(plain)
        off.append(off_pair(args.off_calls))
        fixed.append(run_deep(lambda: iter(())) - run_plain(lambda: iter(())))  # start, stop, an empty step
    print(f"deep profile, a 3-node CPU prompt (size {args.size}, 1 thread), {args.rounds} interleaved pairs")
    print(f"  plain prompt: {fmt_spread([p * 1e3 for p in plains], '.1f', ' ms')}")
    print(f"  deep / plain wall time: {fmt_spread(ratios, '.2f', 'x')}")
    print(f"  fixed cost of a deep profile (no node): {fmt_spread([f * 1e3 for f in fixed], '.1f', ' ms')}")
    print(f"  off, per node (start + finish): {fmt_spread([v * 1e9 for v in off], '.0f', ' ns')}")
    print(
        verdict_line(
            spread(off)["median"] <= OFF_TARGET_S,
            "off: at most 1 us per node",
            fmt_spread([v * 1e9 for v in off], ".0f", " ns"),
        )
    )
    print(
        verdict_line(
            spread(ratios)["median"] <= ON_TARGET_RATIO,
            f"on: at most {ON_TARGET_RATIO:g}x the plain prompt",
            fmt_spread(ratios, ".2f", "x"),
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

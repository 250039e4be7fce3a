"""Cost of the per-node profile path itself, with the real probes (psutil, /proc, torch).

    python -m bench.node_hook_cost [--prompts 200] [--nodes 6] [--quick]

Times what the ComfyUI hook does per prompt and per node, without ComfyUI: RunRecorder.begin_run,
node_started/node_finished per node (span start and stop with exact RSS peak via clear_refs and
VmHWM, allocator counters, the row from node_profile_from_span) and end_run (prompt span, report,
in-memory store). Per-node cost is the slope between a prompt of `--nodes` nodes and an empty
prompt, timed in interleaved pairs so the noise of a shared machine falls on both sides.
Targets (issue 14): <= 0.1 ms per profiled node, <= 0.5 ms fixed per prompt (CPU time).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time

import torch  # noqa: F401  (as in ComfyUI: the torch probe reads through it)

from bench.verdicts import add_quick_flag, fmt_spread, verdict_line
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.probes import Probes

NODE_TARGET_MS = 0.1
PROMPT_TARGET_MS = 0.5


def one_prompt(recorder: RunRecorder, prompt_id: str, n_nodes: int) -> float:
    """CPU seconds (this thread) of one prompt's hook calls."""
    t0 = time.thread_time()
    recorder.begin_run(prompt_id, None)
    for i in range(n_nodes):
        recorder.node_started(str(i))
        recorder.node_finished(str(i))
    recorder.end_run("success")
    return time.thread_time() - t0


def measure(prompts: int, n_nodes: int, batch: int) -> dict:
    logging.getLogger("monitors").setLevel(logging.WARNING)  # the store logs one line per run
    recorder = RunRecorder(RunStore(None, max_runs=4), probes=Probes())
    for i in range(5):  # warm-up: imports, first /proc reads
        one_prompt(recorder, f"w{i}", n_nodes)
    per_node_ms, fixed_ms = [], []
    for r in range(prompts):
        # batch prompts per side: thread_time ticks are coarse on some kernels
        order = (0, n_nodes) if r % 2 else (n_nodes, 0)
        costs = {}
        for n in order:
            costs[n] = sum(one_prompt(recorder, f"p{r}-{n}-{b}", n) for b in range(batch)) / batch
        fixed_ms.append(costs[0] * 1000)
        per_node_ms.append((costs[n_nodes] - costs[0]) * 1000 / n_nodes)
    return {"per_node_ms": per_node_ms, "fixed_ms": fixed_ms}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=200, help="pairs (default 200)")
    parser.add_argument("--nodes", type=int, default=6, help="nodes per prompt (default 6)")
    parser.add_argument("--batch", type=int, default=5, help="prompts per side of a pair (default 5)")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.batch = 2, 1
    result = measure(args.prompts, args.nodes, args.batch)
    node, fixed = result["per_node_ms"], result["fixed_ms"]
    print(f"hook path with real probes, {args.nodes} nodes per prompt, {len(node)} pairs (CPU time, ms)")
    print(f"  per profiled node: {fmt_spread(node, '.4f', ' ms')}")
    print(f"  per prompt, fixed: {fmt_spread(fixed, '.4f', ' ms')}")
    print(
        verdict_line(
            statistics.median(node) <= NODE_TARGET_MS,
            f"per node <= {NODE_TARGET_MS} ms",
            fmt_spread(node, ".4f", " ms"),
        )
    )
    print(
        verdict_line(
            statistics.median(fixed) <= PROMPT_TARGET_MS,
            f"per prompt <= {PROMPT_TARGET_MS} ms",
            fmt_spread(fixed, ".4f", " ms"),
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

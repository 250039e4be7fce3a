"""Cost of the model-residency log on the prompt's path, without ComfyUI.

    python -m bench.model_event_cost [--rounds 200] [--events 20] [--quick]

What the model-management wrappers add to each load or unload (nodes/model_residency.py): one
RunRecorder.model_event (the running node and offset stamped, the cross-prompt memory updated, one
append to the bounded list), and what the prompt's end adds per event (the per-node and per-prompt
sums, the findings, the report's dicts). The cost per event is the slope between a prompt with
`--events` events and one without, timed in interleaved pairs. Target (issue 37): <= 0.05 ms of
CPU time per event, nothing beside a model load that moves megabytes to gigabytes.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

from bench.verdicts import add_quick_flag, fmt_spread, verdict_line
from monitors.engine.model_residency import ModelEvent
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.probes.fake import fake_probes

EVENT_TARGET_MS = 0.05
MiB = 1024 * 1024


def events(n: int) -> list[ModelEvent]:
    kinds = ("load_full", "unload_full", "unpatch", "patch", "load_partial")
    return [
        ModelEvent(kinds[i % 5], "SDXL", i % 3, i % 3, "cuda:0", 0.01, 100 * MiB, 0, 100 * MiB, 200 * MiB, 264)
        for i in range(n)
    ]


def one_prompt(recorder: RunRecorder, prompt_id: str, listed: list[ModelEvent]) -> float:
    """CPU seconds of one prompt of one node with `listed` model events."""
    t0 = time.thread_time()
    recorder.begin_run(prompt_id, None)
    recorder.node_started("3")
    for event in listed:
        recorder.model_event(event)
    recorder.node_finished("3")
    recorder.end_run("success")
    return time.thread_time() - t0


def measure(rounds: int, n_events: int, batch: int) -> list[float]:
    logging.getLogger("monitors").setLevel(logging.WARNING)
    recorder = RunRecorder(RunStore(None, max_runs=4), probes=fake_probes())
    listed = events(n_events)
    per_event_ms = []
    for r in range(rounds):
        order = ((), tuple(listed)) if r % 2 else (tuple(listed), ())
        costs = {}
        for side in order:
            costs[len(side)] = sum(one_prompt(recorder, f"p{r}-{b}", list(side)) for b in range(batch)) / batch
        per_event_ms.append((costs[n_events] - costs[0]) * 1000 / n_events)
    return per_event_ms


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=200, help="pairs (default 200)")
    parser.add_argument("--events", type=int, default=20, help="model events per prompt (default 20)")
    parser.add_argument("--batch", type=int, default=5, help="prompts per side of a pair (default 5)")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.batch = 2, 1
    per_event = measure(args.rounds, args.events, args.batch)
    print(f"model events, {args.events} per prompt, {len(per_event)} pairs (CPU time, ms)")
    print(f"  per event, recorded and reported: {fmt_spread(per_event, '.4f', ' ms')}")
    print(
        verdict_line(
            statistics.median(per_event) <= EVENT_TARGET_MS,
            f"per event <= {EVENT_TARGET_MS} ms",
            fmt_spread(per_event, ".4f", " ms"),
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Dumps without a stall (issue 35): the tensor dump node's time inside the prompt for a dump of a
large tensor, with the file written in the prompt (before) and on the writer thread (after).

    python -m bench.dump_stall [--elements 33554432] [--pairs 9] [--device cpu|cuda|auto]
        [--quick] [--json out.json]

Times monitors.dumps.report.start_dump_step, what the node does before it returns, on a CPU
float32 IMAGE-shaped tensor written to a temporary folder: "before" with a writer that writes in
the caller's thread (DumpWriter(background=False), the old path), "after" with the pack's writer
(a plain host copy, the file written on the writer thread). Pairs are interleaved, in alternating
order; after each "after" the bench waits, untimed, for its file, so a write never overlaps the
next timing. "before" also computes the tensor's statistics in the node; "after" leaves them to
the writer too (from its host copy on the CPU, read back by it on a GPU), so the ratio covers both
moves. The write's own in-prompt share (details.write.in_prompt_s) is reported beside it.
`--device cuda` (scripts/gpu_check.sh): the tensor on the GPU; "before" copies it to the host
blocking, "after" enqueues a copy into pinned memory and returns.
Target: the node's in-prompt time with the writer thread at most 0.5x the in-prompt write's,
median of the per-pair ratios.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.verdicts import add_quick_flag, chosen_device, fmt_spread, spread, verdict_line  # noqa: E402

RATIO_TARGET = 0.5
WRITE_TIMEOUT_S = 300  # a hang guard for one file


def one_dump(image, directory: str, name: str, writer) -> tuple[float, float]:
    """(the node's seconds in the prompt, the write's share of them)."""
    from monitors.dumps.report import start_dump_step

    started = time.perf_counter()
    step, ticket = start_dump_step("9", {}, {"image": image}, name, False, directory=directory, writer=writer)
    node_s = time.perf_counter() - started
    write = step.details.get("write") or {}
    in_prompt = write.get("in_prompt_s")
    if ticket is not None:  # pending: the write's in-prompt share is the copies' time
        outcome = ticket.wait(WRITE_TIMEOUT_S)
        assert outcome is not None, f"the dump was not written within {WRITE_TIMEOUT_S} s"
        assert outcome.result is not None, outcome.error
        in_prompt = outcome.in_prompt_s
    return node_s, in_prompt


def measure(elements: int, pairs: int, device: str = "cpu") -> dict:
    import torch

    from monitors.dumps.writer import DumpWriter

    logging.getLogger("monitors").setLevel(logging.WARNING)
    side = max(1, int((elements // 3) ** 0.5))
    image = torch.rand(1, side, side, 3, generator=torch.Generator().manual_seed(0)).to(device)
    writers = {"before": DumpWriter(background=False), "after": DumpWriter(max_bytes=1 << 40)}
    directory = tempfile.mkdtemp(prefix="pm-dump-stall-")
    seconds = {name: [] for name in writers}
    writes = {name: [] for name in writers}
    try:
        for name, writer in writers.items():  # warm-up: first allocation, first file
            one_dump(image, directory, f"warm_{name}", writer)
        for index in range(pairs):
            order = list(writers) if index % 2 == 0 else list(reversed(writers))
            for name in order:
                node_s, write_s = one_dump(image, directory, f"{name}_{index % 2}", writers[name])
                seconds[name].append(node_s)
                writes[name].append(write_s)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return {
        "device": device,
        "elements": int(image.numel()),
        "bytes": int(image.numel() * image.element_size()),
        "pairs": pairs,
        "node_s": seconds,
        "write_in_prompt_s": writes,
        "ratios": [a / b for a, b in zip(seconds["after"], seconds["before"], strict=True)],
    }


def verdicts(result: dict) -> list[str]:
    before = spread(result["node_s"]["before"])["median"] * 1e3
    after = spread(result["node_s"]["after"])["median"] * 1e3
    write_before = spread(result["write_in_prompt_s"]["before"])["median"] * 1e3
    write_after = spread(result["write_in_prompt_s"]["after"])["median"] * 1e3
    return [
        verdict_line(
            spread(result["ratios"])["median"] <= RATIO_TARGET,
            f"dumps without a stall: node in-prompt time <= {RATIO_TARGET:g}x the in-prompt write's "
            f"({result['bytes'] / 2**20:.0f} MiB, {result['device']})",
            f"ratio {fmt_spread(result['ratios'], '.2f')}; node {after:.1f} ms vs {before:.1f} ms, "
            f"of which the write {write_after:.1f} ms vs {write_before:.1f} ms",
        )
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=1 << 25, help="elements of the image (default 32 Mi)")
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    device = chosen_device(args.device)
    if args.quick:
        args.elements, args.pairs = 3 * 64 * 64, 2
    result = measure(args.elements, args.pairs, device)
    print(
        f"{result['elements']} float32 elements ({result['bytes'] / 2**20:.1f} MiB) on {device}, "
        f"{result['pairs']} pairs"
    )
    for name in ("before", "after"):
        print(f"  {name:<7} node in prompt: " + fmt_spread([s * 1e3 for s in result["node_s"][name]], ".1f", " ms"))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    for line in verdicts(result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Cost of the LoRA monitor's patch analysis vs materialising every delta (up @ down), on CPU.

Run from the repo root:

    python -m bench.lora_analysis [--keys 1000] [--rank 32] [--repeats 3] [--quick] [--json out.json]
    python bench/lora_analysis.py

A 1,000-key rank-32 LoRA (fp16 factors, the shapes of SD1.5's attention and feed-forward layers,
cycled) is analysed the way PipelineMonitorLora does it (monitors.lora.analysis.patch_rows: type, rank,
alpha, scale and the exact Frobenius norm of every change from r x r Gram matrices), and the same
norms are computed naively: scale * (up @ down) in float32, one full delta per key, then its norm.
Both run in the same process, alternating, median of --repeats; the ratio is analysis / naive.
Two more analysis figures add the base-weight norms (relative change), which read each base
weight once, O(weight size) per key: as the node runs after its first step on a model (the norms
cached per loaded model, monitors/lora/caches.py), and read again for every key (a model's first
step). To keep memory small the keys of one shape share one fp16 base tensor (read once per key
all the same). As a check, a sample of keys is materialised
in float64: the analysis's relative error is printed next to the naive float32 one.

Targets, one verdict line each (last), from the per-repeat ratios (the variants of one repeat run
back to back): analysis <= 0.05 of materialising (README: about 2 %), the node's default (base
norms within its budget) <= 1.5x analysis only, and the speed-up over materialising >= 0.7 of the
arithmetic limit (issue 14). That limit is the flop ratio of the two on these shapes,
sum(m n r) / sum(r^2 (m + n)): materialising costs m n r multiply-adds per key, two Gram matrices
r^2 (m + n). --quick: 20 keys, rank 4, 1 repeat.

`--device cuda` (issue 25; `auto`: cuda when torch sees one): 200 rank-32 1280x1280 fp16 pairs on
the GPU (the issue's yardstick: materialising up @ down and taking its norm), every call timed
between synchronisations; target: the analysis faster than materialising, with its one read-back.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.verdicts import add_quick_flag, chosen_device, fmt_spread, spread, verdict_line  # noqa: E402

ANALYSIS_TO_NAIVE_TARGET = 0.05
CUDA_ANALYSIS_TO_NAIVE_TARGET = 1.0  # issue 25: faster than materialising on a GPU
NODE_DEFAULT_TO_ANALYSIS_TARGET = 1.5
ARITHMETIC_LIMIT_FRACTION_TARGET = 0.7

# (out, in) of SD1.5 UNet linear layers a LoRA patches: attention q/k/v/out, cross-attention
# k/v (768-d text), GEGLU proj (2 x 4 x dim) and ff out, at widths 320, 640 and 1280.
EXACT_SAMPLE = 50  # keys checked against a float64 materialisation

SHAPES = [
    shape
    for dim in (320, 640, 1280)
    for shape in ((dim, dim), (dim, dim), (dim, 768), (dim, 768), (dim, dim), (8 * dim, dim), (dim, 4 * dim))
]


class Adapter:
    """What comfy.weight_adapter.LoRAAdapter exposes to the analysis: `.name` and `.weights`."""

    name = "lora"

    def __init__(self, weights):
        self.weights = weights


CUDA_SHAPES = [(1280, 1280)]
SYNC = [lambda: None]  # torch.cuda.synchronize on a GPU


def make_lora(n_keys: int, rank: int, seed: int = 0, device: str = "cpu") -> tuple[dict, dict]:
    """key -> [patch entry] and shape -> shared base weight."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    shapes = CUDA_SHAPES if device == "cuda" else SHAPES
    patches, bases = {}, {}
    for i in range(n_keys):
        out_dim, in_dim = shapes[i % len(shapes)]
        up = (torch.randn(out_dim, rank, generator=generator) * 0.01).half().to(device)
        down = (torch.randn(rank, in_dim, generator=generator) * 0.01).half().to(device)
        key = f"diffusion_model.layer_{i}.weight"
        patches[key] = [(0.8, Adapter((up, down, rank / 2, None, None, None)), 1.0, None, None)]
        if (out_dim, in_dim) not in bases:
            bases[(out_dim, in_dim)] = (
                (torch.randn(out_dim, in_dim, generator=generator) * 0.02).half().to(device)
            )
    return patches, bases


def naive_norms(patches: dict) -> dict[str, float]:
    """Materialise every delta like ComfyUI's calculate_weight does, then take its norm."""
    import torch

    norms = {}
    with torch.no_grad():
        for key, entries in patches.items():
            strength, adapter = entries[0][0], entries[0][1]
            up, down, alpha = adapter.weights[:3]
            delta = (strength * alpha / down.shape[0]) * (up.float() @ down.float())
            norms[key] = float(torch.linalg.vector_norm(delta))
    return norms


def exact_norms(patches: dict, keys: list[str]) -> dict[str, float]:
    """The truth for a sample of keys: the delta materialised in float64."""
    import torch

    norms = {}
    for key in keys:
        strength, adapter = patches[key][0][0], patches[key][0][1]
        up, down, alpha = adapter.weights[:3]
        norms[key] = float(
            torch.linalg.vector_norm((strength * alpha / down.shape[0]) * (up.double() @ down.double()))
        )
    return norms


def timed(fn):
    SYNC[0]()
    start = time.perf_counter()
    result = fn()
    SYNC[0]()
    return time.perf_counter() - start, result


class LoadedModel:
    """What the base-norm cache ties its norms to (a loaded model's module)."""


def run(n_keys: int, rank: int, repeats: int, device: str = "cpu") -> dict:
    import torch

    from monitors.lora.analysis import patch_rows
    from monitors.lora.caches import BaseNorms, Reuse

    if device == "cuda":
        SYNC[0] = torch.cuda.synchronize
    patches, bases = make_lora(n_keys, rank, device=device)
    model, norms = LoadedModel(), BaseNorms()
    shapes = {
        key: tuple(entries[0][1].weights[0].shape[:1] + entries[0][1].weights[1].shape[1:])
        for key, entries in patches.items()
    }

    def lookup(key):
        return bases[shapes[key]]

    times = {"analysis_s": [], "analysis_node_default_s": [], "analysis_all_base_norms_s": [], "naive_s": []}
    rows = reference = None
    patch_rows(dict(list(patches.items())[:20]))  # warm-up (allocator, kernels)
    patch_rows(patches, lookup, reuse=Reuse(model, base_norms=norms))  # the model's first step
    naive_norms(dict(list(patches.items())[:20]))
    for _ in range(repeats):
        t, rows = timed(lambda: patch_rows(patches))
        times["analysis_s"].append(t)
        t, reference = timed(lambda: naive_norms(patches))
        times["naive_s"].append(t)
        t, _ = timed(lambda: patch_rows(patches, lookup, reuse=Reuse(model, base_norms=norms)))
        times["analysis_node_default_s"].append(t)
        t, _ = timed(lambda: patch_rows(patches, lookup))
        times["analysis_all_base_norms_s"].append(t)
    medians = {name: statistics.median(values) for name, values in times.items()}
    exact = exact_norms(patches, [r["key"] for r in rows[:: max(1, len(rows) // EXACT_SAMPLE)]])
    worst = max(abs(r["delta_norm"] - exact[r["key"]]) / exact[r["key"]] for r in rows if r["key"] in exact)
    worst_naive = max(abs(reference[k] - v) / v for k, v in exact.items())
    return {
        "n_keys": n_keys,
        "rank": rank,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
        "lora_factor_bytes": sum(
            t.numel() * t.element_size() for entries in patches.values() for t in entries[0][1].weights[:2]
        ),
        "delta_elements": sum(m * n for m, n in shapes.values()),
        "arithmetic_limit": arithmetic_limit(list(shapes.values()), rank),
        **medians,
        "ratio_analysis_to_naive": medians["analysis_s"] / medians["naive_s"],
        "ratio_node_default_to_naive": medians["analysis_node_default_s"] / medians["naive_s"],
        "ratio_all_base_norms_to_naive": medians["analysis_all_base_norms_s"] / medians["naive_s"],
        "device": device,
        "n_keys_checked_in_float64": len(exact),
        "max_relative_error_analysis": worst,
        "max_relative_error_naive_float32": worst_naive,
        "all_runs": times,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    device = chosen_device(args.device)
    if device == "cuda" and "--keys" not in " ".join(argv or sys.argv):
        args.keys = 200
    if args.quick:
        args.keys, args.rank, args.repeats = 20, 4, 1
    result = run(args.keys, args.rank, args.repeats, device)
    print(
        f"LoRA analysis, {result['n_keys']} keys, rank {result['rank']}, {device} ({result['torch_threads']} "
        f"torch threads), median of {result['repeats']}:"
    )
    print(f"  analysis (delta norms)          {result['analysis_s'] * 1000:9.1f} ms")
    print(f"  + base norms cached per model   {result['analysis_node_default_s'] * 1000:9.1f} ms")
    print(f"  + base norms of every key       {result['analysis_all_base_norms_s'] * 1000:9.1f} ms")
    print(f"  naive up@down materialisation   {result['naive_s'] * 1000:9.1f} ms")
    print(f"  ratio analysis / naive          {result['ratio_analysis_to_naive']:9.4f}")
    print(f"  ratio node default / naive      {result['ratio_node_default_to_naive']:9.4f}")
    print(f"  ratio all base norms / naive    {result['ratio_all_base_norms_to_naive']:9.4f}")
    print(
        f"  arithmetic limit (flop ratio)   {result['arithmetic_limit']:9.1f}x, speed-up "
        f"{result['naive_s'] / result['analysis_s']:.1f}x"
    )
    print(
        f"  max relative error vs float64 ({result['n_keys_checked_in_float64']} keys): "
        f"analysis {result['max_relative_error_analysis']:.1e}, "
        f"naive float32 {result['max_relative_error_naive_float32']:.1e}"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    for line in verdicts(result):
        print(line)
    return 0


def arithmetic_limit(shapes: list[tuple[int, int]], rank: int) -> float:
    """How many times fewer multiply-adds two r x r Gram matrices take than materialising m x n."""
    return sum(m * n * rank for m, n in shapes) / sum(rank * rank * (m + n) for m, n in shapes)


def verdicts(result: dict) -> list[str]:
    runs = result["all_runs"]
    if result.get("device") == "cuda":
        to_naive = [a / n for a, n in zip(runs["analysis_s"], runs["naive_s"], strict=True)]
        return [
            verdict_line(
                spread(to_naive)["median"] <= CUDA_ANALYSIS_TO_NAIVE_TARGET,
                "LoRA analysis on CUDA faster than materialising up @ down",
                "ratio " + fmt_spread(to_naive, ".3f").replace("pairs", "repeats"),
            )
        ]
    limit = result["arithmetic_limit"]
    of_limit = [n / a / limit for a, n in zip(runs["analysis_s"], runs["naive_s"], strict=True)]
    to_naive = [a / n for a, n in zip(runs["analysis_s"], runs["naive_s"], strict=True)]
    node = [d / a for d, a in zip(runs["analysis_node_default_s"], runs["analysis_s"], strict=True)]
    return [
        verdict_line(
            spread(to_naive)["median"] <= ANALYSIS_TO_NAIVE_TARGET,
            f"analysis <= {ANALYSIS_TO_NAIVE_TARGET:g} of materialising",
            "ratio " + fmt_spread(to_naive, ".4f").replace("pairs", "repeats"),
        ),
        verdict_line(
            spread(node)["median"] <= NODE_DEFAULT_TO_ANALYSIS_TARGET,
            f"node default (base norms cached per model) <= {NODE_DEFAULT_TO_ANALYSIS_TARGET:g}x analysis only",
            "ratio " + fmt_spread(node, ".3f").replace("pairs", "repeats"),
        ),
        verdict_line(
            spread(of_limit)["median"] >= ARITHMETIC_LIMIT_FRACTION_TARGET,
            f"speed-up >= {ARITHMETIC_LIMIT_FRACTION_TARGET:g} of the arithmetic limit",
            f"limit {limit:.1f}x, speed-up / limit "
            + fmt_spread(of_limit, ".3f").replace("pairs", "repeats"),
        ),
    ]


if __name__ == "__main__":
    sys.exit(main())

"""`auto` vs ComfyUI's own try-direct-then-tiled, on a VAE whose direct encode exceeds a memory budget.

    COMFYUI_PATH=<ComfyUI 0.8 checkout> python -m bench.vae_chain [--frames 9] [--size 384]
        [--repeats 3] [--oom-at 0.5] [--json out.json]

A real tiny WAN 2.1 VAE (scripts/make_tiny_models.py) encodes `frames` frames of size x size on
the CPU. The memory budget is simulated around it: the free-memory reading is fixed at the budget,
and the VAE's model raises CUDA's OutOfMemoryError when the VAE's own estimate
(`memory_used_encode`) for the piece it is given exceeds the budget. The budget sits halfway
between the estimate for a 256-pixel tile and for the whole frame, so direct cannot fit and
tiles can.

- comfy: `vae.encode(pixels)`, ComfyUI's own behaviour: direct runs until the simulated OOM,
  ComfyUI catches it and retries tiled (256-pixel tiles, quarter overlap, for video VAEs).
- auto: the pack's chain with strategy auto and the same tiles: the prediction skips direct.

Where a real OOM hits inside the failed direct encode depends on the model and the input:
`--oom-at` is the fraction of the direct encode's layer calls done before the simulated OOM
(0 = at the first layer: the least work wasted, the most favourable case for ComfyUI). Each
repeat runs both in alternating order; the table shows the median time and the ratio auto/comfy
per repeat and its median, after one untimed warm-up of each. The two latents are compared too
(same tiling, so equal).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMFY_FALLBACK_TILE = 256  # what ComfyUI's VAE.encode retries video VAEs with (comfy/sd.py)


def load_tiny_wan_vae(base: str):
    spec = importlib.util.spec_from_file_location(
        "pm_make_tiny_models", os.path.join(REPO, "scripts", "make_tiny_models.py")
    )
    tiny = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tiny)
    tiny.import_comfy()  # puts COMFYUI_PATH on sys.path and sets --cpu before model_management loads
    import comfy.sd
    import comfy.utils

    paths = tiny.make_tiny_models(base)
    sd, metadata = comfy.utils.load_torch_file(paths["vae"], return_metadata=True)
    return comfy.sd.VAE(sd=sd, metadata=metadata)


class SimulatedBudget:
    """Within the context, the VAE's model raises OutOfMemoryError for pieces whose estimate exceeds
    the budget, after `oom_after_calls` leaf-layer calls of that piece."""

    def __init__(self, vae, budget_bytes: int, oom_after_calls: int):
        self.vae, self.budget, self.oom_after_calls = vae, budget_bytes, oom_after_calls
        self.model = vae.first_stage_model
        self.armed, self.calls, self.estimate, self.ooms = False, 0, 0, 0
        self._hooks = []

    def __enter__(self):
        self._original = self.model.encode
        self.model.encode = self._encode
        for module in self.model.modules():
            if not list(module.children()):
                self._hooks.append(module.register_forward_hook(self._hook))
        return self

    def __exit__(self, *exc):
        del self.model.encode  # the instance attribute: the class's method shows through again
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def _encode(self, x, *args, **kwargs):
        import torch

        self.estimate = int(self.vae.memory_used_encode(x.shape, self.vae.vae_dtype))
        self.armed, self.calls = self.estimate > self.budget, 0
        try:
            if self.armed and self.oom_after_calls == 0:
                self._raise(torch)
            return self._original(x, *args, **kwargs)
        finally:
            self.armed = False

    def _hook(self, module, inputs, output):
        if self.armed:
            self.calls += 1
            if self.calls >= self.oom_after_calls:
                import torch

                self._raise(torch)

    def _raise(self, torch):
        self.armed = False
        self.ooms += 1
        raise torch.cuda.OutOfMemoryError(
            f"simulated: estimate {self.estimate / 2**30:.2f} GiB > budget {self.budget / 2**30:.2f} GiB"
        )


def count_layer_calls(vae, pixels) -> tuple[int, float]:
    """Leaf-layer calls of one direct encode, and its time (no budget)."""
    import torch

    counter = SimulatedBudget(vae, budget_bytes=-1, oom_after_calls=10**12)  # armed, never raises
    with counter, torch.inference_mode():
        started = time.perf_counter()
        vae.encode(pixels)
        elapsed = time.perf_counter() - started
    return counter.calls, elapsed


def run(frames: int, size: int, repeats: int, oom_at: float) -> dict:
    import torch

    from monitors.vae.chain import ChainOptions, TileSettings, run_chain
    from monitors.vae.geometry import encode_input_shape, tile_input_shape

    with tempfile.TemporaryDirectory(prefix="pm_bench_vae_") as base:
        vae = load_tiny_wan_vae(base)
    pixels = torch.rand(frames, size, size, 3, generator=torch.Generator().manual_seed(0))
    tiles = TileSettings(COMFY_FALLBACK_TILE, COMFY_FALLBACK_TILE // 4, 64, 8)
    direct_need = vae.memory_used_encode(encode_input_shape(vae, pixels.shape), vae.vae_dtype)
    tile_need = vae.memory_used_encode(tile_input_shape(vae, pixels.shape, tiles), vae.vae_dtype)
    if tile_need >= direct_need:
        sys.exit(f"--size {size} must exceed {COMFY_FALLBACK_TILE} so that tiles need less than direct")
    budget = (direct_need + tile_need) // 2
    count_layer_calls(vae, pixels)  # warm-up
    layer_calls, direct_unbudgeted_s = count_layer_calls(vae, pixels)
    oom_after = int(oom_at * layer_calls)
    options = ChainOptions(
        strategy="auto", tiles=tiles, free_memory=lambda device: budget, cleanup=gc.collect
    )

    def comfy_way():
        with torch.inference_mode():
            return vae.encode(pixels), None

    def auto_way():
        result = run_chain(vae, pixels, options)
        assert result.strategy_used == "tiled", result.attempts
        return result.samples, result

    times = {"comfy": [], "auto": []}
    outputs = {}
    with SimulatedBudget(vae, budget, oom_after) as simulated:
        comfy_way(), auto_way()  # warm-up: first tiled runs allocate and tune more
        simulated.ooms = 0
        for repeat in range(repeats):
            order = ("comfy", "auto") if repeat % 2 == 0 else ("auto", "comfy")
            for name in order:
                gc.collect()
                started = time.perf_counter()
                latent, _ = comfy_way() if name == "comfy" else auto_way()
                times[name].append(time.perf_counter() - started)
                outputs[name] = latent
        ooms = simulated.ooms
    ratios = [a / c for a, c in zip(times["auto"], times["comfy"], strict=True)]
    return {
        "frames": frames,
        "size": size,
        "repeats": repeats,
        "budget_bytes": int(budget),
        "direct_estimate_bytes": int(direct_need),
        "tile_estimate_bytes": int(tile_need),
        "oom_at_fraction": oom_at,
        "direct_layer_calls": layer_calls,
        "oom_after_layer_calls": oom_after,
        "simulated_ooms": ooms,
        "direct_unbudgeted_s": direct_unbudgeted_s,
        "comfy_s": times["comfy"],
        "auto_s": times["auto"],
        "comfy_median_s": statistics.median(times["comfy"]),
        "auto_median_s": statistics.median(times["auto"]),
        "ratio_auto_over_comfy": ratios,
        "ratio_median": statistics.median(ratios),
        "latents_max_abs_diff": float((outputs["comfy"] - outputs["auto"]).abs().max()),
        "latent_shape": list(outputs["auto"].shape),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=9)
    parser.add_argument("--size", type=int, default=384, help="frame width and height in pixels (> 256)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--oom-at", type=float, default=0.5, help="fraction of the direct encode done before the OOM"
    )
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    figures = run(args.frames, args.size, args.repeats, args.oom_at)
    gib = 2**30
    print(
        f"tiny WAN 2.1 VAE, {figures['frames']} frames {figures['size']}x{figures['size']} -> {figures['latent_shape']}; "
        f"estimate direct {figures['direct_estimate_bytes'] / gib:.2f} GiB, 256-px tile "
        f"{figures['tile_estimate_bytes'] / gib:.2f} GiB, budget {figures['budget_bytes'] / gib:.2f} GiB"
    )
    print(
        f"simulated OOM after {figures['oom_after_layer_calls']} of {figures['direct_layer_calls']} layer calls "
        f"(--oom-at {figures['oom_at_fraction']}); direct without a budget {figures['direct_unbudgeted_s']:.2f} s"
    )
    print(f"{'run':<6} {'comfy (s)':>10} {'auto (s)':>9} {'auto/comfy':>11}")
    for index, (c, a, r) in enumerate(
        zip(figures["comfy_s"], figures["auto_s"], figures["ratio_auto_over_comfy"], strict=True)
    ):
        print(f"{index + 1:<6} {c:>10.2f} {a:>9.2f} {r:>11.3f}")
    print(
        f"median {figures['comfy_median_s']:>9.2f} {figures['auto_median_s']:>9.2f} {figures['ratio_median']:>11.3f}"
        f"   (latents max abs diff {figures['latents_max_abs_diff']:.2e})"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

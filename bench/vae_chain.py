"""`auto` vs ComfyUI's own try-direct-then-tiled vs tiled only, under a memory budget that real
allocations exceed (not the VAE's estimate), with ComfyUI's estimate too high, right and too low.

    COMFYUI_PATH=<ComfyUI 0.8 checkout> python -m bench.vae_chain [--frames 1] [--size 288]
        [--repeats 10] [--cases ...] [--quick] [--json out.json]

A real tiny WAN 2.1 VAE (scripts/make_tiny_models.py) encodes `frames` frames of size x size on
the CPU. Out of memory is modelled from what the encode really allocates: a TorchDispatchMode
around the VAE model's encode counts the bytes of every new tensor storage while it lives (freed
when the storage is), and raises CUDA's OutOfMemoryError the moment the live total exceeds the
budget, wherever in the encode that happens. `auto` never sees this rule: it reads the budget as
the device's free memory and predicts from the VAE's own estimate (`memory_used_encode`), which
each case rescales against the measured peak of a direct encode:

- estimate too high (2x the real peak), budget 1.25x the real direct peak: direct fits, and the
  raw estimate says it does not;
- estimate right (1x), budget halfway between a tile's real peak and direct's: direct does not
  fit; ComfyUI runs out partway and retries tiled;
- estimate too low (0.5x), the same budget: the raw estimate says direct fits; it runs out.
  (On this VAE direct survives both "halfway" budgets: its attention retries in slices.)
- only tiles fit (1x), budget 1.02x a tile's real peak: direct runs out even in slices, and
  ComfyUI's encode retries tiled inside; auto learns that from its first encode and then tiles.
`auto` calibrates the estimate by what its own earlier encodes measured (monitors/vae/calibration.py;
its peaks are read from the modelled device's counters, see modelled_device_probes): each case starts it with an empty table, its
untimed warm-up is its first, uncalibrated encode, and the output names the strategies it used.
Variants, the chain with its default tiles (ComfyUI's own retry tiling for the VAE's
dimensionality: for this video VAE 256-pixel tiles, overlap 64, all frames at once): comfy =
`vae.encode(pixels)`; auto = the pack's chain, strategy auto; tiled = the chain with strategy
tiled (the yardstick: what always works). Each repeat runs the three in rotating order after one
untimed warm-up; per-pair ratios auto/comfy and auto/tiled give min/median/max. Target per case:
auto no slower than ComfyUI's own behaviour (median auto/comfy <= 1.05); one verdict line each.
Before the cases, with no budget: the chain's tiled strategy against ComfyUI's own fallback
tiling alone (VAE.encode's branch after out of memory), `repeats` pairs in alternating order,
target median <= 1.05, with the latents' differences (tiled vs fallback, each vs direct).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import sys
import tempfile
import time
import weakref

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.verdicts import add_quick_flag, fmt_spread, spread, verdict_line  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMFY_TILED_RETRY_WARNING = "Ran out of memory when regular VAE encoding"  # nodes/vae_encode_node.py
COMFY_FALLBACK_TILE = 256  # what ComfyUI's VAE.encode retries video VAEs with (comfy/sd.py)
RATIO_TARGET = 1.05
CASES = {  # name -> (estimate / real direct peak, budget: "fits" | "halfway" | "tile")
    "estimate too high": (2.0, "fits"),
    "estimate right": (1.0, "halfway"),
    "estimate too low": (0.5, "halfway"),
    "only tiles fit": (1.0, "tile"),
}
FITS_BUDGET = 1.25  # budget / real direct peak for "fits"
TILE_BUDGET = 1.02  # budget / a tile's real peak for "tile": direct cannot fit even in slices
VARIANTS = ("comfy", "auto", "tiled")


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


class AllocationBudget:
    """Within the context, the VAE model's encode raises OutOfMemoryError when the bytes of the
    tensor storages it allocated and still holds exceed `budget_bytes` (None: never; the peak is
    measured either way). Each model encode call (a whole input or one tile) starts from zero."""

    def __init__(self, vae, budget_bytes: int | None):
        self.model, self.budget = vae.first_stage_model, budget_bytes
        self.peak_bytes, self.ooms = 0, 0
        # The modelled device's allocator counters: live bytes and their high-water mark, which
        # (like torch's allocator peak on a GPU) never counts an allocation that failed.
        self.live_now_bytes, self.hwm_bytes = 0, 0

    def __enter__(self):
        self._original = self.model.encode
        self.model.encode = self._encode
        return self

    def __exit__(self, *exc):
        del self.model.encode  # the instance attribute: the class's method shows through again

    def _encode(self, x, *args, **kwargs):
        with _LiveBytes(self) as live:
            try:
                return self._original(x, *args, **kwargs)
            finally:
                self.peak_bytes = max(self.peak_bytes, live.peak)


def _live_bytes_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    class LiveBytes(TorchDispatchMode):
        def __init__(self, owner: AllocationBudget):
            super().__init__()
            self.owner, self.live, self.peak, self.sizes = owner, 0, 0, {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            import torch

            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if not isinstance(t, torch.Tensor):
                    continue
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key and key not in self.sizes:
                    self.sizes[key] = storage.nbytes()
                    self.live += self.sizes[key]
                    self.owner.live_now_bytes += self.sizes[key]
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(storage, self._freed, key)
            budget = self.owner.budget
            if budget is not None and self.live > budget:
                self.owner.ooms += 1
                raise torch.cuda.OutOfMemoryError(
                    f"modelled: {self.live / 2**20:.1f} MiB live > budget {budget / 2**20:.1f} MiB"
                )
            self.owner.hwm_bytes = max(self.owner.hwm_bytes, self.owner.live_now_bytes)
            return out

        def _freed(self, key):
            size = self.sizes.pop(key, 0)
            self.live -= size
            self.owner.live_now_bytes -= size

    return LiveBytes


def _LiveBytes(owner):  # noqa: N802 - reads as the class it builds
    return _live_bytes_mode()(owner)


def modelled_device_probes(holder: dict):
    """Probes whose RSS counters read the modelled device (holder["budget"], an AllocationBudget):
    the chain measures each attempt's peak in the same bytes the out-of-memory rule counts, as
    torch's allocator peak does on a GPU. (The process's real RSS rise on this CPU is about twice
    those bytes: convolution workspaces and the allocator's own, which the model does not count.)"""
    from monitors.probes import Probes
    from monitors.probes.fake import FakeHost, FakeNvml, FakeTorchAllocator

    class ModelledDevice(FakeHost):
        def process_rss_bytes(self):
            budget = holder.get("budget")
            return 0 if budget is None else budget.live_now_bytes

        def reset_peak_rss(self):
            budget = holder.get("budget")
            if budget is not None:
                budget.hwm_bytes = budget.live_now_bytes
            return True

        def peak_rss_bytes(self):
            budget = holder.get("budget")
            return 0 if budget is None else budget.hwm_bytes

    return Probes(host=ModelledDevice(), torch_alloc=FakeTorchAllocator(0), nvml=FakeNvml(0))


class ScaledEstimate:
    """Within the context, the VAE's memory_used_encode returns `factor` times the original (the
    shape dependence stays ComfyUI's)."""

    def __init__(self, vae, factor: float):
        self.vae, self.factor = vae, factor

    def __enter__(self):
        self._original = self.vae.memory_used_encode
        self.vae.memory_used_encode = lambda shape, dtype: self.factor * self._original(shape, dtype)
        return self

    def __exit__(self, *exc):
        self.vae.memory_used_encode = self._original


def timed(fn) -> tuple[float, object]:
    gc.collect()
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def run(frames: int, size: int, repeats: int, cases=tuple(CASES), warm_up: bool = True) -> dict:
    import torch

    from monitors.vae.calibration import CalibrationTable
    from monitors.vae.chain import run_chain
    from monitors.vae.geometry import encode_input_shape
    from monitors.vae.outcomes import ChainOptions

    with tempfile.TemporaryDirectory(prefix="pm_bench_vae_") as base:
        vae = load_tiny_wan_vae(base)
    pixels = torch.rand(frames, size, size, 3, generator=torch.Generator().manual_seed(0))
    tiles = None  # the chain's default for library callers: ComfyUI's own retry tiling for this VAE
    if size <= COMFY_FALLBACK_TILE:
        sys.exit(f"--size {size} must exceed {COMFY_FALLBACK_TILE} so that tiles need less than direct")

    def comfy_way():
        with torch.inference_mode():
            return vae.encode(pixels)

    def comfy_fallback_tiling():
        """What VAE.encode runs after out of memory (comfy/sd.py, its do_tile branch), alone."""
        with torch.inference_mode():
            px = vae.vae_encode_crop_pixels(pixels).movedim(-1, 1)
            if vae.latent_dim == 3:
                px = px.unsqueeze(2) if vae.not_video else px.movedim(1, 0).unsqueeze(0)
                overlap = COMFY_FALLBACK_TILE // 4
                return vae.encode_tiled_3d(
                    px, tile_x=COMFY_FALLBACK_TILE, tile_y=COMFY_FALLBACK_TILE, overlap=(1, overlap, overlap)
                )
            return vae.encode_tiled_(px)

    chain_tiles = {}
    modelled = {}  # "budget": the AllocationBudget the chain's probes read
    device_probes = modelled_device_probes(modelled)
    auto_log = []  # (strategy used, calibration source) of each auto run of the current case

    def chain_way(strategy, budget, calibration=None):
        options = ChainOptions(
            strategy=strategy,
            tiles=tiles,
            free_memory=lambda device: budget,
            cleanup=gc.collect,
            calibration=calibration,
            probes=device_probes,
            # as the node does: a direct attempt that retried tiled inside ran out of memory
            watch_log_messages=(COMFY_TILED_RETRY_WARNING,),
        )
        result = run_chain(vae, pixels, options)
        if result.samples is None:
            raise RuntimeError(f"{strategy} produced no latent: {result.attempts}")
        chain_tiles.update(result.tiles.__dict__)
        if calibration is not None:
            prediction = result.predictions.get("direct")
            auto_log.append(
                (result.strategy_used, None if prediction is None else prediction.calibration_source)
            )
        return result.samples, result.strategy_used

    with AllocationBudget(vae, None) as measure:  # real peaks, no budget
        direct_s, direct_latent = timed(comfy_way)
        direct_peak = measure.peak_bytes
        measure.peak_bytes = 0
        tiled_s, (tiled_latent, _) = timed(lambda: chain_way("tiled", None))
        tile_peak = measure.peak_bytes
        # the chain's tiled strategy against ComfyUI's own fallback tiling, side by side
        fallback_latent = comfy_fallback_tiling()
        tiling = {"tiled": [], "comfy_fallback": []}
        for repeat in range(repeats):
            order = ("tiled", "comfy_fallback") if repeat % 2 == 0 else ("comfy_fallback", "tiled")
            for name in order:
                fn = (lambda: chain_way("tiled", None)) if name == "tiled" else comfy_fallback_tiling
                tiling[name].append(timed(fn)[0])
    original_estimate = vae.memory_used_encode(encode_input_shape(vae, pixels.shape), vae.vae_dtype)
    figures = {
        "frames": frames,
        "size": size,
        "repeats": repeats,
        "direct_peak_bytes": direct_peak,
        "tile_peak_bytes": tile_peak,
        "comfy_estimate_bytes": int(original_estimate),
        "comfy_estimate_over_real": original_estimate / direct_peak,
        "direct_unbudgeted_s": direct_s,
        "tiled_unbudgeted_s": tiled_s,
        "chain_tiles": dict(chain_tiles),
        "tiling_seconds": tiling,
        "tiled_over_comfy_fallback": [
            t / c for t, c in zip(tiling["tiled"], tiling["comfy_fallback"], strict=True)
        ],
        "tiled_vs_comfy_fallback_max_abs_diff": float((tiled_latent - fallback_latent).abs().max()),
        "tiled_vs_direct_max_abs_diff": float((tiled_latent - direct_latent).abs().max()),
        "comfy_fallback_vs_direct_max_abs_diff": float((fallback_latent - direct_latent).abs().max()),
        "cases": {},
    }
    if tile_peak >= direct_peak:
        sys.exit(f"a tile's real peak {tile_peak} B is not below direct's {direct_peak} B: raise --size")
    for case in cases:
        estimate_factor, budget_rule = CASES[case]
        budget = {
            "fits": int(FITS_BUDGET * direct_peak),
            "halfway": (tile_peak + direct_peak) // 2,
            "tile": int(TILE_BUDGET * tile_peak),
        }[budget_rule]
        scale = estimate_factor * direct_peak / original_estimate
        times = {name: [] for name in VARIANTS}
        used, latents = {}, {}
        # Each case models another VAE (its own estimate), so auto learns afresh from its own
        # encodes only (the tiled yardstick and the unbudgeted runs teach it nothing); the warm-up
        # is auto's first, uncalibrated encode.
        table = CalibrationTable()
        auto_log.clear()
        with ScaledEstimate(vae, scale), AllocationBudget(vae, budget) as budgeted:
            modelled["budget"] = budgeted
            runs = {
                "comfy": lambda: (comfy_way(), "comfy"),
                "auto": lambda budget=budget, table=table: chain_way("auto", budget, table),
                "tiled": lambda budget=budget: chain_way("tiled", budget),
            }
            if warm_up:
                for name in VARIANTS:
                    runs[name]()
            budgeted.ooms = 0
            for repeat in range(repeats):
                order = VARIANTS[repeat % 3 :] + VARIANTS[: repeat % 3]
                for name in order:
                    elapsed, (latent, strategy) = timed(runs[name])
                    times[name].append(elapsed)
                    used[name], latents[name] = strategy, latent
            ooms = budgeted.ooms
        figures["cases"][case] = {
            "estimate_factor": estimate_factor,
            "budget_rule": budget_rule,
            "budget_bytes": budget,
            "modelled_ooms": ooms,
            "auto_strategy": used["auto"],
            "auto_first_strategy": auto_log[0][0],
            "auto_strategies": [strategy for strategy, _ in auto_log],
            "auto_last_calibration": auto_log[-1][1],
            "seconds": times,
            "auto_over_comfy": [a / c for a, c in zip(times["auto"], times["comfy"], strict=True)],
            "auto_over_tiled": [a / t for a, t in zip(times["auto"], times["tiled"], strict=True)],
            "comfy_over_tiled": [c / t for c, t in zip(times["comfy"], times["tiled"], strict=True)],
            "latents_max_abs_diff_auto_comfy": float((latents["auto"] - latents["comfy"]).abs().max()),
        }
    return figures


def verdicts(figures: dict) -> list[str]:
    lines = [
        verdict_line(
            spread(figures["tiled_over_comfy_fallback"])["median"] <= RATIO_TARGET,
            f"tiled strategy/ComfyUI's fallback tiling <= {RATIO_TARGET} (no budget)",
            f"{fmt_spread(figures['tiled_over_comfy_fallback'], '.3f')}; tiles {_tiles_text(figures)}; "
            f"latents tiled vs fallback max abs diff {figures['tiled_vs_comfy_fallback_max_abs_diff']:.2e}",
        )
    ]
    for case, c in figures["cases"].items():
        lines.append(
            verdict_line(
                spread(c["auto_over_comfy"])["median"] <= RATIO_TARGET,
                f"{case}: auto/comfy <= {RATIO_TARGET}",
                f"auto/comfy {fmt_spread(c['auto_over_comfy'], '.3f')}; auto/tiled-only "
                f"{spread(c['auto_over_tiled'])['median']:.3f}, comfy/tiled-only "
                f"{spread(c['comfy_over_tiled'])['median']:.3f}; auto used {_strategies_text(c)}",
            )
        )
    return lines


def _strategies_text(c: dict) -> str:
    counts = {s: c["auto_strategies"].count(s) for s in dict.fromkeys(c["auto_strategies"])}
    return f"{', '.join(f'{s} x{n}' for s, n in counts.items())} (first, uncalibrated: {c['auto_first_strategy']})"


def _tiles_text(figures: dict) -> str:
    t = figures["chain_tiles"]
    temporal = (
        "all frames"
        if t.get("temporal_size") is None
        else f"{t['temporal_size']}/{t['temporal_overlap']} frames"
    )
    return f"{t.get('tile_size')} px overlap {t.get('overlap')}, {temporal} ({t.get('source')})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1)
    parser.add_argument(
        "--size", type=int, default=288, help="frame width and height in pixels (> 256; up to 448: 2x2 tiles)"
    )
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", help="write the figures to this file")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:  # one case: the encodes are seconds each on a CPU
        args.frames, args.size, args.repeats, args.cases = 1, 264, 1, ["estimate right"]
    figures = run(args.frames, args.size, args.repeats, args.cases, warm_up=not args.quick)
    mib = 2**20
    print(
        f"tiny WAN 2.1 VAE, {figures['frames']} frame(s) {figures['size']}x{figures['size']}: real peak direct "
        f"{figures['direct_peak_bytes'] / mib:.1f} MiB, 256-px tile {figures['tile_peak_bytes'] / mib:.1f} MiB; "
        f"ComfyUI's estimate {figures['comfy_estimate_bytes'] / mib:.0f} MiB "
        f"({figures['comfy_estimate_over_real']:.1f}x the real peak); unbudgeted direct "
        f"{figures['direct_unbudgeted_s']:.2f} s, tiled {figures['tiled_unbudgeted_s']:.2f} s"
    )
    print(
        f"tiles: {_tiles_text(figures)}; tiled vs ComfyUI's fallback tiling (no budget, {figures['repeats']} pairs): "
        f"{fmt_spread(figures['tiled_over_comfy_fallback'], '.3f')}; latents max abs diff tiled vs fallback "
        f"{figures['tiled_vs_comfy_fallback_max_abs_diff']:.2e}, tiled vs direct "
        f"{figures['tiled_vs_direct_max_abs_diff']:.2e}, fallback vs direct "
        f"{figures['comfy_fallback_vs_direct_max_abs_diff']:.2e}"
    )
    print(
        f"{'case':<20}{'budget MiB':>11}{'OOMs':>6}{'auto used':>10}{'comfy s':>9}{'auto s':>8}{'tiled s':>9}"
    )
    for case, c in figures["cases"].items():
        med = {name: spread(c["seconds"][name])["median"] for name in VARIANTS}
        print(
            f"{case:<20}{c['budget_bytes'] / mib:>11.1f}{c['modelled_ooms']:>6}{c['auto_strategy']:>10}"
            f"{med['comfy']:>9.2f}{med['auto']:>8.2f}{med['tiled']:>9.2f}"
            f"   (latents auto vs comfy max abs diff {c['latents_max_abs_diff_auto_comfy']:.2e})"
        )
    for case, c in figures["cases"].items():
        print(f"{case}: auto's last calibration: {c['auto_last_calibration'] or 'none'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(figures, f, indent=1)
    for line in verdicts(figures):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where the LoRA monitor's time goes: its step on the full-size SD1.5 checkpoint and LoRA, in process.

    COMFYUI_PATH=<ComfyUI> python -m bench.lora_step_profile --base DIR [--device cpu|cuda|auto]
        [--repeats 5] [--top 25] [--against OLDER_PACK_DIR]

Loads the checkpoint with ComfyUI's own nodes (CheckpointLoaderSimple, then LoraLoader at a new
strength each run, as a user trying strengths does: one LoraLoader object, which keeps the file's
tensors, as ComfyUI's executor keeps a node's object between prompts) and builds the `lora` step the way
PipelineMonitorLora does. Prints the wall time of the first step (the file seen the first time) and
of the repeats (min/median/max), then cProfile's top functions of one repeat, by cumulative and by
own time. The files come from `scripts/make_models.py BASE --full-size` (generated when missing).
Verdicts (issue 25): a repeat <= 0.1 of the first step; on CUDA also a repeat <= 20 ms and the
first <= 60 ms. Issue 35: a repeat <= 10 ms on a CPU, <= 5 ms on CUDA. `--against DIR` loads an
older checkout of the pack beside this one (its own module names, its own caches) and times its
step on the same patched model right next to this one's, in alternating order: the pairs'
min/median/max ratio says what the change gained. --quick: one repeat, the top 5 functions.
On `cuda` ComfyUI keeps its models on the GPU as in a real run; a host read-back waits for the
queue, so the time of a step includes any wait it causes.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib
import io
import logging
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.verdicts import add_quick_flag, chosen_device, fmt_spread, verdict_line  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CHECKPOINT = "pm_sd15_full.safetensors"
LORA = "pm_sd15_full_lora.safetensors"
REPEAT_TO_FIRST_TARGET = 0.1
GPU_REPEAT_TARGET_S = 0.020
GPU_FIRST_TARGET_S = 0.060
CPU_REPEAT_TARGET_S = 0.010  # issue 35
GPU_REPEAT_TARGET_35_S = 0.005
log = logging.getLogger("bench.lora_step_profile")


def import_comfyui(comfy_path: str, cpu: bool, scratch: str):
    """ComfyUI's nodes module, imported in this process with the pack loaded."""
    sys.path.insert(0, comfy_path)
    import comfy.cli_args

    comfy.cli_args.args.cpu = cpu
    importlib.import_module("comfy.model_management")
    importlib.import_module("utils.extra_config")
    server = importlib.import_module("server")

    class StubServer:
        def __init__(self):
            from aiohttp import web

            self.routes, self.client_id = web.RouteTableDef(), None

        def send_sync(self, *args, **kwargs):
            pass

    server.PromptServer.instance = StubServer()
    folder_paths = importlib.import_module("folder_paths")
    for setter, sub in (
        (folder_paths.set_output_directory, "output"),
        (folder_paths.set_temp_directory, "temp"),
    ):
        os.makedirs(os.path.join(scratch, sub), exist_ok=True)
        setter(os.path.join(scratch, sub))
    nodes = importlib.import_module("nodes")
    if not asyncio.run(nodes.load_custom_node(str(REPO))):
        raise RuntimeError("ComfyUI could not load the pack")
    return nodes, folder_paths


def prompt(strength: float) -> dict:
    return {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": CHECKPOINT}},
        "3": {
            "class_type": "LoraLoader",
            "inputs": {
                "model": ["1", 0],
                "clip": ["1", 1],
                "lora_name": LORA,
                "strength_model": strength,
                "strength_clip": strength,
            },
        },
        "4": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["3", 0], "clip": ["3", 1]}},
    }


def pack_modules(package: str) -> tuple:
    """(monitors.lora.report, nodes.lora_keys) of the pack loaded under `package`."""
    return (
        importlib.import_module(f"{package}.monitors.lora.report"),
        importlib.import_module(f"{package}.nodes.lora_keys"),
    )


def profile_text(profiler: cProfile.Profile, top: int) -> str:
    out = io.StringIO()
    for order in ("cumulative", "tottime"):
        pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(top)
    return out.getvalue().replace(str(REPO) + os.sep, "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--base", required=True, help="folder with models/ (full-size files made when missing)"
    )
    parser.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--against", help="an older checkout of the pack, timed side by side")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.top = 1, 5
    logging.basicConfig(level=logging.WARNING)

    device = chosen_device(args.device)
    comfy_path = os.environ.get("COMFYUI_PATH")
    if not comfy_path:
        parser.error("set COMFYUI_PATH to a ComfyUI checkout")
    base = Path(args.base).resolve()
    sys.path.insert(0, str(REPO / "scripts"))
    importlib.import_module("make_models").make_full_size(str(base))
    nodes, folder_paths = import_comfyui(
        comfy_path, device == "cpu", tempfile.mkdtemp(prefix="pm_lora_profile_")
    )
    folder_paths.add_model_folder_path("checkpoints", str(base / "models" / "checkpoints"))
    folder_paths.add_model_folder_path("loras", str(base / "models" / "loras"))
    package = nodes.NODE_CLASS_MAPPINGS["PipelineMonitorLora"].__module__.rsplit(".", 2)[0]
    packs = {"this": pack_modules(package)}
    if args.against:
        older = str(Path(args.against).resolve())
        if not asyncio.run(nodes.load_custom_node(older)):
            raise RuntimeError(f"ComfyUI could not load the pack at {older}")
        packs["before"] = pack_modules(older.replace(".", "_x_"))
    model, clip = nodes.CheckpointLoaderSimple().load_checkpoint(CHECKPOINT)[:2]

    loader = nodes.LoraLoader()  # one node object, as ComfyUI's executor keeps it per node id

    def patched(strength: float) -> tuple:
        return loader.load_lora(model, clip, LORA, strength, strength)

    def timed(pack: str, strength: float, models: tuple, profiler: cProfile.Profile | None = None) -> float:
        report, keys = packs[pack]
        patched_model, patched_clip = models
        began = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        built = report.build_lora_step(
            "4",
            prompt(strength),
            patched_model,
            patched_clip,
            lora_path=keys.lora_path,
            coverage=keys.recompute_coverage,
            calculate=keys.calculate_weight,
            returned=(patched_model, patched_clip),
        )
        if profiler is not None:
            profiler.disable()
        took = time.perf_counter() - began
        if built.monitor_errors:
            log.warning("monitor errors: %s", built.monitor_errors)
        return took

    def step(strength: float, profiler: cProfile.Profile | None = None) -> float:
        return timed("this", strength, patched(strength), profiler)

    if "before" in packs:
        timed("before", 1.0, patched(1.0))  # its first, unmeasured
    first = step(1.0)
    repeats, before = [], []
    for i in range(args.repeats):
        strength = round(1.5 - 0.07 * (i % 20), 3)  # a new strength each time, never 0
        models = patched(strength)
        order = ("this", "before") if i % 2 == 0 else ("before", "this")
        for pack in order if "before" in packs else ("this",):
            (repeats if pack == "this" else before).append(timed(pack, strength, models))
    profiler = cProfile.Profile()
    step(0.25, profiler)
    repeat = statistics.median(repeats)
    print(
        f"LoRA step on the full-size SD1.5 files, {device}: first {first * 1000:.1f} ms; repeated with a new "
        f"strength: {fmt_spread([r * 1000 for r in repeats], '.1f', ' ms')}"
    )
    if before:
        print(
            f"  the older pack on the same models, side by side: {fmt_spread([b * 1000 for b in before], '.1f', ' ms')}"
        )
        print(
            f"  this / older, per pair: {fmt_spread([r / b for r, b in zip(repeats, before, strict=True)])}"
        )
    print(profile_text(profiler, args.top))
    print(
        verdict_line(
            repeat <= REPEAT_TO_FIRST_TARGET * first,
            f"LoRA step, same file and a new strength <= {REPEAT_TO_FIRST_TARGET} x its first",
            f"{repeat:.4f} s / {first:.4f} s = {repeat / first:.3f}",
        )
    )
    target = GPU_REPEAT_TARGET_35_S if device == "cuda" else CPU_REPEAT_TARGET_S
    print(
        verdict_line(
            repeat <= target,
            f"LoRA step <= {target * 1000:g} ms on {device} when only the strength changed (issue 35)",
            fmt_spread([r * 1000 for r in repeats], ".1f", " ms"),
        )
    )
    if device == "cuda":
        print(
            verdict_line(
                repeat <= GPU_REPEAT_TARGET_S,
                "LoRA step <= 20 ms when only the strength changed",
                f"median {repeat * 1000:.1f} ms",
            )
        )
        print(
            verdict_line(
                first <= GPU_FIRST_TARGET_S,
                "LoRA step <= 60 ms for a file seen the first time",
                f"{first * 1000:.1f} ms",
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

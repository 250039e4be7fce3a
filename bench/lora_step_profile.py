"""Where the LoRA monitor's time goes: its step on the full-size SD1.5 checkpoint and LoRA, in process.

    COMFYUI_PATH=<ComfyUI> python -m bench.lora_step_profile --base DIR [--device cpu|cuda|auto]
        [--repeats 5] [--top 25]

Loads the checkpoint with ComfyUI's own nodes (CheckpointLoaderSimple, then LoraLoader at a new
strength each run, as a user trying strengths does) and builds the `lora` step the way
PipelineMonitorLora does. Prints the wall time of the first step (the file seen the first time) and
of the repeats (min/median/max), then cProfile's top functions of one repeat, by cumulative and by
own time. The files come from `scripts/make_models.py BASE --full-size` (generated when missing).
Verdicts (issue 25): a repeat <= 0.1 of the first step; on CUDA also a repeat <= 20 ms and the
first <= 60 ms. --quick: one repeat, the top 5 functions.
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

from bench.verdicts import add_quick_flag, fmt_spread, verdict_line  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CHECKPOINT = "pm_sd15_full.safetensors"
LORA = "pm_sd15_full_lora.safetensors"
REPEAT_TO_FIRST_TARGET = 0.1
GPU_REPEAT_TARGET_S = 0.020
GPU_FIRST_TARGET_S = 0.060
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
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.top = 1, 5
    logging.basicConfig(level=logging.WARNING)
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
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
    report = importlib.import_module(f"{package}.monitors.lora.report")
    keys = importlib.import_module(f"{package}.nodes.lora_keys")
    model, clip = nodes.CheckpointLoaderSimple().load_checkpoint(CHECKPOINT)[:2]

    def step(strength: float, profiler: cProfile.Profile | None = None) -> float:
        patched_model, patched_clip = nodes.LoraLoader().load_lora(model, clip, LORA, strength, strength)
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

    first = step(1.0)
    repeats = [step(0.9 - 0.1 * i) for i in range(args.repeats)]
    profiler = cProfile.Profile()
    step(0.25, profiler)
    repeat = statistics.median(repeats)
    print(
        f"LoRA step on the full-size SD1.5 files, {device}: first {first * 1000:.1f} ms; repeated with a new "
        f"strength: {fmt_spread([r * 1000 for r in repeats], '.1f', ' ms')}"
    )
    print(profile_text(profiler, args.top))
    print(
        verdict_line(
            repeat <= REPEAT_TO_FIRST_TARGET * first,
            f"LoRA step, same file and a new strength <= {REPEAT_TO_FIRST_TARGET} x its first",
            f"{repeat:.4f} s / {first:.4f} s = {repeat / first:.3f}",
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

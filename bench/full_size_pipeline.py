"""The full-size SD1.5 text-to-image LoRA pipeline with every monitor node vs none, on a real server.

    COMFYUI_PATH=<ComfyUI 0.8> python -m bench.full_size_pipeline [--pairs N] [--quick] [--base DIR]

The ~2 GB SD1.5-architecture checkpoint and its rank-32 kohya LoRA (scripts/make_models.py
--full-size, generated into BASE once) run workflows/api/text_to_image_lora_monitor_full_size.json
(64x64, 2 steps, CPU) and the same graph without the monitor nodes, in interleaved pairs. What
ComfyUI's cache serves: every pair sets new LoRA strengths (both variants of a pair the same) and
every run a new seed, so the LoRA loader, the LoRA and conditioning monitors, both text encodes and
the sampler run in every prompt whatever the cache policy, as when a user tries another strength;
only the checkpoint loader is cached after the warm-up. The models monitor sits right after it: it
re-runs only because the plain graph between two monitored runs drops it from the cache (printed:
how often each monitor node executed). Prints the per-pair ratios of the prompt's duration
(min/median/max; target <= 1.01), the LoRA loader's and the LoRA monitor's time from the per-node
profile (and the step's own analysis time), the monitor nodes' own time over the pair's plain
prompt (free of the sampler's noise, which the prompt ratio carries), and a verdict line. --quick:
one pair at 1 step (checks that it runs; the first use generates the 2 GB files, about a minute).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.verdicts import add_quick_flag, fmt_spread, verdict_line

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / "workflows" / "api" / "text_to_image_lora_monitor_full_size.json"
TARGET_RATIO = 1.01
MONITOR_PREFIX = "PipelineMonitor"
PROMPT_TIMEOUT_S = 600


def without_monitors(prompt: dict) -> dict:
    """The same graph with every monitor node removed and its consumers wired to its inputs."""
    prompt = copy.deepcopy(prompt)
    monitors = {nid: node for nid, node in prompt.items() if node["class_type"].startswith(MONITOR_PREFIX)}
    # A monitor's output i is its i-th input passed through (models: model, clip, vae; LoRA: model,
    # clip; conditioning: positive, negative, clip).
    passthrough = {
        "PipelineMonitorModels": ("model", "clip", "vae"),
        "PipelineMonitorLora": ("model", "clip"),
        "PipelineMonitorConditioning": ("positive", "negative", "clip"),
    }

    def source(link):
        while isinstance(link, list) and link[0] in monitors:
            node = monitors[link[0]]
            link = node["inputs"][passthrough[node["class_type"]][link[1]]]
        return link

    for nid in monitors:
        del prompt[nid]
    for node in prompt.values():
        node["inputs"] = {k: source(v) for k, v in node["inputs"].items()}
    return prompt


def with_seed(prompt: dict, seed: int, steps: int | None, lora_strength: float | None = None) -> dict:
    """The prompt with a new seed (and steps, and both LoRA strengths when given)."""
    prompt = copy.deepcopy(prompt)
    for node in prompt.values():
        if node["class_type"] == "KSampler":
            node["inputs"]["seed"] = seed
            if steps is not None:
                node["inputs"]["steps"] = steps
        if node["class_type"] == "LoraLoader" and lora_strength is not None:
            node["inputs"]["strength_model"] = node["inputs"]["strength_clip"] = lora_strength
    return prompt


def run(server, prompt: dict) -> tuple[str, dict]:
    """Queue and wait: loading the 2 GB checkpoint takes longer than the tests' prompt timeout."""
    prompt_id = server.queue(prompt)
    return prompt_id, server.wait(prompt_id, timeout=PROMPT_TIMEOUT_S)


def node_rows(server, prompt_id) -> dict:
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    assert report["status"] == "success", report.get("error")
    return report, {row["node_id"]: row for row in report["nodes"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument(
        "--base", help="ComfyUI base directory holding the generated files (default: a temp dir)"
    )
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if not os.environ.get("COMFYUI_PATH"):
        print("skipped: COMFYUI_PATH is not set (the bench needs a ComfyUI 0.8 checkout)")
        return 0
    from tests.comfyui.conftest import ComfyServer, free_port, load_script

    pairs, steps = (1, 1) if args.quick else (args.pairs, None)
    # resolved: ComfyUI runs from its own folder
    base = Path(args.base or tempfile.mkdtemp(prefix="pm_full_size_")).resolve()
    for sub in ("custom_nodes", "models", "input", "output", "user"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    link = base / "custom_nodes" / "pipeline-monitor"
    if not link.exists():
        link.symlink_to(REPO, target_is_directory=True)
    load_script("make_models").make_full_size(str(base))
    monitored = json.loads(WORKFLOW.read_text())
    plain = without_monitors(monitored)
    lora_node = next(n for n, v in monitored.items() if v["class_type"] == "LoraLoader")
    lora_monitor = next(n for n, v in monitored.items() if v["class_type"] == "PipelineMonitorLora")
    monitor_ids = sorted(n for n, v in monitored.items() if v["class_type"].startswith(MONITOR_PREFIX))

    server = ComfyServer(base, free_port(), base / "server.log").start()
    try:
        run(server, with_seed(plain, 0, steps))  # warm-up: loads the checkpoint and the LoRA once
        ratios, lora_load_s, lora_monitor_s, lora_analysis_s, plain_s, n_keys = [], [], [], [], [], None
        executed = {nid: 0 for nid in monitor_ids}
        monitors_s = []  # per monitored run: the monitor nodes' own time from the profile
        for i in range(pairs):
            durations = {}
            order = ("monitored", "plain") if i % 2 == 0 else ("plain", "monitored")
            strength = round(1.0 - 0.01 * (i + 1), 2)  # a new strength per pair: the LoRA part re-runs
            for variant in order:
                prompt = with_seed(
                    monitored if variant == "monitored" else plain,
                    1000 + 2 * i + (variant == "plain"),
                    steps,
                    strength,
                )
                prompt_id, history = run(server, prompt)
                assert history["status"]["status_str"] == "success", history["status"]
                report, rows = node_rows(server, prompt_id)
                durations[variant] = report["duration_s"]
                if variant == "monitored":
                    for nid in monitor_ids:
                        executed[nid] += rows.get(nid, {}).get("status") == "executed"
                    monitors_s.append(
                        sum(rows[nid]["duration_s"] or 0.0 for nid in monitor_ids if nid in rows)
                    )
                    assert rows[lora_monitor]["status"] == "executed", rows[lora_monitor]
                    lora_monitor_s.append(rows[lora_monitor]["duration_s"])
                    step = next(s for s in report["steps"] if s["kind"] == "lora")
                    n_keys = step["summary"]["n_file_keys"]
                    lora_analysis_s.append(step["summary"]["analysis_s"])
                else:
                    plain_s.append(report["duration_s"])
                if lora_node in rows and rows[lora_node].get("status") == "executed":
                    lora_load_s.append(rows[lora_node]["duration_s"])
            ratios.append(durations["monitored"] / durations["plain"])
    finally:
        server.stop()
        if not args.base:
            # ~8 GB of generated models: a temp base left behind fills the disk within a few runs
            shutil.rmtree(base, ignore_errors=True)

    print(f"full-size SD1.5 text-to-image with LoRA ({n_keys} LoRA keys), 64x64, {steps or 2} steps, CPU")
    print(f"prompt duration ratio, all monitors / none: {fmt_spread(ratios)}")
    if lora_load_s:
        print(f"LoraLoader (real-size LoRA) time: {fmt_spread(lora_load_s, unit=' s')}")
    print(
        f"PipelineMonitorLora time (node, executed every monitored run): {fmt_spread(lora_monitor_s, unit=' s')}"
    )
    print(f"  of which the lora step's analysis_s: {fmt_spread(lora_analysis_s, unit=' s')}")
    shares = [m / p for m, p in zip(lora_monitor_s, plain_s, strict=True)]
    print(f"  as a share of the plain prompt: {fmt_spread(shares, fmt='.4f')}")
    # The prompt ratio carries the whole prompt's noise (the sampler's time varies by tens of
    # percent on a shared CPU); the monitor nodes' own time over the pair's plain prompt does not.
    own = [m / p for m, p in zip(monitors_s, plain_s, strict=True)]
    print(f"monitor nodes' own time / the pair's plain prompt: {fmt_spread(own, fmt='.4f')}")
    print(
        "monitor nodes executed (not cached), of the monitored runs: "
        + ", ".join(f"{monitored[n]['class_type']} {executed[n]}/{pairs}" for n in monitor_ids)
    )
    median = statistics.median(ratios)
    print(
        verdict_line(
            median <= TARGET_RATIO,
            f"prompt with all monitors <= {TARGET_RATIO} x without",
            f"median {median:.3f}",
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

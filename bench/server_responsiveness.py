"""How fast a server with the pack answers while it works and watchers watch, and how fast it exits
on SIGTERM mid-prompt, next to the same server idle and a server without the pack, in one run.

These figures were once thresholds in tests/comfyui/test_concurrency.py (a route answered within
2 s while two clients watched; exit within 5 s of SIGTERM while the sampler ran); tests now only
catch hangs, and the figures live here. Needs a ComfyUI 0.8 checkout in COMFYUI_PATH (exit code 2
without it). From the repo root:

    COMFYUI_PATH=... python -m bench.server_responsiveness [--rounds 5] [--size 512] [--quick] [--json out.json]

Latency: on the monitored server, each round times GET /pipeline_monitor/runs?limit=3 idle, then
again while a CPU-heavy prompt runs (ImageScale + ImageBlur radius 31, a new colour each time) and
two websocket clients watch the live view: an interleaved pair per round. Exit: each round starts a
monitored server and a server without the pack (order alternating), queues the heavy prompt, and
times SIGTERM until the process is gone. One verdict line per target with min/median/max, last.
--quick: one round at 128 pixels.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.profile_overhead import Server, free_ports  # noqa: E402
from bench.verdicts import add_quick_flag, verdict_line  # noqa: E402

ROUTE_TARGET_S = 2.0  # a pack route answers within this while two clients watch a running prompt
EXIT_TARGET_S = 5.0  # a monitored server exits within this after SIGTERM mid-prompt
WATCHDOG_S = 600.0


def heavy_prompt(color: int, size: int) -> dict:
    return {
        "1": {
            "class_type": "EmptyImage",
            "inputs": {"width": size, "height": size, "batch_size": 1, "color": color},
        },
        "2": {
            "class_type": "ImageScale",
            "inputs": {
                "image": ["1", 0],
                "upscale_method": "bilinear",
                "width": size * 2,
                "height": size * 2,
                "crop": "disabled",
            },
        },
        "3": {"class_type": "ImageBlur", "inputs": {"image": ["2", 0], "blur_radius": 31, "sigma": 8.0}},
        "4": {"class_type": "PreviewImage", "inputs": {"images": ["3", 0]}},
    }


def post_json(server: Server, path: str, data: dict) -> dict:
    request = urllib.request.Request(
        server.url + path, data=json.dumps(data).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=WATCHDOG_S) as response:
        return json.loads(response.read())


def queue(server: Server, prompt: dict) -> str:
    return post_json(server, "/prompt", {"prompt": prompt, "client_id": server.client_id})["prompt_id"]


def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + WATCHDOG_S
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: nothing after {WATCHDOG_S:.0f} s")
        time.sleep(0.02)


def running(server: Server, prompt_id: str) -> bool:
    return prompt_id in [item[1] for item in server.get_json("/queue").get("queue_running", [])]


def finished(server: Server, prompt_id: str) -> bool:
    return prompt_id in server.get_json(f"/history/{prompt_id}")


def timed_get(server: Server, path: str) -> float:
    started = time.perf_counter()
    server.get_json(path, timeout=WATCHDOG_S)
    return time.perf_counter() - started


def summary(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values), "n": len(values)}


def verdict(label: str, values: list[float], target_s: float) -> str:
    s = summary(values)
    return verdict_line(
        s["median"] <= target_s,
        f"{label} <= {target_s:g} s",
        f"median {s['median'] * 1000:.1f} ms (min {s['min'] * 1000:.1f}, max {s['max'] * 1000:.1f}, n {s['n']})",
    )


def measure_latency(server: Server, rounds: int, size: int) -> dict:
    import websocket  # websocket-client

    watchers = [f"pm-bench-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    sockets = [
        websocket.create_connection(f"ws://127.0.0.1:{server.port}/ws?clientId={w}", timeout=WATCHDOG_S)
        for w in watchers
    ]
    idle, busy = [], []
    try:
        for r in range(rounds):
            idle.append(timed_get(server, "/pipeline_monitor/runs?limit=3"))
            for w in watchers:
                post_json(server, "/pipeline_monitor/live", {"client_id": w, "watching": True})
            prompt_id = queue(server, heavy_prompt(r + 1, size))
            wait_until(lambda p=prompt_id: running(server, p) or finished(server, p), "prompt start")
            busy.append(timed_get(server, "/pipeline_monitor/runs?limit=3"))
            wait_until(lambda p=prompt_id: finished(server, p), "prompt end")
            for w in watchers:
                post_json(server, "/pipeline_monitor/live", {"client_id": w, "watching": False})
    finally:
        for ws in sockets:
            ws.close()
    return {"idle_s": idle, "busy_watched_s": busy}


def measure_exit(comfyui: str, root: str, rounds: int, size: int, port_base: int, startup_s: float) -> dict:
    times: dict[str, list[float]] = {"monitored": [], "no_pack": []}
    for r in range(rounds):
        order = [("monitored", True), ("no_pack", False)]
        for name, with_pack in order if r % 2 == 0 else order[::-1]:
            (port,) = free_ports(port_base, port_base + 29, 1)
            server = Server(f"{name}-exit-{r}", comfyui, root, port, with_pack, {})
            try:
                server.wait_ready(startup_s)
                prompt_id = queue(server, heavy_prompt(r + 1, size * 2))
                wait_until(lambda s=server, p=prompt_id: running(s, p), "prompt start")
                time.sleep(0.5)  # inside the prompt; the pack's sampler has started with it
                started = time.perf_counter()
                server.proc.terminate()
                server.proc.wait(WATCHDOG_S)
                times[name].append(time.perf_counter() - started)
            finally:
                server.stop()
    return times


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=512, help="EmptyImage side; the blur runs at twice that")
    parser.add_argument("--port-base", type=int, default=8520, help="ports from here, 30 of them")
    parser.add_argument("--startup-timeout", type=float, default=120.0)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.size = 1, 128
    comfyui = os.environ.get("COMFYUI_PATH")
    if not comfyui or not os.path.isfile(os.path.join(comfyui, "main.py")):
        print("COMFYUI_PATH must point to a ComfyUI 0.8 checkout (a folder with main.py).", file=sys.stderr)
        return 2
    root = tempfile.mkdtemp(prefix="pm-responsiveness-")
    try:
        (port,) = free_ports(args.port_base, args.port_base + 29, 1)
        server = Server("monitored", comfyui, root, port, True, {})
        try:
            server.wait_ready(args.startup_timeout)
            queue(server, heavy_prompt(0, 64))  # warm-up: first-prompt imports and the sampler start
            latency = measure_latency(server, args.rounds, args.size)
        finally:
            server.stop()
        exits = measure_exit(comfyui, root, args.rounds, args.size, args.port_base, args.startup_timeout)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratios_busy = [b / i for b, i in zip(latency["busy_watched_s"], latency["idle_s"], strict=True)]
    ratios_exit = [m / n for m, n in zip(exits["monitored"], exits["no_pack"], strict=True)]
    result = {
        "rounds": args.rounds,
        "size": args.size,
        "latency": {k: summary(v) for k, v in latency.items()},
        "busy_to_idle_ratio": summary(ratios_busy),
        "exit": {k: summary(v) for k, v in exits.items()},
        "exit_monitored_to_no_pack_ratio": summary(ratios_exit),
    }
    print(f"runs route idle: median {result['latency']['idle_s']['median'] * 1000:.1f} ms")
    print(f"runs route busy/idle ratio: median {result['busy_to_idle_ratio']['median']:.2f}")
    print(
        f"exit after SIGTERM, monitored/no-pack ratio: median {result['exit_monitored_to_no_pack_ratio']['median']:.2f}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(
        verdict(
            "runs route while a prompt runs and 2 clients watch", latency["busy_watched_s"], ROUTE_TARGET_S
        )
    )
    print(verdict("monitored server exit after SIGTERM mid-prompt", exits["monitored"], EXIT_TARGET_S))
    return 0


if __name__ == "__main__":
    sys.exit(main())

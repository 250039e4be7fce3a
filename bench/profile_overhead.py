"""Per-prompt overhead of the pack's per-node profile on a tiny real ComfyUI workflow.

Needs a ComfyUI 0.8 checkout in COMFYUI_PATH (exit code 2 without it). Run from the repo root
with the Python that has ComfyUI's requirements plus websocket-client:

    COMFYUI_PATH=... python -m bench.profile_overhead [--prompts 100] [--size 64] [--quick] [--json out.json]

Starts three headless CPU servers side by side, each with its own temporary base directory:
  monitored    the pack loaded, per-node profile on (the default)
  profile_off  the pack loaded with PIPELINE_MONITOR_PROFILE=0 (prompt-level record only)
  no_pack      no pack at all (unmonitored)
and queues the same small workflow (EmptyImage -> ImageScale -> ImageInvert -> ImageBlur ->
ImageInvert -> PreviewImage, a new colour each prompt so nothing is cached) to them one at a
time, rotating the order each round. Per prompt it measures the wall time from POST /prompt to
the websocket's end-of-prompt message, and the server-side execution time from /history.

Target (issue 14: <= 0.5 ms per prompt plus <= 0.1 ms per profiled node on the CPU): the paired
per-round wall difference monitored - no_pack, median over rounds, within 0.5 + 0.1 x 6 ms; the
verdict line (last) gives it with min/median/max and the per-round ratio. --quick: 2 prompts
after 1 warm-up (checks that it runs).

Every monitor node beside a >= 0.5 s work chain: bench/monitor_nodes.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

import psutil

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.verdicts import add_quick_flag, fmt_spread, spread, verdict_line  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACK_DIR_NAME = "pipeline_monitor"
METRICS = ("wall_ms", "cpu_ms", "exec_ms")
N_NODES = 6  # in workflow()
FIXED_TARGET_MS, PER_NODE_TARGET_MS = 0.5, 0.1
CONFIGS = (  # name, load the pack, extra environment
    ("monitored", True, {}),
    ("profile_off", True, {"PIPELINE_MONITOR_PROFILE": "0"}),
    ("no_pack", False, {}),
)


def free_ports(start: int, end: int, count: int) -> list[int]:
    ports = []
    for port in range(start, end + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise SystemExit(f"no {count} free ports in {start}-{end}")


class Server:
    def __init__(
        self,
        name: str,
        comfyui: str,
        root: str,
        port: int,
        with_pack: bool,
        env_extra: dict,
        pack: str = REPO_ROOT,
    ):
        self.name, self.port, self.with_pack = name, port, with_pack
        self.base = os.path.join(root, name)
        os.makedirs(os.path.join(self.base, "custom_nodes"))
        if with_pack:
            os.symlink(pack, os.path.join(self.base, "custom_nodes", PACK_DIR_NAME))
        self.log_path = os.path.join(root, f"{name}.log")
        env = dict(os.environ)
        env.pop("PIPELINE_MONITOR_PROFILE", None)  # the caller's setting must not leak into a config
        env.update(env_extra)
        cmd = [
            sys.executable,
            "main.py",
            "--cpu",
            "--listen",
            "127.0.0.1",
            "--port",
            str(port),
            "--base-directory",
            self.base,
            "--database-url",
            "sqlite:///:memory:",
            "--disable-api-nodes",
        ]
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            cmd, cwd=comfyui, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.url = f"http://127.0.0.1:{port}"
        self.client_id = str(uuid.uuid4())
        self.ws = None
        self._ps = psutil.Process(self.proc.pid)

    def get_json(self, path: str, timeout: float = 10):
        with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
            return json.loads(r.read())

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} server exited ({self.proc.returncode}), see {self.log_path}")
            try:
                self.get_json("/system_stats", timeout=2)
                break
            except (OSError, ValueError):
                time.sleep(0.5)
        else:
            raise RuntimeError(f"{self.name} server not ready after {timeout_s:.0f} s, see {self.log_path}")
        import websocket  # websocket-client

        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{self.port}/ws?clientId={self.client_id}", timeout=120
        )

    def run_prompt(self, prompt: dict) -> dict:
        """wall_ms: POST until the end-of-prompt message; cpu_ms: the server process's CPU time over
        that stretch (all its threads; less sensitive to a busy machine); exec_ms: ComfyUI's own
        execution_start..execution_success stamps (whole ms)."""
        body = json.dumps({"prompt": prompt, "client_id": self.client_id}).encode()
        request = urllib.request.Request(
            self.url + "/prompt", data=body, headers={"Content-Type": "application/json"}
        )
        cpu0 = self.cpu_s()
        t0 = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as r:
            prompt_id = json.loads(r.read())["prompt_id"]
        while True:
            message = self.ws.recv()
            if not isinstance(message, str):
                continue  # binary preview frames
            message = json.loads(message)
            data = message.get("data") or {}
            if data.get("prompt_id") != prompt_id:
                continue
            if message["type"] == "execution_error":
                raise RuntimeError(f"{self.name}: prompt failed: {data.get('exception_message')}")
            if message["type"] == "executing" and data.get("node") is None:
                break
        wall_ms = (time.perf_counter() - t0) * 1000
        cpu_ms = (self.cpu_s() - cpu0) * 1000
        return {"wall_ms": wall_ms, "cpu_ms": cpu_ms, "exec_ms": self.execution_ms(prompt_id)}

    def cpu_s(self) -> float:
        times = self._ps.cpu_times()
        return times.user + times.system

    def execution_ms(self, prompt_id: str) -> float | None:
        try:
            status = self.get_json(f"/history/{prompt_id}")[prompt_id]["status"]
            stamps = {event: data.get("timestamp") for event, data in status["messages"]}
            return float(stamps["execution_success"] - stamps["execution_start"])
        except (KeyError, TypeError, OSError, ValueError):
            return None

    def pack_loaded(self) -> bool:
        with open(self.log_path, errors="replace") as f:
            return any(
                PACK_DIR_NAME in line and "seconds" in line and "IMPORT FAILED" not in line for line in f
            )

    def stop(self) -> None:
        if self.ws is not None:
            try:
                self.ws.close()
            except Exception:
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


def workflow(color: int, size: int) -> dict:
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
        "3": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
        "4": {"class_type": "ImageBlur", "inputs": {"image": ["3", 0], "blur_radius": 2, "sigma": 1.0}},
        "5": {"class_type": "ImageInvert", "inputs": {"image": ["4", 0]}},
        "6": {"class_type": "PreviewImage", "inputs": {"images": ["5", 0]}},
    }


def stats(values: list[float]) -> dict:
    values = [v for v in values if v is not None]
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(values),
        "median": statistics.median(values),
        "mean": statistics.fmean(values),
        "p10": ordered[len(ordered) // 10],
        "p90": ordered[(9 * len(ordered)) // 10],
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def compare(results: dict, a: str, b: str, key: str = "wall_ms") -> dict:
    sa, sb = stats(results[a][key]), stats(results[b][key])
    paired = [
        x - y
        for x, y in zip(results[a][key], results[b][key], strict=True)
        if x is not None and y is not None
    ]
    return {
        "ratio_of_medians": sa["median"] / sb["median"],
        "ratio_of_means": sa["mean"] / sb["mean"],
        "overhead_ms_median_diff": sa["median"] - sb["median"],
        "overhead_ms_mean_diff": sa["mean"] - sb["mean"],
        "overhead_ms_paired_median": statistics.median(paired),
        "overhead_ms_paired": paired,
        "ratio_paired": [
            x / y
            for x, y in zip(results[a][key], results[b][key], strict=True)
            if x is not None and y is not None and y > 0
        ],
    }


def print_report(result: dict) -> None:
    cfg = result["config"]
    print(
        f"\nPer-prompt time, {cfg['prompts']} prompts per server after {cfg['warmup']} warm-up, "
        f"image {cfg['size']}->{2 * cfg['size']} px, 6 nodes"
    )
    print(f"  {'server':<12} {'metric':<8} | {'median':>7} {'mean':>7} {'p10':>7} {'p90':>7}")
    for metric in METRICS:
        for name, s in result["summary"].items():
            m = s[metric]
            if m["n"]:
                print(
                    f"  {name:<12} {metric:<8} | {m['median']:>7.1f} {m['mean']:>7.1f} {m['p10']:>7.1f} {m['p90']:>7.1f}"
                )
    print(
        f"\n  {'comparison':<30} | {'ratio med':>9} {'ratio mean':>10} | {'overhead ms: med diff':>21} {'mean diff':>9} {'paired med':>10}"
    )
    for label, c in result["comparisons"].items():
        print(
            f"  {label:<30} | {c['ratio_of_medians']:>9.3f} {c['ratio_of_means']:>10.3f} | "
            f"{c['overhead_ms_median_diff']:>21.2f} {c['overhead_ms_mean_diff']:>9.2f} {c['overhead_ms_paired_median']:>10.2f}"
        )
    print(
        "  (wall = POST /prompt until the websocket's end-of-prompt message; cpu = server process CPU time"
        " over the same stretch, counted in 10 ms ticks so only its mean is exact; exec = ComfyUI's execution_start..execution_success stamps, whole ms;"
        " paired med = median over rounds of the per-round difference)"
    )
    for name, check in result["checks"].items():
        print(f"  check {name}: {check}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=100, help="measured prompts per server (default 100)")
    parser.add_argument(
        "--warmup", type=int, default=3, help="unmeasured prompts per server first (default 3)"
    )
    parser.add_argument(
        "--size",
        type=int,
        default=64,
        help="EmptyImage side in pixels (default 64: small, so the overhead is not lost in noise)",
    )
    parser.add_argument("--port-base", type=int, default=8470, help="first port to try (ports up to 8499)")
    parser.add_argument("--startup-timeout", type=float, default=120.0)
    parser.add_argument(
        "--pack",
        default=REPO_ROOT,
        help="the pack folder the servers load (default: this checkout; an older one for a before/after)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary base directories and logs")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    add_quick_flag(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.warmup = 2, 1

    comfyui = os.environ.get("COMFYUI_PATH")
    if not comfyui or not os.path.isfile(os.path.join(comfyui, "main.py")):
        print(
            "COMFYUI_PATH must point to a ComfyUI 0.8 checkout (a folder with main.py); not measuring.",
            file=sys.stderr,
        )
        return 2
    try:
        import websocket  # noqa: F401
    except ImportError:
        print("websocket-client is required (pip install websocket-client).", file=sys.stderr)
        return 2

    root = tempfile.mkdtemp(prefix="pm-overhead-")
    ports = free_ports(args.port_base, 8499, len(CONFIGS))
    servers: list[Server] = []
    t_start = time.monotonic()
    try:
        for (name, with_pack, env_extra), port in zip(CONFIGS, ports, strict=True):
            servers.append(
                Server(name, comfyui, root, port, with_pack, env_extra, os.path.abspath(args.pack))
            )
        print(f"starting {len(servers)} servers on ports {ports} (logs in {root})...", file=sys.stderr)
        for server in servers:
            server.wait_ready(args.startup_timeout)
        print(f"servers ready after {time.monotonic() - t_start:.1f} s", file=sys.stderr)

        results = {s.name: {metric: [] for metric in METRICS} for s in servers}
        color = 1
        for r in range(args.warmup + args.prompts):
            shift = r % len(servers)
            for server in servers[shift:] + servers[:shift]:
                color = (color * 48271) % 0xFFFFFF or 1  # a new colour every prompt: nothing cached
                measured = server.run_prompt(workflow(color, args.size))
                if r >= args.warmup:
                    for metric in METRICS:
                        results[server.name][metric].append(measured[metric])
            if (r + 1) % 10 == 0:
                print(f"  round {r + 1}/{args.warmup + args.prompts}", file=sys.stderr)

        checks, ok = {}, True
        for server in servers:
            try:
                runs = server.get_json("/pipeline_monitor/runs?limit=1000")
                nodes = [run.get("n_nodes") for run in runs.get("runs", [])]
                ok &= (
                    server.with_pack
                    and runs.get("profile_enabled") == (server.name == "monitored")
                    and len(nodes) > 0
                )
                checks[server.name] = (
                    f"pack loaded={server.pack_loaded()}, profile_enabled={runs.get('profile_enabled')}, "
                    f"runs recorded={len(nodes)}, nodes per run={sorted(set(nodes))}"
                )
            except urllib.error.HTTPError as exc:
                ok &= not server.with_pack and not server.pack_loaded()
                checks[server.name] = (
                    f"pack loaded={server.pack_loaded()}, /pipeline_monitor/runs -> HTTP {exc.code}"
                )
    finally:
        for server in servers:
            server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    summary = {name: {metric: stats(v[metric]) for metric in METRICS} for name, v in results.items()}
    comparisons = {
        f"{a} / {b} ({metric.split('_')[0]})": compare(results, a, b, metric)
        for metric in ("wall_ms", "cpu_ms")
        for a, b in (("monitored", "no_pack"), ("profile_off", "no_pack"), ("monitored", "profile_off"))
    }
    result = {
        "config": {
            "prompts": args.prompts,
            "warmup": args.warmup,
            "size": args.size,
            "cpu_count": os.cpu_count(),
            "total_s": time.monotonic() - t_start,
        },
        "summary": summary,
        "comparisons": comparisons,
        "checks": checks,
        "raw": results,
    }
    print_report(result)
    print(f"  total {result['config']['total_s']:.0f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.json}")
    if not ok:
        print("FAIL: a server did not run in its intended configuration (see the checks above)")
    wall = comparisons["monitored / no_pack (wall)"]
    target_ms = FIXED_TARGET_MS + PER_NODE_TARGET_MS * N_NODES
    print(
        verdict_line(
            ok and spread(wall["overhead_ms_paired"])["median"] <= target_ms,
            f"per-node profile, per-prompt overhead <= {FIXED_TARGET_MS:g} ms + {PER_NODE_TARGET_MS:g} ms x "
            f"{N_NODES} nodes",
            "monitored - no_pack wall "
            + fmt_spread(wall["overhead_ms_paired"], ".2f", " ms").replace("pairs", "rounds")
            + "; ratio "
            + fmt_spread(wall["ratio_paired"], ".3f").replace("pairs", "rounds"),
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The dynamic-VRAM check against a real ComfyUI (0.33 or later) server, one server per memory mode.

One code path for the GPU check (tests/gpu/test_gpu_dynamic_vram.py: CUDA with dynamic VRAM on, then
with `--disable-dynamic-vram`) and its CPU dry run (tests/comfyui/test_dynamic_vram_server.py:
`--cpu`): only the server's device arguments and the expected values differ.

Each mode's server runs two prompts:
- the demo pipeline (example_workflows/api/models_profile_demo.json) plus a PipelineMonitorVAEEncode forced
  to `strategy=cpu` on the demo's VAE (the rung that crashed with KeyError on a dynamic patcher);
- a LoRA pipeline on the tiny WAN 2.1 (LoraLoaderModelOnly -> PipelineMonitorLora -> KSampler), then
  after the sampler the test node PMTestLoadedSize (ComfyUI's own `loaded_size()`) and a
  PipelineMonitorModels fed from it: the model as the sampler left it loaded, with its LoRA patches.

Each check is a function of the finished run that raises AssertionError with what it saw; `checked`
turns it into one greppable line: `gpu-dynamic-vram: <check>[<mode>]: ok|FAILED <detail>`.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.comfyui.conftest import REPO_ROOT, ComfyServer, free_port, prepare_base
from tests.comfyui.headless_support import headless_setup

log = logging.getLogger(__name__)

VERDICT_PREFIX = "gpu-dynamic-vram"
DEMO_WORKFLOW = REPO_ROOT / "example_workflows" / "api" / "models_profile_demo.json"
WAN = "pm_tiny_wan21.safetensors"
LORA = "pm_dynamic_vram_lora_wan.safetensors"
LORA_RANK = 4
# Tiny WAN 2.1 (scripts/make_tiny_models.py): dim 128, ffn 256, 2 layers. Every target is over the
# 16 KiB under which a dynamic patcher force-loads a module (and writes its patches in place).
WAN_LORA_TARGETS = {
    f"blocks_{block}_{name}": shape
    for block in range(2)
    for name, shape in {
        **{f"{attn}_{p}": (128, 128) for attn in ("self_attn", "cross_attn") for p in "qkvo"},
        "ffn_0": (256, 128),
        "ffn_2": (128, 256),
    }.items()
}
VAE_CPU_NODE, DEMO_MODELS_NODE = "8", "3"
# loaded_size() read before (20) and after (22) the models step (21), nothing else run in between
LOADED_SIZE_NODE, LOADED_MODELS_NODE, LOADED_SIZE_AFTER_NODE = "20", "21", "22"
DYNAMIC_VRAM_ENABLED_LINE = "DynamicVRAM support detected and enabled"
MAX_DETAIL_CHARS = 800  # of a verdict line's detail


@dataclass(frozen=True)
class Mode:
    """A server's memory mode: its ComfyUI arguments and what the reports must then say."""

    name: str
    device_args: tuple[str, ...]
    memory_manager: str  # "dynamic" or "estimate"
    patch_application: str  # how the LoRA's patches reach the loaded model's weights
    weights_patched: bool


# On CUDA, ComfyUI 0.33 turns dynamic VRAM on by default (comfy/cli_args.py enables_dynamic_vram).
GPU_DYNAMIC = Mode("dynamic", (), "dynamic", "on_the_fly", False)
GPU_ESTIMATE = Mode("estimate", ("--disable-dynamic-vram",), "estimate", "in_place", True)
CPU_ESTIMATE = Mode("cpu", ("--cpu", "--disable-dynamic-vram"), "estimate", "in_place", True)


def comfyui_version(comfy_path: str | None) -> tuple[int, ...] | None:
    """(major, minor, patch) from the checkout's comfyui_version.py, None if there is none."""
    if not comfy_path:
        return None
    path = Path(comfy_path) / "comfyui_version.py"
    if not path.is_file():
        return None
    found = re.search(r"__version__\s*=\s*['\"]([0-9.]+)", path.read_text())
    return tuple(int(part) for part in found.group(1).split(".") if part) if found else None


def dynamic_vram_skip_reason(comfy_path: str | None) -> str | None:
    """Why a real-server dynamic-VRAM check cannot run here, None when it can."""
    version = comfyui_version(comfy_path)
    if version is None:
        return f"COMFYUI_PATH ({comfy_path!r}) is not a ComfyUI checkout with comfyui_version.py"
    if version < (0, 33):
        return f"COMFYUI_PATH is ComfyUI {'.'.join(map(str, version))}: dynamic VRAM needs 0.33 or later"
    if importlib.util.find_spec("comfy_aimdo") is None:
        return "comfy_aimdo is not installed (ComfyUI 0.33's dynamic VRAM; it does not start without it)"
    return None


# -- the prompts ------------------------------------------------------------------------------------


def write_lora(base: Path) -> None:
    """A rank-4 LoRA over every attention and feed-forward layer of the tiny WAN 2.1."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(11)
    tensors = {}
    for name, (out_dim, in_dim) in sorted(WAN_LORA_TARGETS.items()):
        tensors[f"lora_unet_{name}.lora_down.weight"] = (
            torch.randn(LORA_RANK, in_dim, generator=generator) * 0.2
        )
        tensors[f"lora_unet_{name}.lora_up.weight"] = (
            torch.randn(out_dim, LORA_RANK, generator=generator) * 0.2
        )
        tensors[f"lora_unet_{name}.alpha"] = torch.tensor(float(LORA_RANK))
    folder = base / "models" / "loras"
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / LORA))


def demo_prompt() -> dict:
    """The demo workflow plus node 8: the VAE monitor forced onto the CPU rung, on the demo's VAE."""
    prompt = json.loads(DEMO_WORKFLOW.read_text())
    prompt[VAE_CPU_NODE] = {
        "class_type": "PipelineMonitorVAEEncode",
        "inputs": {
            "pixels": ["4", 0],
            "vae": [DEMO_MODELS_NODE, 2],
            "strategy": "cpu",
            "allow_dummy": False,
            "tile_size": 512,
            "overlap": 64,
            "temporal_size": 64,
            "temporal_overlap": 8,
        },
    }
    return prompt


def conditioning(seed: int) -> dict:
    return {
        "class_type": "PMTestConditioning",
        "inputs": {"tokens": 8, "hidden": 4096, "pooled_size": 0, "seed": seed},
    }


def lora_prompt() -> dict:
    """LoRA'd tiny WAN sampled; then (after the sampler) loaded_size() and the models step."""
    sampler = {
        "seed": 7,
        "steps": 2,
        "cfg": 2.0,
        "sampler_name": "euler",
        "scheduler": "simple",
        "denoise": 1.0,
    }
    return {
        "1": {"class_type": "UNETLoader", "inputs": {"unet_name": WAN, "weight_dtype": "default"}},
        "2": {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": LORA, "strength_model": 1.0},
        },
        "3": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["2", 0]}},
        "4": conditioning(1),
        "5": conditioning(2),
        "6": {
            "class_type": "EmptyHunyuanLatentVideo",
            "inputs": {"width": 32, "height": 32, "length": 1, "batch_size": 1},
        },
        "7": {
            "class_type": "KSampler",
            "inputs": {
                **sampler,
                "model": ["3", 0],
                "positive": ["4", 0],
                "negative": ["5", 0],
                "latent_image": ["6", 0],
            },
        },
        LOADED_SIZE_NODE: {
            "class_type": "PMTestLoadedSize",
            "inputs": {"model": ["3", 0], "after": ["7", 0]},
        },
        LOADED_MODELS_NODE: {
            "class_type": "PipelineMonitorModels",
            "inputs": {"model": [LOADED_SIZE_NODE, 0]},
        },
        LOADED_SIZE_AFTER_NODE: {
            "class_type": "PMTestLoadedSize",
            "inputs": {"model": [LOADED_MODELS_NODE, 0]},
        },
    }


# -- one mode's server run ----------------------------------------------------------------------------


@dataclass
class ModeRun:
    """What one server in one mode gave: per prompt its /history entry and the pack's run report."""

    mode: Mode
    histories: dict[str, dict] = field(default_factory=dict)
    reports: dict[str, dict] = field(default_factory=dict)
    server_log: str = ""
    error: str | None = None  # why the server did not start or a prompt did not finish


def run_mode(base: Path, mode: Mode, force_headless: bool = False) -> ModeRun:
    """Start ComfyUI in `mode` on a fresh base directory under `base`, run both prompts, stop it."""
    prepare_base(base)
    write_lora(base)
    args, env = headless_setup(base / "headless", force=force_headless)
    server = ComfyServer(
        base, free_port(), base / "server.log", device_args=(*mode.device_args, *args), extra_env=env
    )
    run = ModeRun(mode)
    try:
        server.start()
        for name, prompt in (("demo", demo_prompt()), ("lora", lora_prompt())):
            prompt_id, run.histories[name] = server.run(prompt)
            response = server.get(f"/pipeline_monitor/runs/{prompt_id}")
            run.reports[name] = response.json() if response.status_code == 200 else {}
    except Exception as exc:  # every check then says so (check_prompts first)
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        server.stop()
        run.server_log = server.log() if server.log_path.exists() else ""
    return run


# -- the checks ---------------------------------------------------------------------------------------


def failure_text(status: dict) -> str:
    """Why a prompt failed, from its /history status: the failing node, the exception and the end
    of its traceback (the inputs ComfyUI also lists there can be whole tensors' text)."""
    errors = [data for kind, data in status.get("messages", []) if kind == "execution_error"]
    if not errors:
        return json.dumps(status)[-1500:]
    error = errors[-1]
    traceback = "".join(error.get("traceback") or [])[-1200:]
    return (
        f"node {error.get('node_id')} {error.get('node_type')}: {error.get('exception_type')}: "
        f"{error.get('exception_message')}\n{traceback}"
    )


def check_prompts(run: ModeRun) -> str:
    """The server started and finished both prompts, each a success."""
    assert run.error is None, f"the server run failed: {run.error}"
    failed = {n: h["status"] for n, h in run.histories.items() if h["status"]["status_str"] != "success"}
    assert not failed, "prompts failed: " + "; ".join(f"{n}: {failure_text(s)}" for n, s in failed.items())
    return ", ".join(f"{name}: success" for name in run.histories)


def step(run: ModeRun, prompt: str, node_id: str, kind: str) -> dict:
    assert run.error is None, f"the server run failed: {run.error[-600:]}"
    status = run.histories[prompt]["status"]
    assert status["status_str"] == "success", f"{prompt} prompt failed: {failure_text(status)}"
    steps = [s for s in run.reports[prompt].get("steps", []) if s["node_id"] == node_id and s["kind"] == kind]
    assert len(steps) == 1, f"no {kind} step of node {node_id} in the {prompt} run's report"
    return steps[0]


def check_server(run: ModeRun) -> str:
    """ComfyUI says dynamic VRAM is on exactly in the dynamic mode."""
    enabled = DYNAMIC_VRAM_ENABLED_LINE in run.server_log
    assert enabled is (run.mode.memory_manager == "dynamic"), (
        f"{DYNAMIC_VRAM_ENABLED_LINE!r} {'in' if enabled else 'not in'} the server log; its last lines: "
        + " | ".join(run.server_log.splitlines()[-8:])
    )
    return f"dynamic VRAM {'enabled' if enabled else 'off'} (arguments: {' '.join(run.mode.device_args) or 'none'})"


def check_demo(run: ModeRun) -> str:
    """The demo pipeline succeeds; its models step names the memory manager of the mode."""
    objects = step(run, "demo", DEMO_MODELS_NODE, "models")["details"]["objects"]
    managers = {kind: objects[kind]["memory_manager"] for kind in ("model", "vae")}
    assert managers == {"model": run.mode.memory_manager, "vae": run.mode.memory_manager}, managers
    return "memory_manager " + " ".join(f"{k}={v}" for k, v in managers.items())


def check_vae_cpu(run: ModeRun) -> str:
    """The VAE monitor forced to strategy=cpu encodes on the CPU rung (no KeyError, no fallback)."""
    found = step(run, "demo", VAE_CPU_NODE, "vae_encode")
    summary = found["summary"]
    used = (summary["strategy_requested"], summary["strategy_used"])
    assert used == ("cpu", "cpu"), f"requested/used {used}, attempts {found['details'].get('attempts')}"
    errors = [f["message"] for f in found["findings"] if f["level"] == "error"]
    assert not errors and not found["monitor_errors"], (errors, found["monitor_errors"])
    cpu = found["details"]["attempts"][-1]
    assert cpu["compute_dtype"] == "float32", cpu  # ComfyUI's CPU VAE dtype, weights and input alike
    # dynamic VRAM: the weights come from a reload of the VAE's file; otherwise the loaded module
    assert (cpu["weights_reload_s"] is not None) is (run.mode.memory_manager == "dynamic"), cpu
    return (
        f"strategy_used=cpu latent_shape={summary.get('latent_shape')} compute_dtype={cpu['compute_dtype']} "
        f"weights_reload_s={cpu['weights_reload_s']} weights_detached={cpu['weights_detached']}"
    )


def check_device_memory(run: ModeRun) -> str:
    """Node rows carry the process's device memory beside torch's peaks: on a GPU NVML's
    per-process figure, and comfy-aimdo's own exactly under dynamic VRAM; on the CPU no GPU rows."""
    step(run, "demo", DEMO_MODELS_NODE, "models")  # the demo ran, or why not
    peaks = [p for n in run.reports["demo"]["nodes"] for p in n.get("gpu_peaks") or []]
    if "--cpu" not in run.mode.device_args:
        assert peaks, "no GPU peaks in the demo run's node rows"
        device = [p["peak_process_used_bytes"] for p in peaks if p["peak_process_used_bytes"] is not None]
        reasons = {p["process_used_unknown_reason"] for p in peaks} - {None}
        assert device, f"no node has the process's device memory: {reasons}"
        torch_peak = max(p["peak_reserved_bytes"] or 0 for p in peaks)
        assert max(device) >= torch_peak, (max(device), torch_peak)  # the driver counts torch's too
        aimdo = [p["peak_aimdo_used_bytes"] for p in peaks if p["peak_aimdo_used_bytes"] is not None]
        assert bool(aimdo) is (run.mode.memory_manager == "dynamic"), (
            aimdo, {p["aimdo_used_unknown_reason"] for p in peaks}
        )
        return (
            f"peak process device memory {max(device)} bytes, torch reserved peak {torch_peak}, "
            f"comfy-aimdo peak {max(aimdo) if aimdo else None}"
        )
    assert not peaks, peaks
    return "no GPU: no device memory in the node rows"


def check_lora(run: ModeRun) -> str:
    """After the sampler loaded the LoRA'd model: the manager and how its patches were applied."""
    model = step(run, "lora", LOADED_MODELS_NODE, "models")["details"]["objects"]["model"]
    seen = {name: model[name] for name in ("memory_manager", "patch_application", "weights_patched")}
    expected = {
        "memory_manager": run.mode.memory_manager,
        "patch_application": run.mode.patch_application,
        "weights_patched": run.mode.weights_patched,
    }
    counts = f"n_patched_on_the_fly={model['n_patched_on_the_fly']} n_patched_in_place={model['n_patched_in_place']}"
    assert seen == expected, f"{seen} != {expected} ({counts})"
    return " ".join(f"{k}={v}" for k, v in seen.items()) + " " + counts


def check_loaded_size(run: ModeRun) -> str:
    """The models step's loaded and resident bytes are ComfyUI's own loaded_size(), read just before
    and just after it (equal unless comfy-aimdo moved pages between the nodes: then within them)."""
    model = step(run, "lora", LOADED_MODELS_NODE, "models")["details"]["objects"]["model"]
    outputs = run.histories["lora"]["outputs"]
    before, after = outputs[LOADED_SIZE_NODE], outputs[LOADED_SIZE_AFTER_NODE]
    sizes = (before["loaded_size"][0], after["loaded_size"][0])
    assert before["is_dynamic"][0] is (run.mode.memory_manager == "dynamic"), before
    loaded, resident = model["loaded_weight_bytes"], model["resident_bytes"]
    assert min(sizes) > 0 and loaded == resident and min(sizes) <= loaded <= max(sizes), (
        f"loaded {loaded} resident {resident}, loaded_size() before/after {sizes}, "
        f"reasons {model['unknown_reasons']}"
    )
    estimate_count = before["model_loaded_weight_memory"][0]
    return (
        f"loaded_weight_bytes=resident_bytes={loaded} loaded_size() before/after={sizes} "
        f"(model_loaded_weight_memory={estimate_count}, dynamic part={sizes[0] - estimate_count})"
    )


CHECKS: dict[str, Callable[[ModeRun], str]] = {
    "prompts": check_prompts,
    "server": check_server,
    "demo": check_demo,
    "vae-cpu": check_vae_cpu,
    "lora-patches": check_lora,
    "loaded-size": check_loaded_size,
    "device-memory": check_device_memory,
}


def verdict_line(check: str, mode: str, ok: bool, detail: str) -> str:
    detail = " ".join(str(detail).split())  # one line, whatever the assertion said
    if len(detail) > MAX_DETAIL_CHARS:  # what failed leads, a server's or process's last words end
        detail = f"{detail[: MAX_DETAIL_CHARS // 2]} ... {detail[-MAX_DETAIL_CHARS // 2 :]}"
    return f"{VERDICT_PREFIX}: {check}[{mode}]: {'ok' if ok else 'FAILED'} {detail}".rstrip()


@contextmanager
def checked(check: str, mode: str, emit: Callable[[str], None]):
    """Emit one verdict line for the block: ok, or FAILED with the exception (which propagates).
    Yields a list; the block appends its ok detail to it."""
    details: list[str] = []
    try:
        yield details
    except BaseException as exc:
        emit(verdict_line(check, mode, False, f"{type(exc).__name__}: {exc}"))
        raise
    emit(verdict_line(check, mode, True, " ".join(details)))


def run_check(run: ModeRun, check: str, emit: Callable[[str], None]) -> None:
    with checked(check, run.mode.name, emit) as details:
        details.append(CHECKS[check](run))


def verdict_emitter(request) -> Callable[[str], None]:
    """Each verdict line to the log, to the terminal at once (past pytest's output capture) and into
    the test's report (`user_properties`): under pytest-xdist, whose workers' output is lost, the
    session's terminal summary lists them (tests/conftest.py)."""
    config = request.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")

    def emit(line: str) -> None:
        log.info("%s", line)
        request.node.user_properties.append((VERDICT_PREFIX, line))
        if reporter is None or capture is None:
            return
        with capture.global_and_fixture_disabled():
            writer = getattr(reporter, "_tw", None)  # after -q's progress dots, a line of its own
            if getattr(writer, "width_of_current_line", 0):
                reporter.write("\n")
            reporter.write_line(line)

    return emit

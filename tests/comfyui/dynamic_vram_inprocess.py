"""The dynamic-VRAM loaded-bytes check with ComfyUI imported as a library, in a process of its own.

    COMFYUI_PATH=<ComfyUI 0.33+> python tests/comfyui/dynamic_vram_inprocess.py MODE BASE

MODE is dynamic, estimate (CUDA, `--disable-dynamic-vram`) or cpu; BASE a folder prepared by
dynamic_vram_support (tiny WAN 2.1 and its LoRA). The process sets ComfyUI up as main.py does
(comfy-aimdo initialised before torch loads, then its devices, then the dynamic patcher as ComfyUI's
core patcher), loads the LoRA'd tiny WAN, samples two steps (which loads it), then calls the pack's
models builder between two reads of `patcher.loaded_size()` and prints one JSON object. A process of
its own: aimdo must start before CUDA, and ComfyUI's globals stay out of the test session.

`run_inprocess` runs it from a test; `check_inprocess` is the check on what it printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
WAN = "pm_tiny_wan21.safetensors"
LORA = "pm_dynamic_vram_lora_wan.safetensors"
TIMEOUT_S = 600  # a hang watchdog only


def setup_comfyui(mode: str) -> bool:
    """Import ComfyUI's core for `mode` as main.py does; True when dynamic VRAM is on."""
    sys.path.insert(0, os.environ["COMFYUI_PATH"])
    import comfy.cli_args

    args = comfy.cli_args.args
    args.cpu = mode == "cpu"
    args.disable_dynamic_vram = mode != "dynamic"
    import comfy_aimdo.control
    import cuda_malloc  # noqa: F401  (main.py's allocator choice, made before torch loads)

    aimdo_loaded = comfy.cli_args.enables_dynamic_vram() and comfy_aimdo.control.init()
    import comfy.memory_management
    import comfy.model_management as mm
    import comfy.model_patcher

    if not aimdo_loaded:
        return False
    headroom_bytes = int(args.vram_headroom * 1024**3)
    devices = mm.get_all_torch_devices()
    try:
        initialised = comfy_aimdo.control.init_devices((d.index, headroom_bytes) for d in devices)
    except TypeError:  # comfy-aimdo 0.4.9 takes device indices only, as main.py allows
        initialised = comfy_aimdo.control.init_devices(d.index for d in devices)
    if not initialised:
        return False
    comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
    comfy.memory_management.aimdo_enabled = True
    return True


def sample_lora_model(base: Path):
    """The LoRA'd tiny WAN after two sampler steps (the sampler loads it, with its patches)."""
    import comfy.sample
    import comfy.sd
    import comfy.utils
    import torch

    model = comfy.sd.load_diffusion_model(str(base / "models" / "diffusion_models" / WAN))
    lora = comfy.utils.load_torch_file(str(base / "models" / "loras" / LORA), safe_load=True)
    patched, _ = comfy.sd.load_lora_for_models(model, None, lora, 1.0, 0)
    generator = torch.Generator().manual_seed(1)
    positive = [[torch.randn(1, 8, 4096, generator=generator), {}]]
    negative = [[torch.randn(1, 8, 4096, generator=generator), {}]]
    latent = torch.zeros(1, 16, 1, 4, 4)
    noise = comfy.sample.prepare_noise(latent, 7)
    comfy.sample.sample(
        patched, noise, 2, 2.0, "euler", "simple", positive, negative, latent, disable_pbar=True
    )
    return patched


def main(argv: list[str]) -> int:
    mode, base = argv[0], Path(argv[1])
    aimdo_enabled = setup_comfyui(mode)
    patcher = sample_lora_model(base)
    sys.path.append(str(REPO_ROOT))  # after ComfyUI: its `nodes` and `utils` must win
    from monitors.models.report import build_models_step

    size_before = int(patcher.loaded_size())
    step = build_models_step(None, {"model": patcher}).to_dict()
    size_after = int(patcher.loaded_size())
    result = {
        "aimdo_enabled": aimdo_enabled,
        "patcher_class": type(patcher).__name__,
        "load_device": str(patcher.load_device),
        "loaded_size_before": size_before,
        "loaded_size_after": size_after,
        "model_loaded_weight_memory": int(patcher.model.model_loaded_weight_memory),
        "model": step["details"]["objects"]["model"],
    }
    sys.stdout.write("DYNAMIC_VRAM_INPROCESS " + json.dumps(result) + "\n")
    return 0


def run_inprocess(base: Path, mode_name: str) -> dict:
    """Run this file for `mode_name` on `base`; what it printed, or AssertionError with its output."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), mode_name, str(base)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("DYNAMIC_VRAM_INPROCESS ")]
    assert done.returncode == 0 and lines, f"exit {done.returncode}: {(done.stdout + done.stderr)[-2000:]}"
    return json.loads(lines[-1].split(" ", 1)[1])


def check_inprocess(result: dict, mode) -> str:
    """`mode` a dynamic_vram_support.Mode: the manager, the patches and loaded bytes it implies."""
    model = result["model"]
    dynamic = mode.memory_manager == "dynamic"
    assert result["aimdo_enabled"] is dynamic, (
        f"aimdo enabled {result['aimdo_enabled']} ({result['patcher_class']})"
    )
    seen = {name: model[name] for name in ("memory_manager", "patch_application", "weights_patched")}
    expected = {
        "memory_manager": mode.memory_manager,
        "patch_application": mode.patch_application,
        "weights_patched": mode.weights_patched,
    }
    assert seen == expected, f"{seen} != {expected}"
    size = result["loaded_size_before"]
    reported = (model["loaded_weight_bytes"], model["resident_bytes"], result["loaded_size_after"])
    assert size > 0 and reported == (size, size, size), (
        f"loaded/resident/loaded_size() after {reported}, loaded_size() before {size}, "
        f"reasons {model['unknown_reasons']}"
    )
    return (
        f"{result['patcher_class']} on {result['load_device']}: loaded_weight_bytes=resident_bytes="
        f"loaded_size()={size} (model_loaded_weight_memory={result['model_loaded_weight_memory']}), "
        f"patch_application={seen['patch_application']}"
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The VAE chain's CPU rung under dynamic VRAM (ComfyUI 0.33+), with ComfyUI's own hand-over on the CPU.

Dynamic VRAM needs CUDA, but the hand-over that broke the CPU rung does not: a VAE whose patcher
says it is dynamic is reloaded by ComfyUI's own `ModelPatcher.clone(disable_dynamic=True)` through
`cached_patcher_init` (here the VAE loader's `comfy.sd.load_vae_patcher`, as VAELoader registers it),
and that fresh module keeps the file's dtype while the VAE's working dtype is the GPU's (bf16 on an
H200). `strategy=cpu` must then give the latent of core VAEEncode on the unwrapped VAE, and leave
the VAE passed in as it was. The same where no loader is registered and the rung encodes with the
VAE's own weights (the shared-module fallback), there of another dtype than the CPU's.
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from conftest import load_script
from vae_encode_support import core_encode, noise_image, run_node, vae_state

pytestmark = pytest.mark.comfyui

GPU_WORKING_DTYPE = torch.bfloat16
DTYPE_MISMATCH = "Input type (c10::BFloat16) and bias type (float) should be the same"


@pytest.fixture(scope="module")
def vae_files(comfy, tmp_path_factory):
    """The tiny WAN 2.1 VAE file (float32) and a bfloat16 copy of it, with the file's metadata."""
    import comfy.model_patcher
    import comfy.utils
    from safetensors.torch import save_file

    if "disable_dynamic" not in inspect.signature(comfy.model_patcher.ModelPatcher.clone).parameters:
        pytest.skip("this ComfyUI has no dynamic VRAM (clone(disable_dynamic=...)): 0.33 or later")
    base = tmp_path_factory.mktemp("cpu_rung_dynamic")
    fp32_path = load_script("make_tiny_models").make_tiny_models(str(base))["vae"]
    sd, metadata = comfy.utils.load_torch_file(fp32_path, return_metadata=True)
    bf16_path = str(base / "pm_tiny_wan21_vae_bf16.safetensors")
    save_file({k: v.to(torch.bfloat16).contiguous() for k, v in sd.items()}, bf16_path, metadata=metadata)
    return {"float32": fp32_path, "bfloat16": bf16_path}


def load_vae(path: str):
    import comfy.sd
    import comfy.utils

    sd, metadata = comfy.utils.load_torch_file(path, return_metadata=True)
    return comfy.sd.VAE(sd=sd, metadata=metadata), metadata


def dynamic_like(vae, path: str | None, metadata):
    """The VAE as dynamic VRAM hands it over: its patcher says it is dynamic (a subclass of the real
    ModelPatcher, so that clone() is ComfyUI's own), reloads through VAELoader's factory when `path`
    is given, and the VAE works in the GPU's dtype while its module keeps the file's."""
    import comfy.model_patcher
    import comfy.sd

    class DynamicLikePatcher(comfy.model_patcher.ModelPatcher):
        def is_dynamic(self):
            return True

    vae.patcher.__class__ = DynamicLikePatcher
    if path is not None:
        vae.patcher.cached_patcher_init = (comfy.sd.load_vae_patcher, (path, metadata, None))
    vae.vae_dtype = GPU_WORKING_DTYPE
    return vae


def test_comfyuis_reload_hands_the_cpu_a_float32_module_for_bfloat16_input(comfy, vae_files):
    """The failure this guards against, reproduced with ComfyUI's code alone: the rung before the
    fix (the reloaded patcher's module, the VAE's working dtype) fails on the first convolution."""
    path = vae_files["float32"]
    vae = dynamic_like(*load_vae(path)[:1], path, load_vae(path)[1])
    view = copy.copy(vae)
    view.patcher = vae.patcher.clone(disable_dynamic=True)
    view.patcher.load_device = view.device = torch.device("cpu")
    view.first_stage_model = view.patcher.model
    assert type(view.patcher).__name__ == "ModelPatcher" and view.first_stage_model is not vae.first_stage_model
    assert {p.dtype for p in view.first_stage_model.parameters()} == {torch.float32}
    with pytest.raises(RuntimeError, match=DTYPE_MISMATCH.replace("(", r"\(").replace(")", r"\)")):
        view.encode(noise_image(1, 32, 32, seed=3))


@pytest.mark.parametrize("loader", ["reloaded from its file", "shared module"])
def test_cpu_strategy_gives_core_vae_encode_of_the_unwrapped_vae_and_leaves_the_vae_as_it_was(
    comfy, vae_files, pack_runtime, loader
):
    reloads = loader == "reloaded from its file"
    path = vae_files["float32" if reloads else "bfloat16"]
    pixels = noise_image(5, 48, 40, seed=11)
    unwrapped, metadata = load_vae(path)
    expected = core_encode(comfy, unwrapped, pixels)
    vae, _ = load_vae(path)
    if not reloads:  # dynamic VRAM loads the module with assign=True: it keeps the file's bf16
        vae.first_stage_model.to(torch.bfloat16)
    vae = dynamic_like(vae, path if reloads else None, metadata)
    before = vae_state(vae)
    output, step = run_node(comfy, pack_runtime, pixels=pixels, vae=vae, strategy="cpu")
    assert not isinstance(output, Exception), repr(output)
    (latent,) = output.args
    assert latent["samples"].dtype == torch.float32 and torch.equal(latent["samples"], expected)
    assert step["summary"]["strategy_used"] == "cpu"
    cpu = step["details"]["attempts"][-1]
    assert cpu["outcome"] == "ok" and cpu["compute_dtype"] == "float32"
    assert cpu["weights_detached"] is False  # never loaded on a GPU here
    codes = [f["code"] for f in step["findings"]]
    if reloads:
        assert cpu["weights_reload_s"] > 0 and "cpu_weights_reloaded" in codes
    else:
        assert cpu["weights_reload_s"] is None and "cpu_weights_reloaded" not in codes
    after = vae_state(vae)
    assert after["clones_loaded"] == [], "the temporary CPU patcher must not stay loaded"
    for key in ("device", "load_device", "offload_device", "dtype", "params", "cast_flags"):
        assert after[key] == before[key], key
    assert after["patcher"] is before["patcher"] and after["module"] is before["module"]
    assert vae.vae_dtype == GPU_WORKING_DTYPE and vae.patcher.is_dynamic()

"""A VAE encode under a capped allocator (`torch.cuda.set_per_process_memory_fraction`) on a real
CUDA device: the free memory the chain predicts with honours the cap, and the out-of-memory is
counted, also when ComfyUI's own VAE.encode catches it and retries tiled (real ComfyUI in-process
when COMFYUI_PATH is set). Skipped without CUDA: the only CUDA call made then is is_available()."""

from __future__ import annotations

import copy
import os
import sys

import pytest
import torch

from monitors.probes import Probes
from monitors.vae.calibration import CalibrationTable
from monitors.vae.chain import run_chain
from monitors.vae.comfy_retry import COMFY_RETRY_TILERS, RETRY_STRATEGY
from monitors.vae.geometry import TileSettings
from monitors.vae.outcomes import OOM, ChainOptions, read_free_memory
from monitors.vae.report import build_step
from tests.comfyui.conftest import TINY_KL_VAE_CONFIG

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
    ),
]

MiB = 1024**2
HEADROOM_BYTES = 512 * MiB  # what the cap leaves above what the process holds already
COMFY_TILED_RETRY_WARNING = "Ran out of memory when regular VAE encoding"


@pytest.fixture
def capped():
    """The allocator capped at what this process holds plus HEADROOM_BYTES; lifted afterwards."""
    torch.zeros(1, device="cuda:0")
    torch.cuda.synchronize(0)
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    limit = torch.cuda.memory_reserved(0) + HEADROOM_BYTES
    torch.cuda.set_per_process_memory_fraction(limit / total, 0)
    try:
        yield limit
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, 0)
        torch.cuda.empty_cache()


class GreedyVAE:
    """ComfyUI's VAE interface, on CUDA: direct needs 4 GiB at once, a tile 16 MiB."""

    device, vae_dtype, latent_dim, latent_channels, downscale_ratio = "cuda:0", torch.float32, 2, 4, 8
    output_channels, pad_channel_value = 3, None

    def memory_used_encode(self, shape, dtype):
        return 64 * shape[-2] * shape[-1]

    def model_size(self):
        return 0

    def _encode(self, pixels, n_bytes):
        block = torch.empty(n_bytes, dtype=torch.uint8, device="cuda:0")
        del block
        b, h, w, _ = pixels.shape
        return torch.zeros(b, 4, h // 8, w // 8)

    def encode(self, pixels):
        return self._encode(pixels, 4096 * MiB)

    def encode_tiled(self, pixels, tile_x=None, tile_y=None, overlap=None, tile_t=None, overlap_t=None):
        return self._encode(pixels, 16 * MiB)


def test_the_cap_is_read_and_an_out_of_memory_under_it_is_counted(capped):
    probes = Probes()
    limit = probes.gpu_process_limit(0)
    assert limit is not None and abs(limit["limit_bytes"] - capped) <= MiB, (limit, probes.failures())
    reading = read_free_memory("cuda:0", probes=probes)
    assert reading.free_bytes <= capped and reading.capped_by_process_limit, reading
    options = ChainOptions(strategy="direct", tiles=TileSettings(tile_size=256), calibration=CalibrationTable())
    result = run_chain(GreedyVAE(), torch.rand(1, 1024, 1024, 3), options)
    assert [(a.strategy, a.outcome) for a in result.attempts][:2] == [("direct", OOM), ("tiled", "ok")]
    step = build_step("1", result)
    assert step.summary["n_out_of_memory"] == 1 and step.summary["direct_free_bytes"] <= capped


@pytest.fixture(scope="module")
def comfy_sd():
    path = os.environ.get("COMFYUI_PATH")
    if not path:
        pytest.skip("COMFYUI_PATH is not set: the ComfyUI part needs a checkout")
    if path not in sys.path:
        sys.path.insert(0, path)
    import comfy.model_management as mm

    if mm.get_torch_device().type != "cuda":
        pytest.skip(f"ComfyUI was imported for {mm.get_torch_device()} in this process, not CUDA")
    import comfy.ldm.models.autoencoder
    import comfy.sd

    return comfy


def kl_vae(comfy):
    """A small SD-style KL VAE (32 base channels) with fixed random weights, on the GPU."""
    config = copy.deepcopy(TINY_KL_VAE_CONFIG)
    torch.manual_seed(3)
    source = comfy.ldm.models.autoencoder.AutoencoderKL(**config["params"])
    with torch.no_grad():
        for param in source.parameters():
            param.normal_(0.0, 0.02)
    return comfy.sd.VAE(sd=source.state_dict(), config=config, device=torch.device("cuda:0"), dtype=torch.float32)


def test_an_out_of_memory_comfyui_caught_under_the_cap_is_counted(comfy_sd, capped):
    """2048x2048 through a 32-channel KL VAE needs several GiB at full resolution: under a cap of
    512 MiB above what the process holds, ComfyUI's encode runs out, catches it and tiles."""
    vae = kl_vae(comfy_sd)
    vae.encode(torch.rand(1, 64, 64, 3))  # loads the weights before the step, as a warm pipeline
    options = ChainOptions(
        strategy="direct",
        allow_dummy=True,
        watch_log_messages=(COMFY_TILED_RETRY_WARNING,),
        retry_tilers=COMFY_RETRY_TILERS,
        calibration=CalibrationTable(),
    )
    with torch.inference_mode():
        result = run_chain(vae, torch.rand(1, 2048, 2048, 3), options)
    attempts = [(a.strategy, a.outcome) for a in result.attempts]
    assert attempts[0] == ("direct", OOM) and result.attempts[0].caught_by_comfyui, attempts
    assert attempts[1][0] == RETRY_STRATEGY, attempts
    step = build_step("1", result)
    assert step.summary["n_out_of_memory"] >= 1, step.summary
    assert step.summary["direct_free_bytes"] <= capped
    assert "estimate_pessimistic" not in {f.code for f in step.findings}

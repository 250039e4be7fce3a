"""The real backends on a real CUDA device: allocator peaks of spans (per node and per prompt) equal
torch's own figure, NVML readings are there, and the VAE chain's `auto` strategy chooses from the
device's real free memory. Skipped without CUDA: the only CUDA call made then is is_available()."""

from __future__ import annotations

import pytest
import torch

from monitors.engine.node_rows import node_profile_from_span
from monitors.engine.span import Span
from monitors.probes import DETAIL_FULL, Probes
from monitors.vae.chain import run_chain
from monitors.vae.geometry import TileSettings
from monitors.vae.outcomes import OK, SKIPPED, ChainOptions, read_free_memory

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
    ),
]

MiB = 1024**2
BLOCK_BYTES = 64 * MiB


@pytest.fixture
def cuda():
    """CUDA initialised by the test, as a pipeline would: the probes never initialise it themselves."""
    torch.zeros(1, device="cuda:0")
    torch.cuda.synchronize(0)
    yield torch.device("cuda:0")
    torch.cuda.empty_cache()


def test_allocator_peaks_of_a_node_inside_a_prompt_equal_torch(cuda):
    probes = Probes()  # the real backends: torch.cuda and NVML
    with Span("prompt", probes=probes) as prompt:
        with Span("node", probes=probes) as node:
            block = torch.empty(BLOCK_BYTES, dtype=torch.uint8, device=cuda)
            del block
        torch_peak_bytes = torch.cuda.max_memory_allocated(0)  # since the node reset the counter
    start_bytes = node.result.baseline.gpus[0].allocated_bytes
    node_peak_bytes = node.result.peak("cuda:0.allocated_bytes")
    assert node_peak_bytes == torch_peak_bytes and node_peak_bytes >= start_bytes + BLOCK_BYTES
    # The node's reset of the process-wide counter must not lose the peak for the enclosing prompt.
    assert prompt.result.peak("cuda:0.allocated_bytes") == torch_peak_bytes
    row = node_profile_from_span("1", "Node", "Node", "executed", node.result, 0.0)
    row_peak = next(p for p in row.gpu_peaks if p.device == "cuda:0")
    assert row_peak.peak_allocated_bytes == torch_peak_bytes
    assert row_peak.peak_reserved_bytes >= row_peak.peak_allocated_bytes
    reading = probes.torch_memory(0)
    assert reading["peak_allocated_bytes"] == torch.cuda.max_memory_allocated(0)
    assert reading["allocated_bytes"] == torch.cuda.memory_allocated(0)


def test_nvml_readings_of_device_0_are_present(cuda):
    probes = Probes()
    assert probes.nvml_device_count() >= 1, probes.nvml.unavailable_reason
    (gpu, *_) = probes.snapshot(DETAIL_FULL).gpus
    assert gpu.name, probes.failures()
    assert gpu.nvml_total_bytes is not None and gpu.nvml_used_bytes is not None, probes.failures()
    assert 0 < gpu.nvml_used_bytes <= gpu.nvml_total_bytes  # this process holds a CUDA context
    assert gpu.utilization_pct is not None and 0 <= gpu.utilization_pct <= 100, probes.failures()


class CudaVAE:
    """ComfyUI's VAE interface over a one-layer encoder on CUDA (8x down, 4 channels). Its memory
    estimate is `bytes_per_pixel` per input pixel, so a test sets what each strategy seems to need."""

    latent_dim, downscale_ratio, output_channels, pad_channel_value = 2, 8, 3, None
    vae_dtype = torch.float32
    output_device = torch.device("cpu")

    def __init__(self, bytes_per_pixel: int):
        self.bytes_per_pixel = bytes_per_pixel
        self.model = torch.nn.Conv2d(3, 4, kernel_size=8, stride=8).to("cuda:0")
        self.device = torch.device("cuda:0")
        self.calls: list[str] = []

    def memory_used_encode(self, shape, dtype):
        return self.bytes_per_pixel * shape[-2] * shape[-1]

    def model_size(self):
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    def _encode(self, pixels):
        return self.model(pixels.movedim(-1, 1).to(self.device)).to(self.output_device)

    def encode(self, pixels):
        self.calls.append("direct")
        return self._encode(pixels)

    def encode_tiled(self, pixels, tile_x=None, tile_y=None, overlap=None, tile_t=None, overlap_t=None):
        self.calls.append("tiled")
        return self._encode(pixels)


@pytest.mark.parametrize("too_large", [True, False], ids=["estimate_over_free", "estimate_fits"])
def test_vae_chain_auto_on_the_real_device_budget(cuda, too_large):
    pixels = torch.rand(1, 1024, 1024, 3)
    tiles = TileSettings(tile_size=256, overlap=32)  # a tile is 1/16 of the image
    free_bytes = read_free_memory("cuda:0").free_bytes  # as this process can use it (its fraction too)
    # Over: the whole image "needs" three times the free memory, a tile 3/16 of it (before any
    # encode calibrated the estimate, auto skips direct only when even half of it cannot fit).
    bytes_per_pixel = -(-3 * free_bytes // (1024 * 1024)) if too_large else 1
    vae = CudaVAE(bytes_per_pixel)
    result = run_chain(vae, pixels, ChainOptions(strategy="auto", tiles=tiles))
    direct, tiled = result.predictions["direct"], result.predictions["tiled"]
    assert direct.device == "cuda:0" and direct.free_bytes is not None, direct
    assert direct.fits is (not too_large) and tiled.fits is True, (direct, tiled)
    expected = "tiled" if too_large else "direct"
    assert result.strategy_used == expected and vae.calls == [expected], result.attempts
    outcomes = [(a.strategy, a.outcome) for a in result.attempts]
    assert outcomes == ([("direct", SKIPPED), ("tiled", OK)] if too_large else [("direct", OK)])
    assert tuple(result.samples.shape) == (1, 4, 128, 128) and result.error is None


def _launch_kernels(x, n):
    for _ in range(n):
        x = x @ x
        x = x / x.norm()  # keeps values finite: every product is a real kernel, never a shortcut
    return x


def test_node_gpu_time_counts_kernels_it_only_launched(cuda, tmp_path):
    """A node that launches ~200 ms of kernels and returns at once shows ~200 ms GPU time; the node
    after it that waits for the GPU (as a VAE decode or a save does) shows almost none."""
    from monitors.engine.recorder import RunRecorder
    from monitors.engine.store import RunStore

    x = torch.randn(4096, 4096, device=cuda)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    _launch_kernels(x, 2)  # warm-up: kernel selection, workspace
    start.record()
    _launch_kernels(x, 5)
    end.record()
    end.synchronize()
    n = max(1, round(0.2 / (start.elapsed_time(end) / 1000 / 5)))
    start.record()
    _launch_kernels(x, n)
    end.record()
    end.synchronize()
    expected_s = start.elapsed_time(end) / 1000

    recorder = RunRecorder(RunStore(str(tmp_path)), probes=Probes())
    recorder.begin_run("gpu-time", {"1": {"class_type": "Launch"}, "2": {"class_type": "Wait"}})
    recorder.node_started("1")
    _launch_kernels(x, n)  # returns once queued
    recorder.node_finished("1")
    recorder.node_started("2")
    torch.cuda.synchronize(0)
    recorder.node_finished("2")
    report = recorder.end_run("success")
    rows = {row.node_id: row for row in report.nodes}
    launched, waited = rows["1"], rows["2"]
    assert launched.gpu_time_s is not None, launched.gpu_time_unknown_reason
    # Both sides are CUDA event times of the same kernels on one stream; the bounds are generous.
    assert 0.5 * expected_s <= launched.gpu_time_s <= 2.0 * expected_s + 0.05  # one clock: CUDA events
    # The waiting node ran no kernels of its own: its wall time absorbed the wait, not its GPU time.
    assert waited.gpu_time_s is not None
    assert waited.gpu_time_s <= 0.25 * launched.gpu_time_s  # one clock: CUDA events

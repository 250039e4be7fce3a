"""The VAE fallback chain on fake VAEs that run out of memory at chosen strategies."""

from __future__ import annotations

import gc
import logging
import math
import weakref

import pytest
import torch

from monitors.probes.fake import GiB, fake_probes
from monitors.vae.chain import run_chain
from monitors.vae.geometry import TileSettings
from monitors.vae.outcomes import (
    ERROR,
    OK,
    OOM,
    SKIPPED,
    ChainOptions,
    is_out_of_memory,
    strategy_plan,
)

MiB = 1024**2
CUDA_OOM = torch.cuda.OutOfMemoryError
CPU_OOM_TEXT = "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 4294967296 bytes."
COMFY_RETRY_WARNING = (
    "Warning: Ran out of memory when regular VAE encoding, retrying with tiled VAE encoding."
)


class FakeVAE:
    """ComfyUI's VAE interface: 8x spatial compression, 4 latent channels (image) or a WAN-like
    video VAE (16 channels, 4x temporal). `fail` maps a strategy to the exception it raises."""

    def __init__(self, fail=None, device="cuda:0", video=False, bytes_per_pixel=1000, size=100 * MiB):
        self.fail = dict(fail or {})
        self.device = device
        self.vae_dtype = torch.float32
        self.output_device = torch.device("cpu")
        self.output_channels = 3
        self.pad_channel_value = None
        self.bytes_per_pixel = bytes_per_pixel
        self.size = size
        self.calls = []
        if video:
            self.latent_dim, self.latent_channels = 3, 16
            self.downscale_ratio = (lambda a: max(0, math.floor((a + 3) / 4)), 8, 8)
            self.upscale_ratio = (lambda a: max(0, a * 4 - 3), 8, 8)
        else:
            self.latent_dim, self.latent_channels, self.downscale_ratio = 2, 4, 8

    def memory_used_encode(self, shape, dtype):
        return self.bytes_per_pixel * shape[-2] * shape[-1]

    def model_size(self):
        return self.size

    def _latent(self, pixels):
        b, h, w, _ = pixels.shape
        if self.latent_dim == 3:
            return torch.ones(1, 16, (b + 3) // 4, h // 8, w // 8)
        return torch.ones(b, 4, h // 8, w // 8)

    def _run(self, strategy, pixels):
        self.calls.append(strategy)
        if strategy in self.fail:
            raise self.fail[strategy]
        return self._latent(pixels)

    def encode(self, pixels):
        return self._run("direct", pixels)

    def encode_tiled(self, pixels, tile_x=None, tile_y=None, overlap=None, tile_t=None, overlap_t=None):
        self.tiled_kwargs = dict(
            tile_x=tile_x, tile_y=tile_y, overlap=overlap, tile_t=tile_t, overlap_t=overlap_t
        )
        return self._run("tiled", pixels)


def cpu_encode(vae, pixels):
    return vae._run("cpu", pixels)


class FakeMemory:
    """Free memory per device; cleanup() gives `reclaim` bytes back."""

    def __init__(self, free=8 * GiB, reclaim=0):
        self.free = {"cuda:0": free, "cpu": 64 * GiB}
        self.reclaim = reclaim
        self.cleanups = 0

    def read(self, device):
        return self.free.get(str(device))

    def cleanup(self):
        self.cleanups += 1
        self.free["cuda:0"] += self.reclaim


def options(memory=None, **kwargs):
    memory = memory or FakeMemory()
    kwargs.setdefault("cpu_encode", cpu_encode)
    kwargs.setdefault("probes", fake_probes("1 GPU"))
    return ChainOptions(free_memory=memory.read, cleanup=memory.cleanup, **kwargs)


def pixels(b=1, h=64, w=64, c=3):
    return torch.rand(b, h, w, c)


def outcomes(result):
    return [(a.strategy, a.outcome) for a in result.attempts]


# -- the chain ------------------------------------------------------------------------------------


def test_direct_that_works_is_the_only_attempt():
    vae = FakeVAE()
    result = run_chain(vae, pixels(2), options())
    assert result.strategy_used == "direct" and result.error is None
    assert outcomes(result) == [("direct", OK)]
    assert tuple(result.samples.shape) == (2, 4, 8, 8)
    assert vae.calls == ["direct"]


def test_oom_at_direct_moves_to_tiled_after_cleanup():
    vae = FakeVAE(fail={"direct": CUDA_OOM("CUDA out of memory. Tried to allocate 9.00 GiB")})
    memory = FakeMemory(reclaim=512 * MiB)
    result = run_chain(vae, pixels(), options(memory, strategy="direct"))
    assert result.strategy_used == "tiled"
    assert outcomes(result) == [("direct", OOM), ("tiled", OK)]
    direct = result.attempts[0]
    assert direct.error_type == "OutOfMemoryError" and "Tried to allocate 9.00 GiB" in direct.error_message
    assert direct.duration_s is not None and direct.duration_s >= 0
    assert memory.cleanups == 1 and direct.cleanup_reclaimed_bytes == 512 * MiB
    assert result.cleanup_reclaimed_bytes == 512 * MiB
    assert vae.tiled_kwargs == dict(tile_x=512, tile_y=512, overlap=64, tile_t=64, overlap_t=8)


def test_oom_at_direct_and_tiled_moves_to_cpu():
    vae = FakeVAE(fail={"direct": CUDA_OOM("CUDA out of memory"), "tiled": RuntimeError(CPU_OOM_TEXT)})
    memory = FakeMemory()
    result = run_chain(vae, pixels(), options(memory))
    assert result.strategy_used == "cpu"
    assert outcomes(result) == [("direct", OOM), ("tiled", OOM), ("cpu", OK)]
    assert vae.calls == ["direct", "tiled", "cpu"] and memory.cleanups == 2
    assert result.attempts[1].error_type == "RuntimeError"


def all_oom_vae():
    return FakeVAE(
        fail={
            "direct": CUDA_OOM("CUDA out of memory"),
            "tiled": CUDA_OOM("CUDA out of memory"),
            "cpu": RuntimeError(CPU_OOM_TEXT),
        }
    )


def test_all_oom_without_dummy_is_a_clear_out_of_memory_error():
    result = run_chain(all_oom_vae(), pixels(), options())
    assert result.samples is None and result.strategy_used is None
    assert result.error_kind == "out_of_memory"
    assert "every strategy" in result.error and "allow_dummy" in result.error
    assert outcomes(result) == [("direct", OOM), ("tiled", OOM), ("cpu", OOM), ("dummy", SKIPPED)]
    assert result.attempts[-1].reason == "allow_dummy is off"


def test_all_oom_with_dummy_gives_zeros_of_the_latent_shape():
    result = run_chain(all_oom_vae(), pixels(3, 72, 40), options(allow_dummy=True))
    assert result.strategy_used == "dummy" and result.error is None
    assert tuple(result.samples.shape) == (3, 4, 9, 5)
    assert result.samples.dtype == torch.float32 and not result.samples.any()


def test_dummy_latent_of_a_video_vae_has_the_temporal_shape():
    vae = FakeVAE(video=True, fail={s: CUDA_OOM("CUDA out of memory") for s in ("direct", "tiled", "cpu")})
    result = run_chain(vae, pixels(9, 64, 64), options(allow_dummy=True))
    assert result.strategy_used == "dummy"
    assert tuple(result.samples.shape) == (1, 16, 3, 8, 8)


def test_a_non_oom_exception_stops_the_chain():
    error = ValueError("expected input[1, 4, 64, 64] to have 3 channels")
    vae = FakeVAE(fail={"direct": error})
    memory = FakeMemory()
    result = run_chain(vae, pixels(), options(memory))
    assert outcomes(result) == [("direct", ERROR)]
    assert vae.calls == ["direct"] and memory.cleanups == 0
    assert result.samples is None and result.error_kind == "error"
    assert "direct" in result.error and "ValueError" in result.error and "3 channels" in result.error
    assert result.exception is error


def test_a_non_oom_exception_in_tiled_stops_before_cpu():
    vae = FakeVAE(
        fail={
            "direct": CUDA_OOM("CUDA out of memory"),
            "tiled": RuntimeError("Inplace update to inference tensor"),
        }
    )
    result = run_chain(vae, pixels(), options(allow_dummy=True))
    assert outcomes(result) == [("direct", OOM), ("tiled", ERROR)]
    assert result.samples is None and result.error_kind == "error"


@pytest.mark.parametrize(
    "exc, expected",
    [
        (CUDA_OOM("CUDA out of memory"), True),
        (RuntimeError(CPU_OOM_TEXT), True),
        (RuntimeError("not enough memory: you tried to allocate 123 bytes"), True),
        (RuntimeError("MPS backend out of memory"), True),
        (MemoryError(), True),
        (
            RuntimeError("Given groups=1, weight of size [8, 3, 3, 3], expected input to have 3 channels"),
            False,
        ),
        (ValueError("out of range"), False),
        (KeyError("memory"), False),
    ],
)
def test_out_of_memory_detection(exc, expected):
    assert is_out_of_memory(exc) is expected


def test_the_oom_exception_and_what_its_frames_hold_are_released():
    """The chain keeps no reference to the OOM exception, so tensors in its frames can be freed."""
    held = {}

    class HoldingVAE(FakeVAE):
        def encode(self, pixels):
            activation = torch.empty(1024)  # stands for a big activation alive when the OOM hit
            held["ref"] = weakref.ref(activation)
            raise CUDA_OOM("CUDA out of memory")

    seen_alive = []

    def cleanup():
        gc.collect()
        seen_alive.append(held["ref"]() is not None)

    chain_options = ChainOptions(free_memory=FakeMemory().read, cleanup=cleanup, probes=fake_probes("1 GPU"))
    result = run_chain(HoldingVAE(), pixels(), chain_options)
    assert result.strategy_used == "tiled"
    assert seen_alive == [False], "the activation was still alive when cleanup ran"
    assert result.exception is None


# -- auto: predictions ----------------------------------------------------------------------------


def test_auto_skips_direct_when_the_estimate_does_not_fit_and_the_prediction_holds():
    # 100 kB per pixel: direct on 256x256 needs 6.1 GiB (+100 MiB weights); tiles of 64 need 391 MiB.
    vae = FakeVAE(bytes_per_pixel=100_000)
    memory = FakeMemory(free=2 * GiB)
    result = run_chain(vae, pixels(1, 256, 256), options(memory, tiles=TileSettings(tile_size=64)))
    assert vae.calls == ["tiled"]
    assert outcomes(result) == [("direct", SKIPPED), ("tiled", OK)]
    skipped = result.attempts[0]
    assert skipped.reason.startswith("predicted not to fit") and "2.0 GiB free" in skipped.reason
    direct = result.predictions["direct"]
    assert direct.estimate_bytes == 100_000 * 256 * 256
    assert direct.weights_to_load_bytes == 100 * MiB
    assert direct.needed_bytes == 100_000 * 256 * 256 + 100 * MiB
    assert direct.free_bytes == 2 * GiB and direct.fits is False
    tiled = result.attempts[1]
    assert tiled.prediction.estimate_bytes == 100_000 * 64 * 64 and tiled.prediction.fits is True
    assert tiled.prediction_held is True


def test_auto_tries_direct_when_it_fits_and_records_a_prediction_that_failed():
    vae = FakeVAE(fail={"direct": CUDA_OOM("CUDA out of memory")})
    result = run_chain(vae, pixels(), options(FakeMemory(free=8 * GiB)))
    assert outcomes(result) == [("direct", OOM), ("tiled", OK)]
    assert result.attempts[0].prediction.fits is True
    assert result.attempts[0].prediction_held is False
    assert result.attempts[1].prediction_held is True


def test_auto_tries_the_last_real_strategy_even_against_the_prediction():
    # A CPU VAE: cpu would repeat direct, so tiled is the last real strategy.
    vae = FakeVAE(device="cpu", bytes_per_pixel=100_000)
    memory = FakeMemory()
    memory.free["cpu"] = 1 * MiB
    result = run_chain(vae, pixels(1, 256, 256), options(memory, tiles=TileSettings(tile_size=64)))
    assert outcomes(result) == [("direct", SKIPPED), ("tiled", OK)]
    tiled = result.attempts[1]
    assert tiled.prediction.fits is False and tiled.prediction_held is False
    assert result.predictions["direct"].weights_to_load_bytes == 0  # weights of a CPU VAE are in RAM


def test_explicit_direct_ignores_the_prediction_but_records_it():
    vae = FakeVAE(bytes_per_pixel=100_000)
    result = run_chain(vae, pixels(1, 256, 256), options(FakeMemory(free=1 * GiB), strategy="direct"))
    assert outcomes(result) == [("direct", OK)]
    assert result.attempts[0].prediction.fits is False and result.attempts[0].prediction_held is False


def test_unknown_free_memory_means_no_skipping():
    vae = FakeVAE(bytes_per_pixel=100_000)
    result = run_chain(
        vae, pixels(1, 256, 256), ChainOptions(free_memory=lambda d: None, probes=fake_probes())
    )
    assert outcomes(result) == [("direct", OK)]
    assert result.predictions["direct"].fits is None and result.attempts[0].prediction_held is None


def test_tiled_prediction_uses_the_largest_tile_of_the_three_passes():
    vae = FakeVAE()
    result = run_chain(vae, pixels(1, 256, 1024), options(tiles=TileSettings(tile_size=512)))
    # passes (512, 512), (1024, 256), (256, 1024) as (x, y): (1024, 256) covers the whole image.
    assert result.predictions["tiled"].estimate_bytes == 1000 * 256 * 1024


@pytest.mark.parametrize(
    "requested, plan",
    [
        ("auto", ("direct", "tiled", "cpu", "dummy")),
        ("direct", ("direct", "tiled", "cpu", "dummy")),
        ("tiled", ("tiled", "cpu", "dummy")),
        ("cpu", ("cpu", "dummy")),
    ],
)
def test_strategy_plan(requested, plan):
    assert strategy_plan(requested) == plan


def test_requested_tiled_starts_at_tiled_and_cpu_at_cpu():
    vae = FakeVAE()
    assert outcomes(run_chain(vae, pixels(), options(strategy="tiled"))) == [("tiled", OK)]
    assert outcomes(run_chain(vae, pixels(), options(strategy="cpu"))) == [("cpu", OK)]
    assert vae.calls == ["tiled", "cpu"]


def test_unknown_strategy_is_a_bad_input_error():
    result = run_chain(FakeVAE(), pixels(), options(strategy="fastest"))
    assert result.error_kind == "bad_input" and "fastest" in result.error


def test_cpu_is_skipped_without_a_cpu_encoder_or_for_a_vae_already_on_the_cpu():
    fail = {"direct": CUDA_OOM("CUDA out of memory"), "tiled": CUDA_OOM("CUDA out of memory")}
    result = run_chain(FakeVAE(fail=fail), pixels(), options(cpu_encode=None))
    assert outcomes(result)[2:] == [("cpu", SKIPPED), ("dummy", SKIPPED)]
    assert result.attempts[2].reason == "no CPU encoder available"
    cpu_vae = FakeVAE(
        fail={"direct": RuntimeError(CPU_OOM_TEXT), "tiled": RuntimeError(CPU_OOM_TEXT)}, device="cpu"
    )
    result = run_chain(cpu_vae, pixels(), options(allow_dummy=True))
    assert outcomes(result) == [("direct", OOM), ("tiled", OOM), ("cpu", SKIPPED), ("dummy", OK)]
    assert "already runs on the CPU" in result.attempts[2].reason


def test_comfyui_internal_tiled_retry_is_noted_and_the_prediction_did_not_hold():
    class RetryingVAE(FakeVAE):
        def encode(self, pixels):
            logging.getLogger().warning(COMFY_RETRY_WARNING)  # what ComfyUI's VAE.encode logs
            return self._latent(pixels)

    result = run_chain(
        RetryingVAE(), pixels(), options(watch_log_messages=("Ran out of memory when regular VAE encoding",))
    )
    direct = result.attempts[0]
    assert direct.outcome == OOM and direct.notes == (COMFY_RETRY_WARNING,)  # counted: it ran out
    assert direct.prediction.fits is True and direct.prediction_held is False
    assert outcomes(result) == [("direct", OOM), ("tiled (ComfyUI retry)", OK)]


def test_attempt_peaks_come_from_a_nested_span():
    probes = fake_probes("1 GPU")

    class AllocatingVAE(FakeVAE):
        def _run(self, strategy, pixels):
            probes.torch.allocate(0, 3 * GiB if strategy == "direct" else GiB)
            probes.host.set_rss(probes.host.rss_bytes + 100 * MiB)
            probes.torch.devices[0]["allocated_bytes"] = 0  # freed again at the end
            return super()._run(strategy, pixels)

    vae = AllocatingVAE(fail={"direct": CUDA_OOM("CUDA out of memory")})
    memory = FakeMemory()
    result = run_chain(
        vae, pixels(), ChainOptions(free_memory=memory.read, cleanup=memory.cleanup, probes=probes)
    )
    direct, tiled = result.attempts
    assert direct.peaks["gpu_allocated"]["value"] == 3 * GiB
    assert tiled.peaks["gpu_allocated"]["value"] == GiB
    assert tiled.peaks["rss"]["value"] == 512 * MiB + 200 * MiB
    # The whole-chain span received the attempts' peaks (nesting loses none).
    assert result.span.peak("cuda:0.allocated_bytes") == 3 * GiB


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "vae, image, code",
    [
        (None, pixels(), "no_vae"),
        (object(), pixels(), "not_a_vae"),
        (FakeVAE(), None, "no_pixels"),
        (FakeVAE(), torch.rand(64, 64, 3), "bad_image_shape"),
        (FakeVAE(), torch.rand(0, 64, 64, 3), "empty_batch"),
        (FakeVAE(), torch.rand(1, 1, 1, 3), "image_too_small"),
        (FakeVAE(), torch.rand(1, 64, 64, 1), "wrong_channels"),
    ],
)
def test_bad_input_is_a_clear_error_and_nothing_is_encoded(vae, image, code):
    result = run_chain(vae, image, options())
    assert result.error_kind == "bad_input" and result.samples is None and result.attempts == []
    assert [f.code for f in result.input_findings if f.level == "error"] == [code]
    assert result.error == result.input_findings[-1].message
    if isinstance(vae, FakeVAE):
        assert vae.calls == []


def test_nan_pixels_are_an_error_finding_but_still_encoded():
    image = pixels()
    image[0, 0, 0, 0] = float("nan")
    image[0, 1, 0, 0] = float("inf")
    result = run_chain(FakeVAE(), image, options())
    assert result.strategy_used == "direct"
    nan = [f for f in result.input_findings if f.code == "nan_pixels"]
    assert nan and nan[0].level == "error" and "1 NaN and 1 Inf" in nan[0].message


def test_extra_channels_cropping_out_of_range_and_dropped_frames_are_noted():
    image = pixels(1, 70, 64, 4) * 2
    codes = {f.code for f in run_chain(FakeVAE(), image, options()).input_findings}
    assert {"channels_dropped", "cropped", "pixels_out_of_range"} <= codes
    video = run_chain(FakeVAE(video=True), pixels(10), options())
    dropped = [f for f in video.input_findings if f.code == "frames_dropped"]
    assert dropped and "first 9 of 10 frames" in dropped[0].message


def test_an_overlap_the_tiler_cannot_run_is_reduced_with_a_warning():
    vae = FakeVAE()
    result = run_chain(vae, pixels(), options(strategy="tiled", tiles=TileSettings(tile_size=64, overlap=32)))
    assert vae.tiled_kwargs["overlap"] == 16 and result.tiles.overlap == 16
    reduced = [f for f in result.input_findings if f.code == "overlap_reduced"]
    assert reduced and reduced[0].level == "warning" and "overlap 32" in reduced[0].message
    video = FakeVAE(video=True)
    run_chain(video, pixels(9), options(strategy="tiled", tiles=TileSettings(tile_size=64, overlap=32)))
    assert video.tiled_kwargs["overlap"] == 32  # video VAEs tile without half-size passes


def test_default_free_memory_reading():
    from monitors.vae.outcomes import read_free_memory

    free = read_free_memory("cpu")
    assert isinstance(free, int) and free > 0
    assert read_free_memory("meta") is None

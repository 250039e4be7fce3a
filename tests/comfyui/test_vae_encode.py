"""PipelineMonitorVAEEncode in-process on real tiny ComfyUI VAEs (KL image VAE, WAN 2.1 video VAE)."""

from __future__ import annotations

import logging
import types

import pytest
import torch
from vae_encode_support import (
    core_encode,
    core_encode_tiled,
    load_tiny_wan_vae,
    noise_image,
    run_node,
    vae_state,
)

from monitors.probes.fake import fake_probes
from monitors.vae.comfy_retry import COMFY_RETRY_TILERS

pytestmark = pytest.mark.comfyui


@pytest.fixture(scope="session")
def wan_vae(comfy, tmp_path_factory):
    return load_tiny_wan_vae(str(tmp_path_factory.mktemp("tiny_wan_vae")))


def latent_of(output):
    assert not isinstance(output, Exception), repr(output)
    (latent,) = output.args
    assert set(latent) == {"samples"}
    return latent["samples"]


def codes(step, level=None):
    return [f["code"] for f in step["findings"] if level is None or f["level"] == level]


def attempts(step):
    return [(a["strategy"], a["outcome"]) for a in step["details"]["attempts"]]


# -- the same latent as core ----------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["direct", "auto"])
def test_direct_equals_core_vae_encode_exactly_on_a_kl_vae(comfy, tiny, pack_runtime, strategy):
    pixels = noise_image(2, 64, 48, seed=1)
    output, step = run_node(comfy, pack_runtime, pixels=pixels, vae=tiny.vae, strategy=strategy)
    ours = latent_of(output)
    expected = core_encode(comfy, tiny.vae, pixels)
    assert ours.shape == expected.shape == (2, 4, 8, 6)
    assert torch.equal(ours, expected)
    s = step["summary"]
    assert s["strategy_used"] == "direct" and s["strategy_requested"] == strategy
    assert s["latent_type"] == "image" and s["latent_shape"] == [2, 4, 8, 6]
    assert s["spatial_compression_ratio"] == 64.0 and s["temporal_compression_ratio"] is None
    assert s["latent_dtype"] == "float32" and s["latent_device"] == "cpu"
    assert s["direct_predicted_to_fit"] is True and s["direct_prediction_held"] is True
    assert s["peak_rss_bytes"] > 0 and s["duration_s"] > 0 and s["frames_per_s"] > 0
    assert isinstance(output.ui["text"], list)
    lines = output.ui["text"][0].splitlines()  # written out, not recomputed with the node's function
    assert lines[:3] == ["strategy used: direct", f"strategy requested: {strategy}", lines[2]]
    assert lines[2].startswith("time: ") and {"latent type: image", "latent shape: [2, 4, 8, 6]"} <= set(lines)


def test_wan_video_9_frames_become_3_latent_frames_equal_to_core(comfy, wan_vae, pack_runtime):
    pixels = noise_image(9, 64, 64, seed=2)
    output, step = run_node(comfy, pack_runtime, pixels=pixels, vae=wan_vae, strategy="direct")
    ours = latent_of(output)
    assert ours.shape == (1, 16, 3, 8, 8)
    assert torch.equal(ours, core_encode(comfy, wan_vae, pixels))
    s = step["summary"]
    assert s["latent_type"] == "video" and s["latent_shape"] == [1, 16, 3, 8, 8]
    assert s["input_frames"] == 9 and s["latent_frames"] == 3 and s["temporal_compression_ratio"] == 3.0
    assert s["spatial_compression_ratio"] == 64.0
    prediction = step["details"]["predictions"]["direct"]
    # WAN 2.1's own estimate: 6000 B x H x W x dtype size for more than 4 frames.
    assert prediction["estimate_bytes"] == 6000 * 64 * 64 * 4
    assert step["details"]["vae"]["module_class"] == "WanVAE"


def test_tiled_equals_core_tiled_and_is_close_to_direct(comfy, tiny, pack_runtime):
    pixels = noise_image(1, 128, 128, seed=3)
    output, step = run_node(
        comfy, pack_runtime, pixels=pixels, vae=tiny.vae, strategy="tiled", tile_size=64, overlap=16
    )
    ours = latent_of(output)
    assert step["summary"]["strategy_used"] == "tiled"
    with torch.inference_mode():
        core_tiled = core_encode_tiled(comfy, tiny.vae, pixels, tile_size=64, overlap=16)
    assert torch.equal(ours, core_tiled)
    # Tiles change a VAE's result near their borders (more so with random weights and 8-pixel
    # latents): close means far closer to direct than direct is to another image's latent.
    direct = core_encode(comfy, tiny.vae, pixels)
    other = core_encode(comfy, tiny.vae, noise_image(1, 128, 128, seed=33))
    assert torch.nn.functional.cosine_similarity(ours.flatten(), direct.flatten(), dim=0) > 0.7
    assert (ours - direct).abs().mean() < 0.5 * (other - direct).abs().mean()


def test_tiled_video_equals_core_tiled_and_one_tile_equals_direct(comfy, wan_vae, pack_runtime):
    pixels = noise_image(9, 64, 64, seed=4)
    output, _ = run_node(
        comfy,
        pack_runtime,
        pixels=pixels,
        vae=wan_vae,
        strategy="tiled",
        tile_size=32,
        overlap=8,
        temporal_size=8,
        temporal_overlap=4,
    )
    with torch.inference_mode():
        core_tiled = core_encode_tiled(comfy, wan_vae, pixels, 32, 8, 8, 4)
    assert latent_of(output).shape == (1, 16, 3, 8, 8)
    assert torch.equal(latent_of(output), core_tiled)
    output, _ = run_node(comfy, pack_runtime, pixels=pixels, vae=wan_vae, strategy="tiled", tile_size=64)
    assert torch.allclose(latent_of(output), core_encode(comfy, wan_vae, pixels), atol=1e-6)


# -- the CPU strategy -----------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["kl", "wan"])
def test_cpu_strategy_leaves_the_vae_unmoved_and_not_duplicated(
    comfy, tiny, wan_vae, pack_runtime, monkeypatch, which
):
    import comfy.model_patcher as model_patcher

    vae = tiny.vae if which == "kl" else wan_vae
    pixels = noise_image(9 if which == "wan" else 1, 64, 64, seed=5)
    expected = core_encode(comfy, vae, pixels)  # leaves the VAE loaded, as on a GPU before a fallback
    before = vae_state(vae)
    loads = []
    original_load = model_patcher.ModelPatcher.load

    def spy_load(patcher, device_to=None, *args, **kwargs):
        loads.append((patcher is not vae.patcher and patcher.is_clone(vae.patcher), str(device_to)))
        return original_load(patcher, device_to, *args, **kwargs)

    monkeypatch.setattr(model_patcher.ModelPatcher, "load", spy_load)
    output, step = run_node(comfy, pack_runtime, pixels=pixels, vae=vae, strategy="cpu")
    monkeypatch.undo()
    # The clone really moved the weights to the CPU: ComfyUI skips loading a module it finds fully
    # loaded by another patcher, which on a GPU would leave the weights there and mix devices.
    assert (True, "cpu") in loads, loads
    assert step["summary"]["strategy_used"] == "cpu"
    assert torch.equal(latent_of(output), expected)
    after = vae_state(vae)
    assert after["clones_loaded"] == [], "the temporary CPU patcher must not stay loaded"
    for key in ("device", "load_device", "offload_device", "dtype", "params", "cast_flags"):
        assert after[key] == before[key], key
    assert after["patcher"] is before["patcher"] and after["module"] is before["module"]
    assert torch.equal(core_encode(comfy, vae, pixels), expected), "the VAE still encodes as before"


# -- auto and out of memory on real VAEs ----------------------------------------------------------


def test_the_cpu_free_memory_is_comfyuis_own_figure(comfy, tiny):
    """On the CPU the chain's free memory comes from the probe (MemAvailable from a kept-open file),
    not ComfyUI's get_free_memory, which parses all of /proc/meminfo through psutil: the same figure."""
    import comfy.model_management as mm

    node_module = comfy.pack_module("nodes.vae_encode_node")
    ours = node_module.free_memory_reader(tiny.vae)("cpu")
    comfyui = int(mm.get_free_memory(torch.device("cpu")))
    assert abs(ours - comfyui) < 256 * 1024**2  # read moments apart


def test_the_gpu_free_memory_counts_what_comfyui_would_unload_less_its_reserve(comfy, tiny, monkeypatch):
    """On a GPU an encode can get what is free plus what ComfyUI would unload from the other models
    on that device (not the VAE's own patcher, not models elsewhere), less the VRAM ComfyUI keeps
    in reserve: ComfyUI's own figures, faked here (no GPU)."""
    import comfy.model_management as mm

    mib = 1024**2
    gpu, other_gpu = torch.device("cuda:0"), torch.device("cuda:1")

    def loaded(device, model, size_bytes):
        return types.SimpleNamespace(device=device, model=model, model_loaded_memory=lambda: size_bytes)

    models = [
        loaded(gpu, object(), 300 * mib),  # another model on the GPU: unloadable
        loaded(gpu, tiny.vae.patcher, 500 * mib),  # the VAE itself: stays
        loaded(other_gpu, object(), 200 * mib),  # another GPU: no help here
        loaded(torch.device("cpu"), object(), 100 * mib),
        loaded(gpu, None, 400 * mib),  # already unloaded
    ]
    monkeypatch.setattr(mm, "current_loaded_models", models)
    monkeypatch.setattr(mm, "get_free_memory", lambda device: {gpu: 1000 * mib}[device])
    reserve = {"bytes": 100 * mib}
    monkeypatch.setattr(mm, "extra_reserved_memory", lambda: reserve["bytes"])
    probes = fake_probes("no GPU")  # no process cap known: the device side stands
    read = comfy.pack_module("nodes.vae_encode_node").free_memory_reader(tiny.vae, probes)
    assert read("cuda:0").free_bytes == (1000 + 300 - 100) * mib
    assert read("cuda:0").manager == "estimate-based"
    reserve["bytes"] = 2000 * mib
    assert read("cuda:0").free_bytes == 0  # a reserve larger than what there is: nothing, not a negative


def test_the_gpu_free_memory_honours_the_process_fraction_and_the_patchers_headroom(comfy, tiny, monkeypatch):
    """Under set_per_process_memory_fraction the process can get its cap less what it allocated,
    whatever the device has free; on 0.33 the patcher's get_free_memory (free plus dynamic VRAM
    headroom) is what the VAE's own encode reads, and a dynamic patcher names its manager."""
    import comfy.model_management as mm

    mib = 1024**2
    monkeypatch.setattr(mm, "current_loaded_models", [])
    monkeypatch.setattr(mm, "get_free_memory", lambda device: 138 * 1024 * mib)
    monkeypatch.setattr(mm, "extra_reserved_memory", lambda: 0)
    probes = fake_probes("1 GPU")
    probes.torch.total_bytes[0], probes.torch.memory_fractions[0] = 140 * 1024 * mib, 3 / 140
    probes.torch.allocate(0, 1024 * mib)
    read = comfy.pack_module("nodes.vae_encode_node").free_memory_reader(tiny.vae, probes)
    reading = read("cuda:0")
    assert reading.free_bytes == 2048 * mib and reading.capped_by_process_limit
    view = types.SimpleNamespace(
        patcher=types.SimpleNamespace(get_free_memory=lambda device: 500 * mib, is_dynamic=lambda: True)
    )
    probes.torch.memory_fractions[0] = 1.0
    dynamic = comfy.pack_module("nodes.vae_encode_node").free_memory_reader(view, probes)("cuda:0")
    assert dynamic.free_bytes == 500 * mib and dynamic.manager == "dynamic"
    assert "ModelPatcher.get_free_memory" in dynamic.source


def test_auto_goes_straight_to_tiled_when_the_estimate_does_not_fit(
    comfy, wan_vae, pack_runtime, monkeypatch
):
    node_module = comfy.pack_module("nodes.vae_encode_node")
    # 40 MiB "free": not even half WAN's estimate for 64x64 (94 MiB) fits, which is what auto asks
    # before any encode calibrated the estimate; for 32x32 tiles (23 MiB) it does.
    monkeypatch.setattr(node_module, "free_memory_reader", lambda vae: lambda device: 40 * 1024**2)
    pixels = noise_image(9, 64, 64, seed=6)
    output, step = run_node(comfy, pack_runtime, pixels=pixels, vae=wan_vae, tile_size=32, overlap=8)
    assert attempts(step) == [("direct", "skipped"), ("tiled", "ok")]
    assert step["summary"]["direct_predicted_to_fit"] is False
    assert step["summary"]["direct_calibration_ratio"] is None
    assert step["summary"]["direct_calibration_source"].startswith(
        "no earlier encode of WanVAE on cpu (float32)"
    )
    assert "uncalibrated" in step["details"]["attempts"][0]["reason"]
    assert step["details"]["attempts"][1]["prediction_held"] is True
    assert "direct_predicted_too_large" in codes(step, "info")
    with torch.inference_mode():
        expected = core_encode_tiled(comfy, wan_vae, pixels, tile_size=32, overlap=8)
    assert torch.equal(latent_of(output), expected)


class OomAbove:
    """Makes a VAE's model raise CUDA's OutOfMemoryError for inputs larger than max_pixels (H*W)."""

    def __init__(self, vae, max_pixels):
        self.module, self.max_pixels, self.calls = vae.first_stage_model, max_pixels, []
        self.encode = self.module.encode

    def __call__(self, x, *args, **kwargs):
        self.calls.append(tuple(x.shape))
        if x.shape[-1] * x.shape[-2] > self.max_pixels:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB (simulated)")
        return self.encode(x, *args, **kwargs)


def test_comfyui_internal_retry_then_our_tiled_strategy_on_a_real_vae(comfy, tiny, pack_runtime, monkeypatch):
    """Direct: ComfyUI catches the OOM and retries with its default 512 tiles, which OOM again; the
    chain records that, cleans up, and its tiled strategy with 64-pixel tiles succeeds."""
    oom = OomAbove(tiny.vae, 64 * 64)
    monkeypatch.setattr(tiny.vae.first_stage_model, "encode", oom)
    pixels = noise_image(1, 128, 128, seed=7)
    output, step = run_node(
        comfy, pack_runtime, pixels=pixels, vae=tiny.vae, strategy="direct", tile_size=64, overlap=16
    )
    assert attempts(step) == [("direct", "oom"), ("tiled (ComfyUI retry)", "oom"), ("tiled", "ok")]
    direct, retry = step["details"]["attempts"][:2]
    assert direct["caught_by_comfyui"] is True and retry["duration_s"] is not None
    assert retry["error_type"] == "OutOfMemoryError" and "simulated" in retry["error_message"]
    assert any("retrying with tiled" in note for note in direct["notes"])
    assert "comfy_internal_tiled_retry" in codes(step, "warning")
    assert step["summary"]["n_out_of_memory"] == 2
    monkeypatch.undo()
    with torch.inference_mode():
        expected = core_encode_tiled(comfy, tiny.vae, pixels, tile_size=64, overlap=16)
    assert torch.equal(latent_of(output), expected)


class OomOnce(OomAbove):
    """Runs out of memory on the first call only, as a direct encode under a cap that tiles fit."""

    def __call__(self, x, *args, **kwargs):
        if not self.calls:
            self.calls.append(tuple(x.shape))
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 14.00 GiB (simulated)")
        return super().__call__(x, *args, **kwargs)


@pytest.mark.parametrize("log_level", [logging.INFO, logging.CRITICAL])
def test_an_out_of_memory_comfyui_caught_and_tiled_is_counted(
    comfy, tiny, pack_runtime, monkeypatch, log_level
):
    """ComfyUI's own VAE.encode catches the OOM and returns a tiled latent: the step counts the out
    of memory, names the retry as the strategy used, and Prometheus counts it. With warnings hidden
    by the log level the tiler call alone shows it."""
    from comfy.sd import VAE

    assert any(hasattr(VAE, name) for name in COMFY_RETRY_TILERS)  # the seam exists
    monkeypatch.setattr(tiny.vae.first_stage_model, "encode", OomOnce(tiny.vae, 10**9))
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", log_level)
    pixels = noise_image(1, 128, 128, seed=9)
    output, step = run_node(comfy, pack_runtime, pixels=pixels, vae=tiny.vae, strategy="direct")
    assert attempts(step) == [("direct", "oom"), ("tiled (ComfyUI retry)", "ok")]
    summary = step["summary"]
    assert summary["strategy_used"] == "tiled (ComfyUI retry)" and summary["n_out_of_memory"] == 1
    assert "estimate_pessimistic" not in codes(step)
    assert latent_of(output).shape == (1, 4, 16, 16)
    assert not any(name in vars(tiny.vae) for name in COMFY_RETRY_TILERS)  # the VAE is left as it was


def test_every_strategy_out_of_memory_fails_as_an_oom_or_gives_flagged_zeros(
    comfy, tiny, pack_runtime, monkeypatch
):
    import comfy.model_management as mm

    monkeypatch.setattr(tiny.vae.first_stage_model, "encode", OomAbove(tiny.vae, 0))
    pixels = noise_image(2, 64, 64, seed=8)
    error, step = run_node(comfy, pack_runtime, pixels=pixels, vae=tiny.vae, strategy="direct")
    # A CUDA OutOfMemoryError, so ComfyUI's executor treats it as any OOM (unloads models, tips).
    assert isinstance(error, mm.OOM_EXCEPTION) and isinstance(error, torch.cuda.OutOfMemoryError)
    assert "every strategy" in str(error) and "allow_dummy" in str(error)
    # The VAE runs on the CPU, so the cpu strategy would only repeat direct.
    assert attempts(step) == [
        ("direct", "oom"),
        ("tiled (ComfyUI retry)", "oom"),  # ComfyUI caught the first and retried tiled: ran out too
        ("tiled", "oom"),
        ("cpu", "skipped"),
        ("dummy", "skipped"),
    ]
    error, step = run_node(comfy, pack_runtime, pixels=pixels, vae=tiny.vae, strategy="cpu")
    assert isinstance(error, torch.cuda.OutOfMemoryError)
    assert attempts(step) == [("cpu", "oom"), ("dummy", "skipped")]
    output, step = run_node(
        comfy, pack_runtime, pixels=pixels, vae=tiny.vae, strategy="direct", allow_dummy=True
    )
    latent = latent_of(output)
    assert latent.shape == (2, 4, 8, 8) and not latent.any()
    assert step["summary"]["dummy_used"] is True and "dummy_latent" in codes(step, "error")
    assert "the output latent is all ZEROS" in output.ui["text"][0]


def test_a_non_oom_error_stops_the_chain_with_a_clear_error(comfy, tiny, pack_runtime, monkeypatch):
    def broken(x, *args, **kwargs):
        raise RuntimeError("weights are corrupt (simulated)")

    monkeypatch.setattr(tiny.vae.first_stage_model, "encode", broken)
    error, step = run_node(comfy, pack_runtime, pixels=noise_image(), vae=tiny.vae)
    assert type(error).__name__ == "VAEEncodeError"
    assert "direct" in str(error) and "weights are corrupt" in str(error)
    assert attempts(step) == [("direct", "error")]


def test_interrupt_passes_through_unchanged(comfy, tiny, pack_runtime, monkeypatch):
    import comfy.model_management as mm

    def interrupted(x, *args, **kwargs):
        raise mm.InterruptProcessingException()

    monkeypatch.setattr(tiny.vae.first_stage_model, "encode", interrupted)
    error, _ = run_node(comfy, pack_runtime, pixels=noise_image(), vae=tiny.vae)
    assert isinstance(error, mm.InterruptProcessingException)


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "pixels, code",
    [
        (torch.rand(0, 64, 64, 3), "empty_batch"),
        (torch.rand(1, 1, 1, 3), "image_too_small"),
        (torch.rand(1, 64, 64, 1), "wrong_channels"),
        (torch.rand(64, 64, 3), "bad_image_shape"),
    ],
)
def test_bad_pixels_are_a_clear_input_error(comfy, tiny, pack_runtime, pixels, code):
    error, step = run_node(comfy, pack_runtime, pixels=pixels, vae=tiny.vae)
    assert type(error).__name__ == "VAEEncodeInputError" and isinstance(error, ValueError)
    assert codes(step, "error") == [code]
    assert str(error).startswith("PipelineMonitorVAEEncode: ")
    assert step["details"]["attempts"] == []


def test_vae_none_is_a_clear_input_error(comfy, pack_runtime):
    error, step = run_node(comfy, pack_runtime, pixels=noise_image(), vae=None)
    assert type(error).__name__ == "VAEEncodeInputError" and "No VAE received" in str(error)
    assert codes(step, "error") == ["no_vae"]


def test_one_channel_image_is_padded_by_wan_and_nan_pixels_are_an_error_finding(comfy, wan_vae, pack_runtime):
    output, step = run_node(comfy, pack_runtime, pixels=noise_image(5, 64, 64, channels=1), vae=wan_vae)
    assert latent_of(output).shape == (1, 16, 2, 8, 8)
    assert "channels_padded" in codes(step, "warning")
    pixels = noise_image(1, 64, 64, seed=9)
    pixels[0, 0, 0, 0] = float("nan")
    output, step = run_node(comfy, pack_runtime, pixels=pixels, vae=wan_vae)
    assert latent_of(output).shape == (1, 16, 1, 8, 8)
    assert {"nan_pixels", "nan_latent"} <= set(codes(step, "error"))


def test_tiled_works_outside_inference_mode_and_a_too_large_overlap_is_reduced(comfy, tiny, pack_runtime):
    """Core VAEEncodeTiled fails on both: 'Inplace update to inference tensor outside InferenceMode'
    and ZeroDivisionError for tile_size 64 with overlap 64 (its half-size tiles)."""
    assert not torch.is_inference_mode_enabled()
    pixels = noise_image(1, 96, 96)
    output, step = run_node(comfy, pack_runtime, pixels=pixels, vae=tiny.vae, strategy="tiled", tile_size=64)
    assert step["summary"]["strategy_used"] == "tiled" and latent_of(output).shape == (1, 4, 12, 12)
    assert "overlap_reduced" in codes(step, "warning") and step["details"]["tiles"]["overlap"] == 16
    with torch.inference_mode():
        expected = core_encode_tiled(comfy, tiny.vae, pixels, tile_size=64, overlap=16)
    assert torch.equal(latent_of(output), expected)

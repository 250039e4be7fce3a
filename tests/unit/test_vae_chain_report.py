"""The `vae_encode` report step and the shape arithmetic behind predictions and dummy latents."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest
import torch

from monitors.probes.fake import GiB, fake_probes
from monitors.report import RunReport, to_jsonable
from monitors.vae.chain import run_chain
from monitors.vae.geometry import TileSettings, encode_input_shape, latent_shape, tile_input_shape
from monitors.vae.outcomes import ChainOptions, CpuEncoded
from monitors.vae.report import STEP_KIND, build_step
from monitors.vocabulary.headline import step_text
from tests.unit.test_vae_chain import CUDA_OOM, FakeMemory, FakeVAE, cpu_encode, options, pixels

MiB = 1024**2
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = json.load(open(os.path.join(REPO, "schemas", "run_report.schema.json")))


def step_for(vae, image, **kwargs):
    tiles = kwargs.pop("tiles", TileSettings())
    result = run_chain(vae, image, options(tiles=tiles, **kwargs))
    return result, build_step("5", result, vae_info={"class": "FakeVAE"})


def codes(step, level=None):
    return [f.code for f in step.findings if level is None or f.level == level]


def tensors_in(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    return []


# -- geometry -------------------------------------------------------------------------------------


def test_shapes_of_a_video_vae():
    vae = FakeVAE(video=True)
    assert encode_input_shape(vae, (9, 64, 72, 3)) == (1, 3, 9, 64, 72)
    assert latent_shape(vae, (9, 64, 72, 3)) == (1, 16, 3, 8, 9)
    assert latent_shape(vae, (1, 64, 64, 3)) == (1, 16, 1, 8, 8)
    # temporal_size 64 frames -> 16 latent frames -> 61 pixel frames; spatial tiles clipped.
    assert tile_input_shape(vae, (81, 1024, 64, 3), TileSettings(tile_size=256)) == (1, 3, 61, 256, 64)


def test_shapes_of_an_image_vae_crop_to_the_compression():
    vae = FakeVAE()
    assert encode_input_shape(vae, (2, 70, 66, 4)) == (2, 3, 64, 64)
    assert latent_shape(vae, (2, 70, 66, 4)) == (2, 4, 8, 8)
    assert tile_input_shape(vae, (2, 2048, 2048, 3), TileSettings(tile_size=512)) == (1, 3, 512, 512)
    assert encode_input_shape(vae, (64, 64, 3)) is None


def test_audio_like_vae_has_no_dummy_shape():
    vae = FakeVAE()
    vae.extra_1d_channel = 16
    assert latent_shape(vae, (1, 64, 64, 3)) is None


# -- the step -------------------------------------------------------------------------------------


def test_video_step_has_type_shape_compression_sizes_and_rates():
    result, step = step_for(FakeVAE(video=True), pixels(9, 64, 64))
    assert step.kind == STEP_KIND == "vae_encode" and step.node_id == "5"
    s = step.summary
    assert s["strategy_requested"] == "auto" and s["strategy_used"] == "direct"
    assert s["latent_type"] == "video" and s["latent_shape"] == [1, 16, 3, 8, 8]
    assert s["input_frames"] == 9 and s["latent_frames"] == 3
    assert s["spatial_compression_ratio"] == 64.0 and s["temporal_compression_ratio"] == 3.0
    assert s["latent_dtype"] == "float32" and s["latent_device"] == "cpu"
    assert s["latent_n_elements"] == 16 * 3 * 8 * 8 and s["latent_bytes"] == 4 * 16 * 3 * 8 * 8
    assert s["input_bytes"] == 9 * 64 * 64 * 3 * 4
    assert s["input_n_pixels"] == 9 * 64 * 64  # frames x height x width, no channels
    assert s["duration_s"] > 0
    assert s["frames_per_s"] == pytest.approx(9 / s["duration_s"])
    assert s["input_mib_per_s"] == pytest.approx(s["input_bytes"] / 1024**2 / s["duration_s"])
    assert s["direct_predicted_to_fit"] is True and s["direct_prediction_held"] is True
    assert step.details["latent"]["shape"] == [1, 16, 3, 8, 8]
    assert step.details["pixels"]["shape"] == [9, 64, 64, 3]
    assert step.details["tiles"] == {
        "tile_size": 512,
        "overlap": 64,
        "temporal_size": 64,
        "temporal_overlap": 8,
        "source": "inputs",
    }
    assert not tensors_in(step.summary) and not tensors_in(step.details), "steps hold plain data only"


def test_image_step_has_no_temporal_compression():
    _, step = step_for(FakeVAE(), pixels(2, 64, 32))
    s = step.summary
    assert s["latent_type"] == "image" and s["latent_shape"] == [2, 4, 8, 4]
    assert s["spatial_compression_ratio"] == 64.0 and s["temporal_compression_ratio"] is None
    assert s["latent_frames"] is None and s["frames_per_s"] > 0


def test_predicted_skip_gives_the_suggestion_with_both_figures():
    vae = FakeVAE(bytes_per_pixel=100_000)
    # Uncalibrated, auto skips direct only when even half the VAE's estimate would not fit.
    memory = FakeMemory(free=3 * GiB)
    _, step = step_for(vae, pixels(1, 256, 256), memory=memory, tiles=TileSettings(tile_size=64))
    message = [f.message for f in step.findings if f.code == "direct_predicted_too_large"][0]
    assert message == "direct would need 6.2 GiB, 3.0 GiB free: used tiled; lower tile_size to save more"
    assert step.summary["direct_needed_bytes"] == 100_000 * 256 * 256 + 100 * MiB
    assert step.summary["direct_free_bytes"] == 3 * GiB and step.summary["direct_predicted_to_fit"] is False
    assert step.summary["direct_prediction_held"] is None  # skipped: never tested
    assert step.summary["used_prediction_held"] is True
    assert step_text(step).splitlines()[0] == "strategy used: tiled"


def test_direct_oom_that_was_predicted_to_fit_suggests_tiled():
    vae = FakeVAE(fail={"direct": CUDA_OOM("CUDA out of memory")})
    _, step = step_for(vae, pixels(), memory=FakeMemory(reclaim=256 * MiB))
    assert "direct_out_of_memory" in codes(step, "warning")
    message = [f.message for f in step.findings if f.code == "direct_out_of_memory"][0]
    assert "said it fits" in message and "choose tiled" in message
    assert step.summary["n_out_of_memory"] == 1 and step.summary["n_attempts"] == 2
    assert step.summary["cleanup_reclaimed_bytes"] == 256 * MiB
    assert step.summary["direct_prediction_held"] is False
    assert step.details["attempts"][0]["cleanup_reclaimed_bytes"] == 256 * MiB


def test_cpu_fallback_is_a_warning():
    vae = FakeVAE(fail={"direct": CUDA_OOM("CUDA out of memory"), "tiled": CUDA_OOM("CUDA out of memory")})
    _, step = step_for(vae, pixels())
    assert step.summary["strategy_used"] == "cpu" and "cpu_fallback" in codes(step, "warning")


def test_dummy_is_an_error_level_finding_and_never_silent():
    fail = {s: CUDA_OOM("CUDA out of memory") for s in ("direct", "tiled", "cpu")}
    _, step = step_for(FakeVAE(fail=fail), pixels(), allow_dummy=True)
    assert step.summary["dummy_used"] is True and step.summary["strategy_used"] == "dummy"
    assert "dummy_latent" in codes(step, "error")
    dummy = [f.message for f in step.findings if f.code == "dummy_latent"][0]
    assert dummy in step_text(step).splitlines()
    assert "nan_latent" not in codes(step)


def test_every_strategy_out_of_memory_is_an_error_step_without_a_latent():
    fail = {s: CUDA_OOM("CUDA out of memory") for s in ("direct", "tiled", "cpu")}
    _, step = step_for(FakeVAE(fail=fail), pixels())
    assert step.summary["strategy_used"] is None and step.summary["latent_shape"] is None
    assert "out_of_memory" in codes(step, "error") and "allow_dummy" in step.summary["error"]
    assert step.summary["frames_per_s"] is None
    assert any(line.startswith("VAE encode ran out of memory") for line in step_text(step).splitlines())


def test_bad_input_step_carries_the_input_error_once():
    _, step = step_for(None, pixels())
    assert codes(step, "error") == ["no_vae"]
    assert step.summary["error"].startswith("No VAE received")


def test_nan_latent_and_tile_covering_the_image_are_reported():
    class NanVAE(FakeVAE):
        def _latent(self, pixels):
            latent = super()._latent(pixels)
            latent[0, 0, 0, 0] = float("nan")
            return latent

    _, step = step_for(NanVAE(), pixels(), strategy="tiled")
    assert "nan_latent" in codes(step, "error")
    assert "tile_covers_image" in codes(step, "info")


def test_memory_figures_peaks_times_changes_ratio_and_free_memory():
    probes = fake_probes("1 GPU")
    memory = FakeMemory(free=8 * GiB, reclaim=GiB)

    class AllocatingVAE(FakeVAE):
        def _run(self, strategy, pixels):
            probes.torch.allocate(0, 2 * GiB)  # reserved follows allocated upwards
            probes.torch.devices[0]["reserved_bytes"] = 8 * GiB
            probes.torch.devices[0]["peak_reserved_bytes"] = 8 * GiB
            probes.host.set_rss(probes.host.rss_bytes + 256 * MiB)
            memory.free["cuda:0"] -= GiB
            return super()._run(strategy, pixels)

    vae = AllocatingVAE(fail={"direct": CUDA_OOM("CUDA out of memory")})
    result = run_chain(
        vae,
        pixels(),
        ChainOptions(free_memory=memory.read, cleanup=memory.cleanup, cpu_encode=cpu_encode, probes=probes),
    )
    step = build_step("9", result)
    s = step.summary
    assert s["peak_gpu_allocated_bytes"] == 4 * GiB and s["peak_gpu_allocated_at_s"] >= 0
    assert s["peak_gpu_reserved_bytes"] == 8 * GiB
    assert s["gpu_allocated_reserved_ratio"] == pytest.approx(0.5)
    assert "allocator_fragmentation" in codes(step, "info")
    assert s["peak_rss_bytes"] == 512 * MiB + 512 * MiB and s["rss_peak_increase_bytes"] == 512 * MiB
    assert s["rss_change_bytes"] == 512 * MiB and s["rss_change_pct"] == pytest.approx(100.0)
    assert s["gpu_allocated_change_bytes"] == 4 * GiB and s["gpu_allocated_change_pct"] is None  # from 0
    # free: 8 GiB, -1 (direct), +1 (cleanup), -1 (tiled) -> 7 GiB
    assert s["free_memory_before_bytes"] == 8 * GiB and s["free_memory_after_bytes"] == 7 * GiB
    assert s["free_memory_change_bytes"] == -GiB and s["free_memory_change_pct"] == pytest.approx(-12.5)
    assert s["cleanup_reclaimed_bytes"] == GiB
    memory = step.details["memory"]  # the named set every step with a span carries
    assert memory["gpus"][0]["allocated_bytes"]["peak"] == 4 * GiB
    assert memory["gpus"][0]["allocated_bytes"]["change"] == 4 * GiB
    assert memory["process_rss_bytes"]["peak"] == 1024 * MiB
    assert memory["process_rss_bytes"]["peak_at_s"] >= 0
    assert memory["system_ram"]["available_bytes"]["low"] is not None
    attempts = step.details["attempts"]
    assert attempts[0]["peaks"]["gpu_allocated"]["value"] == 2 * GiB
    assert attempts[1]["peaks"]["gpu_allocated"]["value"] == 4 * GiB


def test_step_is_plain_json_within_the_run_report_schema():
    fail = {"direct": CUDA_OOM("CUDA out of memory")}
    _, step = step_for(FakeVAE(video=True, fail=fail), pixels(9, 64, 64))
    report = RunReport(
        prompt_id="p1", status="success", started_unix_s=1.0, finished_unix_s=2.0, duration_s=1.0
    )
    data = to_jsonable({**report.to_dict(), "steps": [step.to_dict()]})
    jsonschema.validate(data, SCHEMA)
    text = json.dumps(data, allow_nan=False)
    assert json.loads(text)["steps"][0]["summary"]["latent_shape"] == [1, 16, 3, 8, 8]


def test_a_cpu_encode_that_reloaded_and_detached_the_weights_says_so_in_its_row_and_findings():
    """Dynamic VRAM: the CPU rung reloads the VAE's weights from its file and takes the VAE off its
    GPU; the bare latent of other CPU encoders leaves those figures null."""

    def reloading_cpu_encode(vae, image):
        return CpuEncoded(cpu_encode(vae, image), "float32", weights_reload_s=1.25, weights_detached=True)

    fail = {"direct": CUDA_OOM("CUDA out of memory"), "tiled": CUDA_OOM("CUDA out of memory")}
    result, step = step_for(FakeVAE(fail=fail), pixels(), cpu_encode=reloading_cpu_encode)
    assert result.strategy_used == "cpu" and torch.is_tensor(result.samples)
    cpu = step.details["attempts"][-1]
    assert (cpu["compute_dtype"], cpu["weights_reload_s"], cpu["weights_detached"]) == ("float32", 1.25, True)
    assert step.details["attempts"][0]["weights_reload_s"] is None
    messages = {f.code: f.message for f in step.findings}
    assert messages["cpu_weights_reloaded"] == (
        "The CPU encode reloaded the VAE's weights from its file (1.25 s): under dynamic VRAM ComfyUI "
        "keeps no CPU copy of them to encode with."
    )
    assert "next GPU encode loads the weights again" in messages["dynamic_vram_weights_detached"]
    _, plain = step_for(FakeVAE(fail=fail), pixels())
    assert plain.details["attempts"][-1]["compute_dtype"] is None
    assert not {"cpu_weights_reloaded", "dynamic_vram_weights_detached"} & set(codes(plain))

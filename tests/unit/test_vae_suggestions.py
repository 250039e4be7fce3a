"""The findings of a VAE chain run (monitors/vae/suggestions.py) from hand-made results: each
finding's level, code and exact text, and the bounds that decide whether it is given."""

from __future__ import annotations

import pytest

from monitors.vae.comfy_retry import RETRY_STRATEGY
from monitors.vae.geometry import Prediction
from monitors.vae.outcomes import ERROR, OK, OOM, SKIPPED, Attempt, ChainResult
from monitors.vae.suggestions import (
    FRAGMENTATION_MIN_RESERVED_BYTES,
    suggestions,
)
from monitors.vae.tiles import TileSettings

GiB = 1024**3


def prediction(fits, needed=3 * GiB, free=2 * GiB, source=None, strategy="direct"):
    return Prediction(strategy, "cuda:0", needed, 0, needed, free, fits, calibration_source=source)


def result(*attempts, used=None, requested="auto", direct=None, **fields):
    r = ChainResult(requested=requested, strategy_used=used, attempts=list(attempts), **fields)
    if direct is not None:
        r.predictions["direct"] = direct
    return r


def found(r, latent=None, figures=None, tiles=None):
    return [
        (f.level, f.code, f.message) for f in suggestions(r, tiles or TileSettings(), latent, figures or {})
    ]


def codes(r, **kwargs):
    return [code for _, code, _ in found(r, **kwargs)]


def test_a_results_attempt_is_its_first_attempt_of_that_strategy():
    first, second = Attempt("direct", OOM), Attempt("direct", OK)
    assert result(Attempt("tiled", OK), first, second).attempt("direct") is first
    assert result(first).attempt("cpu") is None


def test_a_plain_success_has_no_findings():
    assert found(result(Attempt("direct", OK, duration_s=1.0), used="direct")) == []


def test_a_dummy_latent_is_an_error_and_its_nan_count_is_not_reported():
    r = result(Attempt("dummy", OK), used="dummy")
    latent = {"n_nan": 0, "n_inf": 3}
    assert codes(r, latent=latent) == ["dummy_latent"]
    ((level, _, message),) = found(r)
    assert level == "error" and "all ZEROS" in message


def test_the_chains_error_is_a_finding_unless_the_input_was_bad():
    r = result(Attempt("direct", ERROR), error="VAE encode (direct) failed", error_kind="error")
    assert found(r) == [("error", "error", "VAE encode (direct) failed")]
    assert found(result(error="bad pixels", error_kind="bad_input")) == []


def test_direct_predicted_too_large_names_both_figures_and_the_calibration():
    direct = prediction(False, source="calibrated from 2 earlier encodes")
    r = result(Attempt("direct", SKIPPED), Attempt("tiled", OK), used="tiled", direct=direct)
    assert found(r) == [
        (
            "info",
            "direct_predicted_too_large",
            "direct would need 3.0 GiB, 2.0 GiB free: used tiled; lower tile_size to save more "
            "(calibrated from 2 earlier encodes)",
        )
    ]
    r = result(Attempt("direct", SKIPPED), Attempt("cpu", OK), used="cpu", direct=prediction(False))
    assert (
        "info",
        "direct_predicted_too_large",
        "direct would need 3.0 GiB, 2.0 GiB free: used cpu",
    ) in found(r)


@pytest.mark.parametrize(
    "direct_attempt, fits, used",
    [
        (Attempt("direct", OOM, duration_s=1.0), False, "tiled"),  # ran, did not skip
        (Attempt("direct", SKIPPED), None, "tiled"),  # no prediction said so
        (Attempt("direct", SKIPPED), True, "tiled"),
        (Attempt("direct", SKIPPED), False, None),  # nothing was used
    ],
)
def test_no_predicted_too_large_finding_otherwise(direct_attempt, fits, used):
    r = result(direct_attempt, used=used, direct=prediction(fits))
    assert "direct_predicted_too_large" not in codes(r)


def test_direct_out_of_memory_that_was_predicted_to_fit_says_choose_tiled():
    r = result(
        Attempt("direct", OOM, duration_s=1.234), Attempt("tiled", OK), used="tiled", direct=prediction(True)
    )
    assert found(r) == [
        (
            "warning",
            "direct_out_of_memory",
            "direct ran out of memory after 1.23 s; the VAE's estimate (3.0 GiB of 2.0 GiB free) said it "
            "fits, so for inputs this size choose tiled.",
        )
    ]


def test_direct_out_of_memory_when_asked_for_points_to_auto():
    r = result(Attempt("direct", OOM, duration_s=2.0), Attempt("tiled", OK), used="tiled", requested="direct")
    ((_, code, message),) = found(r)
    assert code == "direct_out_of_memory"
    assert message == (
        "direct ran out of memory after 2.00 s; strategy auto skips direct when the VAE's estimate, "
        "calibrated by earlier encodes, says it cannot fit."
    )
    r = result(
        Attempt("direct", OOM, duration_s=2.0), Attempt("tiled", OK), used="tiled", direct=prediction(None)
    )
    assert found(r) == [("warning", "direct_out_of_memory", "direct ran out of memory after 2.00 s.")]


def test_direct_caught_by_comfyui_is_one_finding_of_its_own():
    caught = Attempt("direct", OOM, duration_s=3.0, caught_by_comfyui=True)
    r = result(caught, Attempt(RETRY_STRATEGY, OK), used=RETRY_STRATEGY, direct=prediction(True))
    assert found(r) == [
        (
            "warning",
            "comfy_internal_tiled_retry",
            "direct ran out of memory inside ComfyUI's encode, which caught it and retried tiled by itself "
            "(3.00 s in all); the VAE's estimate (3.0 GiB of 2.0 GiB free) said it fits; strategy tiled "
            "goes there at once.",
        )
    ]
    r = result(caught, Attempt(RETRY_STRATEGY, OK), used=RETRY_STRATEGY, direct=prediction(False))
    ((_, _, message),) = found(r)
    assert "said it fits" not in message and message.endswith(
        "(3.00 s in all); strategy tiled goes there at once."
    )


def test_cpu_after_the_gpu_ran_out_is_a_warning_that_says_so():
    for gpu in ("direct", "tiled", RETRY_STRATEGY):
        r = result(Attempt(gpu, OOM, duration_s=1.0, caught_by_comfyui=True), Attempt("cpu", OK), used="cpu")
        assert (
            "warning",
            "cpu_fallback",
            "Encoded on the CPU after the GPU strategies ran out of memory (slow): lower tile_size "
            "or temporal_size, or free GPU memory.",
        ) in found(r)


def test_cpu_without_running_out_says_why_each_gpu_strategy_did_not_run():
    r = result(
        Attempt("direct", SKIPPED, reason="predicted not to fit"),
        Attempt("tiled", ERROR, error_message="boom"),
        Attempt("cpu", OK),
        used="cpu",
    )
    assert found(r) == [
        (
            "warning",
            "cpu_fallback",
            "Encoded on the CPU (slow): direct skipped: predicted not to fit; tiled error: boom.",
        )
    ]
    r = result(Attempt("cpu", OK), used="cpu")
    assert found(r) == [("warning", "cpu_fallback", "Encoded on the CPU (slow): no GPU strategy ran.")]
    assert found(result(Attempt("cpu", OK), used="cpu", requested="cpu")) == []


def test_a_tile_as_large_as_the_image_is_noted_when_tiled_ran():
    pixels = {"shape": [1, 300, 400, 3]}
    r = result(Attempt("tiled", OK), used="tiled", pixels_info=pixels)
    assert found(r, tiles=TileSettings(tile_size=400)) == [
        (
            "info",
            "tile_covers_image",
            "tile_size 400 covers the whole 400x300 image: tiled needs about as much memory as direct; "
            "lower tile_size.",
        )
    ]
    assert codes(r, tiles=TileSettings(tile_size=399)) == []
    tall = result(Attempt("tiled", OOM, duration_s=1.0), pixels_info={"shape": [1, 500, 100, 3]})
    assert "tile_covers_image" in codes(tall, tiles=TileSettings(tile_size=500))
    assert "tile_covers_image" not in codes(tall, tiles=TileSettings(tile_size=499))
    skipped = result(Attempt("tiled", SKIPPED), pixels_info=pixels)
    assert codes(skipped, tiles=TileSettings(tile_size=512)) == []
    video = result(Attempt("tiled", OK), used="tiled", pixels_info={"shape": [1, 2, 300, 400, 3]})
    assert codes(video, tiles=TileSettings(tile_size=512)) == []
    assert codes(result(Attempt("tiled", OK), used="tiled"), tiles=TileSettings(tile_size=512)) == []


def test_direct_that_fit_against_its_estimate_is_a_cautious_estimate():
    direct = Attempt("direct", OK, prediction=prediction(False))
    assert found(result(direct, used="direct")) == [
        (
            "info",
            "estimate_pessimistic",
            "direct fit although the VAE's estimate (3.0 GiB) exceeded the 2.0 GiB free: the estimate is cautious.",
        )
    ]
    assert codes(result(Attempt("direct", OK, prediction=prediction(None)), used="direct")) == []
    assert codes(result(Attempt("direct", OK, prediction=prediction(True)), used="direct")) == []
    assert codes(result(Attempt("direct", OK), used="direct")) == []


def test_nan_or_inf_in_the_latent_is_an_error_with_both_counts():
    r = result(Attempt("direct", OK), used="direct")
    assert found(r, latent={"n_nan": 2, "n_inf": 0}) == [
        ("error", "nan_latent", "The latent holds 2 NaN and 0 Inf values.")
    ]
    assert codes(r, latent={"n_nan": 0, "n_inf": 1}) == ["nan_latent"]
    assert codes(r, latent={"n_nan": 0, "n_inf": 0}) == []


def test_fragmentation_below_the_ratio_with_enough_reserved():
    r = result(Attempt("direct", OK), used="direct")
    enough = FRAGMENTATION_MIN_RESERVED_BYTES
    assert enough == 512 * 1024**2
    assert found(r, figures={"gpu_allocated_reserved_ratio": 0.5, "peak_gpu_reserved_bytes": enough}) == [
        (
            "info",
            "allocator_fragmentation",
            "At peak only 50% of reserved GPU memory was allocated: "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True can reduce the waste.",
        )
    ]
    ((_, _, message),) = found(
        r, figures={"gpu_allocated_reserved_ratio": 0.59, "peak_gpu_reserved_bytes": enough}
    )
    assert message.startswith("At peak only 59% of reserved GPU memory was allocated")
    assert codes(r, figures={"gpu_allocated_reserved_ratio": 0.6, "peak_gpu_reserved_bytes": enough}) == []
    assert (
        codes(r, figures={"gpu_allocated_reserved_ratio": 0.59, "peak_gpu_reserved_bytes": enough - 1}) == []
    )
    assert codes(r, figures={"gpu_allocated_reserved_ratio": 0.59, "peak_gpu_reserved_bytes": None}) == []
    assert codes(r, figures={"peak_gpu_reserved_bytes": enough}) == []

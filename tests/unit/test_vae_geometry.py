"""monitors/vae/geometry.py with known values: compression ratios read from a VAE's attributes, the
shape `vae.encode` hands to the model, tiles, latent shapes, weights to load, the prediction, and
each input check at its boundary (scripts/mutate.py survivors of the first tests)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from monitors.vae import geometry as g


def _wan_down(frames):
    return max(0, math.floor((frames + 3) / 4))


def _wan_up(frames):
    return max(0, frames * 4 - 3)


class VAE:
    """Only the attributes a test gives, as ComfyUI's VAE spells them."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)

    def encode(self, pixels):  # check_input only asks whether it is callable
        raise AssertionError("never called")


def wan(**more):
    """WAN 2.1's VAE: 8x spatial, 4x temporal (1 + 4k frames), video, 16 latent channels."""
    attributes = {
        "downscale_ratio": (_wan_down, 8, 8),
        "upscale_ratio": (_wan_up, 8, 8),
        "latent_dim": 3,
        "latent_channels": 16,
        "output_channels": 3,
    }
    return VAE(**{**attributes, **more})


def sd(**more):
    return VAE(**{"downscale_ratio": 8, "latent_channels": 4, "latent_dim": 2, "output_channels": 3, **more})


# -- ratios and frames -----------------------------------------------------------------------------


def test_spatial_ratio_sources_in_order():
    assert g.spatial_ratio(VAE(spacial_compression_encode=lambda: 16, downscale_ratio=8)) == 16

    def broken():
        raise RuntimeError("no")

    assert g.spatial_ratio(VAE(spacial_compression_encode=broken, downscale_ratio=8)) == 8
    assert g.spatial_ratio(wan()) == 8
    assert g.spatial_ratio(VAE(downscale_ratio=1)) == 1
    assert g.spatial_ratio(VAE(downscale_ratio=0)) is None
    assert g.spatial_ratio(VAE(downscale_ratio=-8)) is None
    assert g.spatial_ratio(VAE(downscale_ratio="8")) is None
    assert g.spatial_ratio(VAE()) is None


def test_frames_of_a_wan_vae_and_of_vaes_without_temporal_ratios():
    assert [g.latent_frames(wan(), f) for f in (1, 5, 9, 10)] == [1, 2, 3, 3]
    assert [g.used_frames(wan(), f) for f in (1, 8, 9, 10)] == [1, 5, 9, 9]
    assert g.latent_frames(VAE(downscale_ratio=(8, 8)), 9) is None  # a ratio, not a function
    assert g.latent_frames(VAE(downscale_ratio=8), 9) is None
    assert g.used_frames(wan(upscale_ratio=8), 9) is None
    assert g.used_frames(wan(downscale_ratio=8), 9) is None


def test_is_video_vae():
    assert g.is_video_vae(wan()) is True
    assert g.is_video_vae(wan(not_video=True)) is False
    assert g.is_video_vae(VAE()) is False
    assert g.is_video_vae(sd()) is False


# -- shapes ----------------------------------------------------------------------------------------


def test_encode_input_shape_crops_and_fits_channels():
    assert g.encode_input_shape(sd(), (2, 70, 101, 3)) == (2, 3, 64, 96)
    assert g.encode_input_shape(sd(crop_input=False), (2, 70, 101, 3)) == (2, 3, 70, 101)
    assert g.encode_input_shape(VAE(), (1, 33, 35, 3)) == (1, 3, 33, 35)  # no ratio, no crop, rank 4
    assert g.encode_input_shape(sd(), (1, 64, 64, 4)) == (1, 3, 64, 64)  # extra channels dropped
    assert g.encode_input_shape(sd(), (1, 64, 64, 1)) == (1, 1, 64, 64)  # no pad value: left as is
    assert g.encode_input_shape(sd(pad_channel_value=0.5), (1, 64, 64, 1)) == (1, 3, 64, 64)
    assert g.encode_input_shape(sd(), (64, 64, 3)) is None


def test_encode_input_shape_of_video_and_single_frame_3d_vaes():
    assert g.encode_input_shape(wan(), (9, 64, 48, 3)) == (1, 3, 9, 64, 48)
    assert g.encode_input_shape(wan(not_video=True), (9, 64, 48, 3)) == (9, 3, 1, 64, 48)


def test_tile_input_shape_takes_the_largest_of_the_three_passes():
    tiles = g.TileSettings(tile_size=512)
    # wide: (1024, 256) covers the most; tall: (256, 1024); small: the whole image
    assert g.tile_input_shape(sd(crop_input=False), (1, 300, 2000, 3), tiles) == (1, 3, 256, 1024)
    assert g.tile_input_shape(sd(crop_input=False), (1, 2000, 300, 3), tiles) == (1, 3, 1024, 256)
    assert g.tile_input_shape(sd(crop_input=False), (1, 400, 400, 3), tiles) == (1, 3, 400, 400)
    assert g.tile_input_shape(sd(), (1, 64, 64, 3, 1), tiles) is None


def test_tile_input_shape_of_video_rounds_time_to_the_vae_rule():
    tiles = g.TileSettings(tile_size=256, temporal_size=4)  # down(4) = 1, at least 2 latent frames: 5
    assert g.tile_input_shape(wan(), (20, 512, 512, 3), tiles) == (1, 3, 5, 256, 256)
    tiles = g.TileSettings(tile_size=256, temporal_size=16)  # down(16) = 4 -> 13 frames
    assert g.tile_input_shape(wan(), (20, 512, 128, 3), tiles) == (1, 3, 13, 256, 128)
    no_up = wan()
    del no_up.upscale_ratio
    assert g.tile_input_shape(no_up, (20, 512, 512, 3), tiles) == (1, 3, 16, 256, 256)


def test_latent_shapes():
    assert g.latent_shape(sd(), (2, 64, 96, 3)) == (2, 4, 8, 12)
    assert g.latent_shape(wan(), (10, 64, 96, 3)) == (1, 16, 3, 8, 12)
    assert g.latent_shape(wan(not_video=True), (10, 64, 96, 3)) == (10, 16, 1, 8, 12)
    assert g.latent_shape(VAE(downscale_ratio=8, output_channels=3), (1, 64, 64, 3)) is None  # no channels
    assert g.latent_shape(VAE(latent_channels=4), (1, 64, 64, 3)) is None  # no ratio
    assert g.latent_shape(sd(), (64, 64, 3)) is None
    assert g.latent_shape(sd(extra_1d_channel=1), (1, 64, 64, 3)) is None


def test_dummy_latent_on_the_vae_output_device():
    pixels = torch.zeros(1, 64, 96, 3)
    dummy = g.dummy_latent(sd(output_device=torch.device("meta")), pixels)
    assert dummy.device.type == "meta" and tuple(dummy.shape) == (1, 4, 8, 12)
    assert g.dummy_latent(sd(), pixels).device.type == "cpu"


def test_settings_and_results_are_frozen():
    prediction = g.predict(sd(), (1, 64, 64, 3), "direct", g.TileSettings(), lambda device: None)
    check = g.check_input(sd(), torch.zeros(1, 8, 8, 3))
    for value, field in ((g.TileSettings(), "overlap"), (prediction, "fits"), (check, "fatal")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, field, None)


# -- tiles -----------------------------------------------------------------------------------------


def test_overlap_must_stay_below_half_a_tile_for_image_vaes_and_below_a_tile_for_video():
    tiles = g.TileSettings(tile_size=512, overlap=255)
    assert g.usable_tiles(sd(), tiles) == (tiles, ())
    for vae in (sd(), VAE()):  # latent_dim 2 is the default
        reduced, (finding,) = g.usable_tiles(vae, g.TileSettings(tile_size=512, overlap=256))
        assert reduced.overlap == 128 and finding.code == "overlap_reduced"
        assert (
            finding.message
            == "overlap 256 is too large for tile_size 512 (must stay below 256): tiled uses overlap 128."
        )
    tiles = g.TileSettings(tile_size=512, overlap=511)
    assert g.usable_tiles(wan(), tiles) == (tiles, ())
    reduced, (finding,) = g.usable_tiles(wan(), g.TileSettings(tile_size=512, overlap=512))
    assert reduced.overlap == 128 and "must stay below 512" in finding.message


# -- weights to load and the prediction ------------------------------------------------------------


class Patcher:
    def __init__(self, loaded):
        self.loaded = loaded

    def loaded_size(self):
        return self.loaded


def _predict(vae, strategy="direct", free=10_000):
    return g.predict(vae, (1, 64, 64, 3), strategy, g.TileSettings(), lambda device: free)


def test_weights_to_load():
    gpu = dict(device="cuda:0", model_size=lambda: 1000)
    assert _predict(sd(device="cpu", model_size=lambda: 1000)).weights_to_load_bytes == 0
    assert _predict(sd(**gpu), "cpu").weights_to_load_bytes == 1000  # a GPU VAE's weights all come over
    assert _predict(sd(**gpu)).weights_to_load_bytes == 1000  # no patcher: nothing loaded yet
    assert _predict(sd(**gpu, patcher=Patcher(300))).weights_to_load_bytes == 700
    assert _predict(sd(**gpu, patcher=Patcher(None))).weights_to_load_bytes == 1000
    assert _predict(sd(**gpu, patcher=Patcher(1000))).weights_to_load_bytes == 0
    assert _predict(sd(**gpu, patcher=Patcher(1500))).weights_to_load_bytes == 0
    assert _predict(sd(**gpu, patcher=object())).weights_to_load_bytes == 1000
    no_size = _predict(sd(device="cuda:0"))
    assert (no_size.weights_to_load_bytes, no_size.weights_to_load_bytes_unknown_reason) == (
        None,
        "the VAE has no model_size",
    )
    no_device = _predict(sd(model_size=lambda: 1000), "cpu")
    assert (no_device.weights_to_load_bytes, no_device.weights_to_load_bytes_unknown_reason) == (
        None,
        "the VAE has no device",
    )


def test_prediction_adds_weights_to_the_estimate_and_fits_at_equality():
    vae = sd(
        device="cuda:0", model_size=lambda: 1000, patcher=Patcher(300), memory_used_encode=lambda s, d: 500
    )
    assert _predict(vae, free=1200).needed_bytes == 1200
    assert _predict(vae, free=1200).fits is True
    assert _predict(vae, free=1199).fits is False
    unknown_weights = sd(device="cuda:0", memory_used_encode=lambda s, d: 500)  # no model_size
    assert _predict(unknown_weights, free=500).needed_bytes == 500
    no_reading = _predict(vae, free=None)
    assert (no_reading.fits, no_reading.free_bytes_unknown_reason) == (
        None,
        "no free-memory reading for cuda:0",
    )
    no_estimate = _predict(sd(device="cuda:0"), free=100)
    assert (no_estimate.needed_bytes, no_estimate.fits) == (None, None)


# -- input checks ----------------------------------------------------------------------------------


def _codes(check):
    return [f.code for f in check.findings]


@pytest.mark.parametrize(
    ("vae", "pixels", "code"),
    [
        (None, torch.zeros(1, 8, 8, 3), "no_vae"),
        (object(), torch.zeros(1, 8, 8, 3), "not_a_vae"),
        (sd(first_stage_model=None), torch.zeros(1, 8, 8, 3), "invalid_vae"),
        (sd(), None, "no_pixels"),
        (sd(), object(), "no_pixels"),
        (sd(), torch.zeros(8, 8, 3), "bad_image_shape"),
        (sd(), torch.zeros(0, 8, 8, 3), "empty_batch"),
        (sd(), torch.zeros(1, 7, 8, 3), "image_too_small"),
        (sd(), torch.zeros(1, 8, 7, 3), "image_too_small"),
        (sd(), torch.zeros(1, 8, 8, 1), "wrong_channels"),
    ],
)
def test_fatal_input_checks(vae, pixels, code):
    check = g.check_input(vae, pixels)
    assert check.fatal is not None and _codes(check) == [code]


def test_inputs_at_the_boundaries_pass():
    assert g.check_input(sd(first_stage_model=object()), torch.zeros(1, 8, 8, 3)).findings == ()
    assert g.check_input(VAE(), torch.zeros(1, 1, 1, 3)).findings == ()  # no ratio: 1 px is enough
    check = g.check_input(sd(), torch.zeros(1, 16, 16, 3))
    assert (check.fatal, check.findings) == (None, ())
    assert check.pixels["shape"] == [1, 16, 16, 3]


def test_channel_findings():
    [dropped] = g.check_input(sd(), torch.zeros(1, 8, 8, 4)).findings
    assert (dropped.code, dropped.message) == (
        "channels_dropped",
        "Image has 4 channels: only the first 3 are encoded.",
    )
    [padded] = g.check_input(sd(pad_channel_value=0), torch.zeros(1, 8, 8, 1)).findings
    assert (padded.code, padded.message) == (
        "channels_padded",
        "Image has 1 channel(s): the VAE pads it to 3.",
    )


def test_nan_or_inf_alone_is_an_error():
    for special in (float("nan"), float("inf")):
        pixels = torch.zeros(1, 8, 8, 3)
        pixels[0, 0, 0, 0] = special
        assert "nan_pixels" in _codes(g.check_input(sd(), pixels))


@pytest.mark.parametrize(
    ("low", "high", "flagged"),
    [
        (0.0, 1.0, False),
        (-1e-3, 1.0, False),
        (0.0, 1.0 + 1e-3, False),
        (-0.0011, 1.0, True),
        (0.0, 1.0011, True),
        (0.0, 0.5, False),
    ],
)
def test_pixel_range_tolerance_is_a_thousandth(low, high, flagged):
    pixels = torch.full((1, 8, 8, 3), 0.25, dtype=torch.float64)
    pixels[0, 0, 0, 0], pixels[0, 0, 0, 1] = low, high
    findings = g.check_input(sd(), pixels).findings
    assert ("pixels_out_of_range" in [f.code for f in findings]) is flagged
    if flagged:
        [finding] = findings
        assert finding.message == f"Pixel values span {low:.3g}..{high:.3g}; IMAGE is expected in 0..1."


@pytest.mark.parametrize(
    ("height", "width", "message"),
    [
        (16, 16, None),
        (16, 20, "20x16 is cropped to 16x16 (a multiple of 8)."),
        (20, 16, "16x20 is cropped to 16x16 (a multiple of 8)."),
        (30, 33, "33x30 is cropped to 32x24 (a multiple of 8)."),
    ],
)
def test_crop_finding(height, width, message):
    findings = g.check_input(sd(), torch.zeros(1, height, width, 3)).findings
    assert [f.message for f in findings if f.code == "cropped"] == ([message] if message else [])
    assert g.check_input(sd(crop_input=False), torch.zeros(1, height, width, 3)).findings == ()


def test_frames_dropped_names_the_vae_frame_rule():
    assert g.check_input(wan(), torch.zeros(9, 8, 8, 3)).findings == ()
    [finding] = g.check_input(wan(), torch.zeros(10, 8, 8, 3)).findings
    assert finding.message == (
        "Only the first 9 of 10 frames are encoded: this video VAE takes 1 + 4k frames."
    )
    no_up = wan()
    del no_up.upscale_ratio
    assert g.check_input(no_up, torch.zeros(10, 8, 8, 3)).findings == ()

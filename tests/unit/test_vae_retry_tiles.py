"""The tiled strategy with ComfyUI's own retry tiling (what VAE.encode falls back to after out of
memory): per VAE dimensionality, from the node's inputs (tile_size 0, temporal_size 0), in the
encode_tiled call and in the report."""

from __future__ import annotations

import pytest

from monitors.vae.chain import run_chain
from monitors.vae.geometry import (
    COMFY_RETRY_SOURCE,
    TileSettings,
    comfy_retry_tiles,
    tile_input_shape,
    tiles_from_inputs,
)
from tests.unit.test_vae_chain import FakeVAE, options, pixels


def test_video_vaes_retry_with_256_pixel_tiles_and_no_temporal_tiling():
    tiles = comfy_retry_tiles(FakeVAE(video=True))
    assert tiles == TileSettings(256, 64, None, None, source=COMFY_RETRY_SOURCE)
    assert tiles.encode_kwargs() == {"tile_x": 256, "tile_y": 256, "overlap": 64}


def test_image_vaes_retry_with_encode_tiled_defaults():
    vae = FakeVAE()
    assert comfy_retry_tiles(vae) == TileSettings(512, 64, None, None, source=COMFY_RETRY_SOURCE)
    del vae.latent_dim  # no dimensionality: an image VAE
    assert comfy_retry_tiles(vae).tile_size == 512


def test_node_inputs():
    video = FakeVAE(video=True)
    assert tiles_from_inputs(video, 0, 16, 0, 8) == comfy_retry_tiles(video)  # 0: ComfyUI's own, its overlap
    assert tiles_from_inputs(video, 0, 16, 32, 4) == TileSettings(256, 64, 32, 4, source=COMFY_RETRY_SOURCE)
    assert tiles_from_inputs(video, 128, 16, 0, 8) == TileSettings(128, 16, None, None)
    assert tiles_from_inputs(video, 512, 64, 64, 8) == TileSettings()  # the node's defaults, unchanged


def test_encode_kwargs_pass_temporal_tiling_only_when_set():
    assert TileSettings(64, 16, 32, None).encode_kwargs() == {
        "tile_x": 64,
        "tile_y": 64,
        "overlap": 16,
        "tile_t": 32,
    }
    assert TileSettings().encode_kwargs()["overlap_t"] == 8


def test_a_tile_without_temporal_tiling_holds_every_frame():
    video = FakeVAE(video=True)
    assert tile_input_shape(video, (9, 512, 512, 3), comfy_retry_tiles(video)) == (1, 3, 9, 256, 256)
    assert tile_input_shape(video, (9, 512, 512, 3), TileSettings(256, 64, 4, 4)) == (1, 3, 5, 256, 256)


@pytest.mark.parametrize("video", [False, True])
def test_chain_without_tiles_runs_comfyuis_retry_tiling_and_reports_it(video):
    vae = FakeVAE(video=video)
    result = run_chain(vae, pixels(1, 64, 64), options(strategy="tiled", tiles=None))
    size = 256 if video else 512
    assert result.strategy_used == "tiled"
    assert vae.tiled_kwargs == dict(tile_x=size, tile_y=size, overlap=64, tile_t=None, overlap_t=None)
    assert result.tiles == TileSettings(size, 64, None, None, source=COMFY_RETRY_SOURCE)


def test_a_vae_of_another_dimensionality_retries_with_the_image_tiles():
    audio = FakeVAE()
    audio.latent_dim = 1  # neither image (2) nor video (3): ComfyUI's encode_tiled default
    assert comfy_retry_tiles(audio).tile_size == 512


def test_only_zero_asks_for_comfyuis_own_tiling():
    video = FakeVAE(video=True)
    assert tiles_from_inputs(video, 1, 0, 1, 1) == TileSettings(1, 0, 1, 1)


def test_a_prediction_without_calibration_says_why():
    from monitors.vae.geometry import predict

    def free(device):
        return 10**9

    shape, tiles = (1, 64, 64, 3), TileSettings()
    given = predict(FakeVAE(), shape, "direct", tiles, free, calibration="calibration off for this node")
    assert given.calibration_unknown_reason == "calibration off for this node"
    assert (
        predict(FakeVAE(), shape, "direct", tiles, free).calibration_unknown_reason == "no calibration table"
    )

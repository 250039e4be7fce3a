"""Tile settings (monitors/vae/tiles.py): the overlap ComfyUI's tiler can run, exactly at its
bound, the node's inputs at and below zero, and what a VAE that tiles by itself is given."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from monitors.vae.tiles import TileSettings, comfy_retry_tiles, tiles_from_inputs, tiles_itself, usable_tiles


def image_vae(**extra):
    return SimpleNamespace(latent_dim=2, **extra)


def video_vae(**extra):
    return SimpleNamespace(latent_dim=3, **extra)


def test_an_image_vaes_overlap_must_stay_below_half_the_tile():
    tiles = TileSettings(tile_size=512, overlap=255)
    assert usable_tiles(image_vae(), tiles) == (tiles, ())
    reduced, (finding,) = usable_tiles(image_vae(), TileSettings(tile_size=512, overlap=256))
    assert reduced == TileSettings(tile_size=512, overlap=128)
    assert (finding.level, finding.code) == ("warning", "overlap_reduced")
    assert finding.message == (
        "overlap 256 is too large for tile_size 512 (must stay below 256): tiled uses overlap 128."
    )


def test_a_vae_without_dimensionality_is_tiled_as_an_image():
    reduced, _ = usable_tiles(SimpleNamespace(), TileSettings(tile_size=100, overlap=50))
    assert reduced.overlap == 25
    assert usable_tiles(SimpleNamespace(), TileSettings(tile_size=101, overlap=49))[1] == ()


def test_a_video_vaes_overlap_must_stay_below_the_tile():
    tiles = TileSettings(tile_size=256, overlap=255, temporal_size=16, temporal_overlap=4)
    assert usable_tiles(video_vae(), tiles) == (tiles, ())
    reduced, (finding,) = usable_tiles(video_vae(), TileSettings(tile_size=258, overlap=258))
    assert reduced.overlap == 64 and reduced.tile_size == 258
    assert "(must stay below 258): tiled uses overlap 64." in finding.message


def test_only_handles_tiling_true_means_the_vae_tiles_itself():
    assert tiles_itself(video_vae(handles_tiling=True)) is True
    assert tiles_itself(video_vae(handles_tiling=1)) is False
    assert tiles_itself(video_vae()) is False
    big = TileSettings(tile_size=64, overlap=64)
    assert usable_tiles(video_vae(handles_tiling=True), big) == (big, ())
    assert usable_tiles(video_vae(handles_tiling="yes"), big)[0].overlap == 16


@pytest.mark.parametrize("tile_size", [0, -1])
def test_a_tile_size_of_zero_or_below_is_comfyuis_own_retry_tiling(tile_size):
    assert tiles_from_inputs(video_vae(), tile_size, 8, 0, 4) == comfy_retry_tiles(video_vae())
    assert tiles_from_inputs(image_vae(), str(tile_size), 8, -3, 4).tile_size == 512


def test_a_temporal_size_below_one_tiles_no_frames_and_inputs_may_be_text():
    assert tiles_from_inputs(video_vae(), "96", "8", "-1", "2") == TileSettings(96, 8, None, None)
    assert tiles_from_inputs(video_vae(), "96", "8", "1", "2") == TileSettings(96, 8, 1, 2)


def test_encode_kwargs_without_any_temporal_tiling():
    assert TileSettings(64, 8, None, 4).encode_kwargs() == {"tile_x": 64, "tile_y": 64, "overlap": 8}
    assert TileSettings().encode_kwargs() == {
        "tile_x": 512,
        "tile_y": 512,
        "overlap": 64,
        "tile_t": 64,
        "overlap_t": 8,
    }

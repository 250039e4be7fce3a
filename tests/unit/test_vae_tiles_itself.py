"""VAEs whose model tiles by itself (`handles_tiling`, ComfyUI 0.33+): ComfyUI's tiled encode hands
them the whole input with the tile settings, so the chain's geometry predicts for the whole input
and leaves the tile settings to the model."""

from __future__ import annotations

from monitors.vae import geometry as g
from tests.unit.test_vae_geometry import wan


def test_a_vae_that_tiles_by_itself_gets_the_whole_input():
    tiles = g.TileSettings(tile_size=256, temporal_size=4)
    assert g.tiles_itself(wan(handles_tiling=True)) and not g.tiles_itself(wan())
    assert not g.tiles_itself(wan(handles_tiling="yes"))  # ComfyUI's flag is a bool
    assert g.tile_input_shape(wan(handles_tiling=True), (20, 512, 512, 3), tiles) == (1, 3, 20, 512, 512)
    assert g.tile_input_shape(wan(handles_tiling=False), (20, 512, 512, 3), tiles) == (1, 3, 5, 256, 256)


def test_its_prediction_for_tiled_is_the_estimate_of_the_whole_input():
    shapes = []

    def memory_used_encode(shape, dtype):
        shapes.append(tuple(shape))
        return 1000

    vae = wan(handles_tiling=True, memory_used_encode=memory_used_encode, device="cpu")
    prediction = g.predict(vae, (9, 64, 64, 3), "tiled", g.TileSettings(tile_size=32), lambda d: 10**9)
    assert shapes == [(1, 3, 9, 64, 64)] and prediction.estimate_bytes == 1000


def test_its_tile_settings_are_left_to_the_model():
    tiles = g.TileSettings(tile_size=256, overlap=256)
    assert g.usable_tiles(wan(handles_tiling=True), tiles) == (tiles, ())
    reduced, findings = g.usable_tiles(wan(), tiles)
    assert reduced.overlap == 64 and findings[0].code == "overlap_reduced"

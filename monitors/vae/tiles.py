"""Tile settings of a tiled VAE encode: ComfyUI's own retry tiling, the node's tile inputs, and the
settings ComfyUI's tiler can run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..report import Finding


def tiles_itself(vae) -> bool:
    """A VAE whose model tiles by itself (`handles_tiling`, ComfyUI 0.33+: SeedVR2 and other video
    VAEs): ComfyUI's tiled encode hands it the whole input with the tile settings, and its own
    retry after running out of memory does the same; ComfyUI's tilers are not used."""
    return getattr(vae, "handles_tiling", False) is True


@dataclass(frozen=True)
class TileSettings:
    """Pixel units, ComfyUI's VAEEncodeTiled defaults. temporal_size None: no temporal tiling
    (ComfyUI's own retry after out of memory); source says where the figures came from."""

    tile_size: int = 512
    overlap: int = 64
    temporal_size: int | None = 64
    temporal_overlap: int | None = 8
    source: str = "inputs"

    def encode_kwargs(self) -> dict:
        kwargs = {"tile_x": self.tile_size, "tile_y": self.tile_size, "overlap": self.overlap}
        if self.temporal_size is not None:
            kwargs["tile_t"] = self.temporal_size
            if self.temporal_overlap is not None:
                kwargs["overlap_t"] = self.temporal_overlap
        return kwargs


# What ComfyUI's VAE.encode retries with after running out of memory (comfy/sd.py): video VAEs
# (latent_dim 3, one-frame images included) 256-pixel tiles, overlap 64, all frames at once;
# image VAEs encode_tiled_'s defaults, 512-pixel tiles, overlap 64 (three passes, averaged).
COMFY_RETRY_TILE_SIZE = {3: 256, 2: 512}
COMFY_RETRY_OVERLAP = 64
COMFY_RETRY_SOURCE = "comfyui_retry"


def comfy_retry_tiles(vae) -> TileSettings:
    """The tiling ComfyUI's own encode falls back to for this VAE's dimensionality."""
    size = COMFY_RETRY_TILE_SIZE.get(getattr(vae, "latent_dim", 2), COMFY_RETRY_TILE_SIZE[2])
    return TileSettings(size, COMFY_RETRY_OVERLAP, None, None, source=COMFY_RETRY_SOURCE)


def tiles_from_inputs(
    vae, tile_size: int, overlap: int, temporal_size: int, temporal_overlap: int
) -> TileSettings:
    """The node's tile inputs: tile_size 0 takes ComfyUI's own retry tiling for this VAE (spatial
    tile and overlap); temporal_size 0 tiles no frames (all at once, as that retry does)."""
    if int(tile_size) <= 0:
        base = comfy_retry_tiles(vae)
    else:
        base = TileSettings(int(tile_size), int(overlap), None, None)
    if int(temporal_size) <= 0:
        return base
    return dataclasses.replace(base, temporal_size=int(temporal_size), temporal_overlap=int(temporal_overlap))


def usable_tiles(vae, tiles: TileSettings) -> tuple[TileSettings, tuple[Finding, ...]]:
    """Tile settings ComfyUI's tiler can run: its steps divide by (tile - overlap), and image VAEs
    also tile with half-size tiles, so a too-large overlap fails with ZeroDivisionError there. A VAE
    that tiles by itself gets the settings as they are (its model applies them, not that tiler)."""
    if tiles_itself(vae):
        return tiles, ()
    limit = tiles.tile_size // 2 if getattr(vae, "latent_dim", 2) == 2 else tiles.tile_size
    if tiles.overlap < limit:
        return tiles, ()
    overlap = tiles.tile_size // 4
    message = (
        f"overlap {tiles.overlap} is too large for tile_size {tiles.tile_size} "
        f"(must stay below {limit}): tiled uses overlap {overlap}."
    )
    return dataclasses.replace(tiles, overlap=overlap), (Finding("warning", message, "overlap_reduced"),)

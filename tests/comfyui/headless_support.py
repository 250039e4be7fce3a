"""A headless ComfyUI server on a machine without ComfyUI's frontend package or without PyAV (the
lent GPU machine has neither): `--front-end-root` at a folder holding an index.html, and an
import-only stand-in for `av` first on the server's PYTHONPATH. Everything else is the real ComfyUI."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

AV_STAND_IN = '''"""Import-only stand-in for PyAV: ComfyUI imports it at start for its video types; the
dynamic-VRAM check decodes no video. Any attribute is a class, so annotations and bases resolve."""


class _Anything(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Anything(name, (), {})
'''
AV_SUBMODULES = (
    "container",
    "codec",
    "error",
    "filter",
    "subtitles/stream",
    "video/reformatter",
    "audio/resampler",
)


def write_av_stand_in(folder: Path) -> Path:
    """A package `av` under `folder` (put first on PYTHONPATH) with the submodules ComfyUI imports."""
    package = folder / "av"
    for name in ("__init__", *AV_SUBMODULES):
        path = package / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.parent != package and not (path.parent / "__init__.py").exists():
            (path.parent / "__init__.py").write_text(AV_STAND_IN)
        path.write_text(AV_STAND_IN)
    return folder


def headless_setup(folder: Path, force: bool = False) -> tuple[tuple[str, ...], dict[str, str]]:
    """(extra server arguments, extra environment) for a machine without ComfyUI's frontend
    package or without av (the lent GPU machine): a `--front-end-root` holding an index.html, and
    the av stand-in first on PYTHONPATH. `force` uses both even where the real ones exist (the CPU
    dry run proves the GPU machine's way of starting)."""
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    if force or importlib.util.find_spec("comfyui_frontend_package") is None:
        root = folder / "frontend"
        root.mkdir(parents=True, exist_ok=True)
        (root / "index.html").write_text("<!doctype html><title>headless</title>\n")
        args = ("--front-end-root", str(root))
    if force or importlib.util.find_spec("av") is None:
        stand_in = write_av_stand_in(folder / "av_stand_in")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(stand_in), os.environ.get("PYTHONPATH")) if p)
    return args, env

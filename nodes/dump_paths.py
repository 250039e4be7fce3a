"""Where dumps live: <ComfyUI output>/pipeline_monitor/dumps/ (shared by the dump nodes and routes)."""

from __future__ import annotations

import os

from . import runtime

DUMPS_FOLDER = "dumps"


def dumps_dir() -> str:
    # Looked up through the module on every call, so tests can point it elsewhere.
    return os.path.join(runtime.pack_output_dir(), DUMPS_FOLDER)

"""Browser tests (marker `browser`): Playwright driving Debian's Chromium against the session's
headless ComfyUI server from tests/comfyui/conftest.py. Skipped, with the reason, when
COMFYUI_PATH, /usr/bin/chromium or the Python playwright package is missing. No browser is ever
downloaded: install one with `apt-get install -y chromium fonts-dejavu-core`."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"


def skip_reason() -> str | None:
    if not os.environ.get("COMFYUI_PATH"):
        return "COMFYUI_PATH is not set: browser tests need a ComfyUI checkout (0.8.0 to 0.33.0)"
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing: apt-get install -y chromium fonts-dejavu-core"
    if importlib.util.find_spec("playwright") is None:
        return "the Python playwright package is missing: pip install playwright (no browser download)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = skip_reason()
    for item in items:
        if HERE not in Path(str(item.path)).resolve().parents:
            continue
        item.add_marker(pytest.mark.browser)
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))

import pytest


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One headless ComfyUI server per test session, shared by tests/comfyui and tests/browser
    (see tests/comfyui/conftest.py; skipped there without COMFYUI_PATH)."""
    from tests.comfyui.conftest import session_server

    yield from session_server(tmp_path_factory)

import pytest

# Imported here, before any test imports ComfyUI in-process: ComfyUI has a `tests` package of its
# own, and once its folder leads sys.path a late `import tests.comfyui...` could not be resolved.
from tests.comfyui import conftest as comfyui_conftest


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One headless ComfyUI server per test session, shared by tests/comfyui and tests/browser
    (see tests/comfyui/conftest.py; skipped there without COMFYUI_PATH)."""
    yield from comfyui_conftest.session_server(tmp_path_factory)

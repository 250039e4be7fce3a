"""The GPU dynamic-VRAM check's code run on the CPU (tests/comfyui/dynamic_vram_support.py): a real
ComfyUI 0.33 server with `--cpu --disable-dynamic-vram`, started the lent GPU machine's way (the
frontend replaced by a folder with an index.html, PyAV by the import-only stand-in). The demo
pipeline, the VAE monitor forced to its CPU rung, the LoRA'd model's patches (written in place by the
estimate-based patcher) and the models step's loaded bytes against ComfyUI's loaded_size() hold here;
tests/gpu/test_gpu_dynamic_vram.py runs the same checks on CUDA with dynamic VRAM on and off."""

from __future__ import annotations

import shutil

import pytest

from tests.comfyui import dynamic_vram_inprocess as inprocess
from tests.comfyui import dynamic_vram_support as support
from tests.comfyui.conftest import COMFYUI_PATH

pytestmark = pytest.mark.comfyui
SKIP_REASON = support.dynamic_vram_skip_reason(COMFYUI_PATH) if COMFYUI_PATH else None
if SKIP_REASON:
    pytestmark = [pytest.mark.comfyui, pytest.mark.skip(reason=SKIP_REASON)]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("dynamic_vram_cpu")
    yield support.run_mode(base, support.CPU_ESTIMATE, force_headless=True)
    shutil.rmtree(base / "models", ignore_errors=True)


@pytest.mark.parametrize("check", list(support.CHECKS))
def test_check_holds_on_the_cpu(cpu_run, check, request):
    support.run_check(cpu_run, check, support.verdict_emitter(request))


def test_inprocess_check_holds_on_the_cpu(tmp_path_factory, request):
    """tests/comfyui/dynamic_vram_inprocess.py with ComfyUI on the CPU: the estimate-based patcher."""
    base = support.prepare_base(tmp_path_factory.mktemp("dynamic_vram_inprocess_cpu"))
    support.write_lora(base)
    emit = support.verdict_emitter(request)
    try:
        with support.checked("inprocess", support.CPU_ESTIMATE.name, emit) as details:
            result = inprocess.run_inprocess(base, support.CPU_ESTIMATE.name)
            details.append(inprocess.check_inprocess(result, support.CPU_ESTIMATE))
    finally:
        shutil.rmtree(base / "models", ignore_errors=True)
    assert result["patcher_class"] == "ModelPatcher" and result["load_device"] == "cpu", result

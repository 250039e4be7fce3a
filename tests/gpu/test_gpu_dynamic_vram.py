"""Dynamic VRAM on a real GPU: a ComfyUI 0.33+ server on CUDA (never --cpu) with this pack, run twice,
once with dynamic VRAM on (ComfyUI's default on CUDA) and once with `--disable-dynamic-vram`.

In each mode (tests/comfyui/dynamic_vram_support.py; the same code runs on the CPU in
tests/comfyui/test_dynamic_vram_server.py):
- the demo pipeline (example_workflows/api/models_profile_demo.json) succeeds and its models step names the
  memory manager: "dynamic", or "estimate" without dynamic VRAM;
- PipelineMonitorVAEEncode forced to `strategy=cpu` encodes on its CPU rung (a clone of a dynamic
  patcher with the CPU as load device used to fail with KeyError);
- after a sampler ran a LoRA'd tiny WAN 2.1, the models step says how the patches reach the weights:
  applied on the fly (`weights_patched` false) under dynamic VRAM, written in place without;
- the models step's loaded and resident bytes equal ComfyUI's own `patcher.loaded_size()`, read by a
  test-only node just before and just after it in the same server process.

And with ComfyUI imported as a library (`test_dynamic_vram_inprocess`, in a process of its own since
comfy-aimdo must start before CUDA, as main.py starts it): the LoRA'd tiny WAN sampled on CUDA, then
the pack's models builder between two reads of `loaded_size()`, which must all agree.

Every check prints one line, `gpu-dynamic-vram: <check>[dynamic|estimate]: ok|FAILED <detail>`.
Needs CUDA, COMFYUI_PATH at ComfyUI 0.33 or later and comfy_aimdo; skipped with the reason otherwise.
Where the frontend package or PyAV is missing, the server gets a `--front-end-root` and an import-only
`av` stand-in (tests/comfyui/headless_support.py).
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from tests.comfyui import dynamic_vram_inprocess as inprocess
from tests.comfyui import dynamic_vram_support as support

COMFYUI_PATH = os.environ.get("COMFYUI_PATH")
NO_CUDA = not torch.cuda.is_available()
SKIP_REASON = (
    "needs a CUDA GPU (torch.cuda.is_available() is False)"
    if NO_CUDA
    else support.dynamic_vram_skip_reason(COMFYUI_PATH)
)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")]
MODES = {mode.name: mode for mode in (support.GPU_DYNAMIC, support.GPU_ESTIMATE)}


@pytest.fixture(scope="module", params=list(MODES))
def gpu_run(request, tmp_path_factory):
    """One server per mode, stopped once its prompts finished (support.run_mode), so in one pytest
    process two never share the GPU; its checks then read what it gave (a failed start included)."""
    base = tmp_path_factory.mktemp(f"gpu_dynamic_vram_{request.param}")
    yield support.run_mode(base, MODES[request.param])
    shutil.rmtree(base / "models", ignore_errors=True)


@pytest.mark.parametrize("check", list(support.CHECKS))
def test_dynamic_vram_check(gpu_run, check, request):
    support.run_check(gpu_run, check, support.verdict_emitter(request))


@pytest.mark.parametrize("mode", list(MODES))
def test_dynamic_vram_inprocess(mode, tmp_path_factory, request):
    """ComfyUI imported as a library on CUDA (tests/comfyui/dynamic_vram_inprocess.py, a process of
    its own): the pack's models builder against patcher.loaded_size() with nothing in between."""
    base = support.prepare_base(tmp_path_factory.mktemp(f"gpu_dynamic_vram_inprocess_{mode}"))
    support.write_lora(base)
    try:
        with support.checked("inprocess", mode, support.verdict_emitter(request)) as details:
            result = inprocess.run_inprocess(base, mode)
            details.append(inprocess.check_inprocess(result, MODES[mode]))
        assert result["load_device"].startswith("cuda"), result
    finally:
        shutil.rmtree(base / "models", ignore_errors=True)

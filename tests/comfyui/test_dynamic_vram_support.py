"""The parts of the GPU dynamic-VRAM check that decide whether it runs and how it starts a server
(tests/comfyui/dynamic_vram_support.py, headless_support.py), on any machine."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.comfyui import dynamic_vram_support as support
from tests.comfyui import headless_support

pytestmark = pytest.mark.comfyui


def checkout(tmp_path, version: str):
    (tmp_path / "comfyui_version.py").write_text(f'__version__ = "{version}"\n')
    return str(tmp_path)


def test_the_skip_reason_names_what_is_missing(tmp_path, monkeypatch):
    assert "not a ComfyUI checkout" in support.dynamic_vram_skip_reason(None)
    assert "not a ComfyUI checkout" in support.dynamic_vram_skip_reason(str(tmp_path))
    assert "ComfyUI 0.8.0: dynamic VRAM needs 0.33" in support.dynamic_vram_skip_reason(
        checkout(tmp_path, "0.8.0")
    )
    real_find_spec = support.importlib.util.find_spec
    monkeypatch.setattr(
        support.importlib.util,
        "find_spec",
        lambda name: None if name == "comfy_aimdo" else real_find_spec(name),
    )
    assert "comfy_aimdo is not installed" in support.dynamic_vram_skip_reason(checkout(tmp_path, "0.33.0"))
    monkeypatch.setattr(support.importlib.util, "find_spec", lambda name: object())
    assert support.dynamic_vram_skip_reason(checkout(tmp_path, "0.38.1")) is None
    assert support.comfyui_version(checkout(tmp_path, "0.38.1")) == (0, 38, 1)


def test_the_av_stand_in_imports_as_comfyui_imports_av(tmp_path):
    args, env = headless_support.headless_setup(tmp_path, force=True)
    assert args == ("--front-end-root", str(tmp_path / "frontend"))
    assert (tmp_path / "frontend" / "index.html").is_file()
    code = (
        "import av\n"
        "from av.container import InputContainer\n"
        "from av.subtitles.stream import SubtitleStream\n"
        "from av.video.reformatter import ColorRange\n"
        "from av.codec import CodecContext\n"
        "import av.audio.resampler\n"
        "hint = av.VideoStream | None\n"
        "class Frame(av.VideoFrame): pass\n"
        f"assert av.__file__.startswith({str(tmp_path)!r}), av.__file__\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={"PYTHONPATH": env["PYTHONPATH"]}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_a_failed_check_is_one_failed_line_and_propagates():
    lines = []
    with pytest.raises(AssertionError):
        with support.checked("demo", "dynamic", lines.append):
            raise AssertionError("memory_manager\n{'model': 'estimate'}")
    with support.checked("vae-cpu", "dynamic", lines.append) as details:
        details.append("strategy_used=cpu")
    assert lines == [
        "gpu-dynamic-vram: demo[dynamic]: FAILED AssertionError: memory_manager {'model': 'estimate'}",
        "gpu-dynamic-vram: vae-cpu[dynamic]: ok strategy_used=cpu",
    ]


def test_a_server_that_did_not_start_fails_every_check_with_why():
    run = support.ModeRun(support.GPU_DYNAMIC, error="RuntimeError: ComfyUI exited with 1: no CUDA")
    lines = []
    for check in support.CHECKS:
        with pytest.raises(AssertionError):
            support.run_check(run, check, lines.append)
    assert len(lines) == len(support.CHECKS) and all("[dynamic]: FAILED" in line for line in lines)
    assert all("no CUDA" in line for line in lines if "server[" not in line), lines


def test_a_long_detail_keeps_its_head_and_its_tail():
    line = support.verdict_line(
        "prompts", "dynamic", False, "RuntimeError: exited\n" + "x" * 5000 + " CUDA error"
    )
    assert line.startswith("gpu-dynamic-vram: prompts[dynamic]: FAILED RuntimeError: exited x")
    assert line.endswith("x CUDA error") and " ... " in line and len(line) < 900


def dynamic_lora_run(model: dict, sizes=(9000, 9000)) -> support.ModeRun:
    """A dynamic-mode server run as the LoRA prompt would leave it, the model's figures given."""
    ok = {"status_str": "success", "messages": []}
    read = [
        {"loaded_size": [size], "model_loaded_weight_memory": [1000], "is_dynamic": [True]} for size in sizes
    ]
    outputs = {support.LOADED_SIZE_NODE: read[0], support.LOADED_SIZE_AFTER_NODE: read[1]}
    step = {
        "node_id": support.LOADED_MODELS_NODE,
        "kind": "models",
        "details": {"objects": {"model": {"unknown_reasons": {}, **model}}},
    }
    return support.ModeRun(
        support.GPU_DYNAMIC,
        histories={"lora": {"status": ok, "outputs": outputs}},
        reports={"lora": {"steps": [step]}},
    )


DYNAMIC_MODEL = {
    "memory_manager": "dynamic",
    "patch_application": "on_the_fly",
    "weights_patched": False,
    "n_patched_on_the_fly": 20,
    "n_patched_in_place": 0,
    "loaded_weight_bytes": 9000,
    "resident_bytes": 9000,
}


def test_the_dynamic_checks_pass_what_dynamic_vram_should_report():
    run = dynamic_lora_run(DYNAMIC_MODEL)
    assert "patch_application=on_the_fly" in support.check_lora(run)
    assert "dynamic part=8000" in support.check_loaded_size(run)


@pytest.mark.parametrize(
    "wrong",
    [
        {"weights_patched": True},  # issue 24 point 2: patches taken as written into the weights
        {"patch_application": "in_place"},
        {"memory_manager": "estimate"},
        {"loaded_weight_bytes": 1000, "resident_bytes": 1000},  # point 3: the vbar part missed
    ],
)
def test_the_dynamic_checks_fail_what_issue_24_described(wrong):
    run = dynamic_lora_run({**DYNAMIC_MODEL, **wrong})
    check = support.check_loaded_size if "loaded_weight_bytes" in wrong else support.check_lora
    with pytest.raises(AssertionError):
        check(run)


def test_the_inprocess_check_on_what_dynamic_vram_should_report():
    from tests.comfyui import dynamic_vram_inprocess as inprocess

    result = {
        "aimdo_enabled": True,
        "patcher_class": "ModelPatcherDynamic",
        "load_device": "cuda:0",
        "loaded_size_before": 9000,
        "loaded_size_after": 9000,
        "model_loaded_weight_memory": 1000,
        "model": {"unknown_reasons": {}, **DYNAMIC_MODEL},
    }
    assert "ModelPatcherDynamic on cuda:0" in inprocess.check_inprocess(result, support.GPU_DYNAMIC)
    for wrong in ({"aimdo_enabled": False}, {"loaded_size_after": 12000}):
        with pytest.raises(AssertionError):
            inprocess.check_inprocess({**result, **wrong}, support.GPU_DYNAMIC)
    missed_vbar = {**DYNAMIC_MODEL, "loaded_weight_bytes": 1000, "resident_bytes": 1000}
    with pytest.raises(AssertionError):
        inprocess.check_inprocess(
            {**result, "model": {"unknown_reasons": {}, **missed_vbar}}, support.GPU_DYNAMIC
        )


def test_a_failed_prompt_says_which_node_failed_and_why_not_its_inputs():
    status = {
        "status_str": "error",
        "messages": [
            ["execution_start", {"prompt_id": "p"}],
            [
                "execution_error",
                {
                    "node_id": "8",
                    "node_type": "PipelineMonitorVAEEncode",
                    "exception_type": "KeyError",
                    "exception_message": "'weight'",
                    "traceback": ["Traceback (most recent call last):\n", '  File "x.py", line 1\n'],
                    "current_inputs": {"pixels": ["0.5020, " * 2000]},
                },
            ],
        ],
    }
    text = support.failure_text(status)
    assert text.startswith("node 8 PipelineMonitorVAEEncode: KeyError: 'weight'\n")
    assert 'File "x.py", line 1' in text and "0.5020" not in text
    assert support.failure_text({"status_str": "error", "messages": []}).endswith("[]}")


def demo_run(mode: support.Mode, peaks: list[dict]) -> support.ModeRun:
    """A server run as the demo prompt would leave it, its node rows' GPU peaks given."""
    step = {"node_id": support.DEMO_MODELS_NODE, "kind": "models"}
    nodes = [{"node_id": "1", "gpu_peaks": peaks}]
    return support.ModeRun(
        mode,
        histories={"demo": {"status": {"status_str": "success", "messages": []}}},
        reports={"demo": {"steps": [step], "nodes": nodes}},
    )


def gpu_peak(process=None, aimdo=None, reserved=800):
    return {
        "device": "cuda:0",
        "peak_reserved_bytes": reserved,
        "peak_process_used_bytes": process,
        "process_used_unknown_reason": None if process is not None else "not in NVML's list",
        "peak_aimdo_used_bytes": aimdo,
        "aimdo_used_unknown_reason": None if aimdo is not None else "dynamic VRAM is off",
    }


def test_the_device_memory_check_wants_aimdos_figure_exactly_under_dynamic_vram():
    line = support.check_device_memory(demo_run(support.GPU_DYNAMIC, [gpu_peak(5000, 3000)]))
    assert line == "peak process device memory 5000 bytes, torch reserved peak 800, comfy-aimdo peak 3000"
    support.check_device_memory(demo_run(support.GPU_ESTIMATE, [gpu_peak(5000)]))
    for mode, peak in (
        (support.GPU_DYNAMIC, gpu_peak(5000)),  # dynamic VRAM's own figure missing
        (support.GPU_ESTIMATE, gpu_peak(5000, 3000)),  # an aimdo figure without dynamic VRAM
        (support.GPU_DYNAMIC, gpu_peak(None, 3000)),  # no per-process figure: its reason is shown
        (support.GPU_ESTIMATE, gpu_peak(500)),  # less than torch's own reserved: not the driver's count
    ):
        with pytest.raises(AssertionError):
            support.check_device_memory(demo_run(mode, [peak]))
    with pytest.raises(AssertionError, match="not in NVML's list"):
        support.check_device_memory(demo_run(support.GPU_ESTIMATE, [gpu_peak()]))

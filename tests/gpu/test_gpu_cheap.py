"""Issue 25 on a real CUDA device: value_stats, compare_pair and a LoRA step read back as often as
on the CPU proxy (tests/readbacks.py counts them), with the CPU's figures, and a repeated LoRA step
with a new strength reads nothing back. Skipped without CUDA."""

from __future__ import annotations

import pytest
import torch

from monitors.dumps.compare import compare_pair
from monitors.lora.caches import clear_caches
from monitors.lora.report import build_lora_step
from monitors.numeric.tensor_stats import value_stats
from tests.readbacks import ReadbackCounter

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
    ),
]


class Adapter:
    name = "lora"

    def __init__(self, weights):
        self.weights = weights


class Patcher:
    def __init__(self, model):
        self.model, self.patches, self.parent, self.backup = model, {}, None, {}
        self.patches_uuid = object()

    def clone(self):
        clone = Patcher(self.model)
        clone.patches = {k: v[:] for k, v in self.patches.items()}
        clone.parent, clone.backup, clone.patches_uuid = self, self.backup, self.patches_uuid
        return clone

    def add_patches(self, patches, strength):
        for key, value in patches.items():
            self.patches.setdefault(key, []).append((strength, value, 1.0, None, None))
        self.patches_uuid = object()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_value_stats_reads_back_once_with_the_cpu_figures(dtype):
    values = (torch.randn(1 << 24, device="cuda") * 2 + 0.5).to(dtype)
    with ReadbackCounter() as counter:
        on_gpu = value_stats(values)
    assert counter.n_readbacks == 1
    on_cpu = value_stats(values.cpu())
    assert (on_gpu["min"], on_gpu["max"]) == (on_cpu["min"], on_cpu["max"])
    assert on_gpu["mean"] == pytest.approx(on_cpu["mean"], rel=1e-5, abs=1e-6)
    assert on_gpu["std"] == pytest.approx(on_cpu["std"], rel=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_compare_pair_reads_back_once_with_the_cpu_figures(dtype):
    a = torch.randn(1 << 24, device="cuda").to(dtype)
    b = (a.float() + 1e-3 * torch.randn(1 << 24, device="cuda")).to(dtype)
    with ReadbackCounter() as counter:
        on_gpu = compare_pair(a, b, 1e-5, 1e-8)
    assert counter.n_readbacks == 1
    on_cpu = compare_pair(a.cpu(), b.cpu(), 1e-5, 1e-8)
    assert on_gpu["n_not_close"] == on_cpu["n_not_close"] and on_gpu["max_abs_diff"] == on_cpu["max_abs_diff"]
    assert on_gpu["relative_error"] == pytest.approx(on_cpu["relative_error"], rel=1e-4)


def test_a_lora_step_on_cuda_reads_back_once_then_never_for_a_new_strength(tmp_path):
    from safetensors.torch import save_file

    clear_caches()
    path = tmp_path / "a.safetensors"
    save_file({"x": torch.zeros(1)}, str(path))
    module = torch.nn.Module()
    module.layers = torch.nn.ModuleList([torch.nn.Linear(1280, 1280) for _ in range(32)]).cuda().half()
    patches = {
        f"layers.{i}.weight": Adapter(
            (
                torch.randn(1280, 32, device="cuda").half() * 0.01,
                torch.randn(32, 1280, device="cuda").half(),
                32.0,
            )
        )
        for i in range(32)
    }
    base = Patcher(module)
    prompt = {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {}},
        "2": {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": ["1", 0], "lora_name": "a", "strength_model": 0.8},
        },
        "3": {"class_type": "Monitor", "inputs": {"model": ["2", 0]}},
    }
    counts, reports = [], []
    for strength in (0.8, 0.6):
        prompt["2"]["inputs"]["strength_model"] = strength
        patched = base.clone()
        patched.add_patches(patches, strength)
        with ReadbackCounter() as counter:
            reports.append(build_lora_step("3", prompt, patched, lora_path=lambda name: str(path)))
        counts.append(counter.n_readbacks)
    assert counts == [1, 0]
    first, second = (r.summary["model_delta_norm"] for r in reports)
    assert second == pytest.approx(first * 0.6 / 0.8, rel=1e-12)
    exact = sum(
        float((0.8 * (a.weights[0].double() @ a.weights[1].double())).pow(2).sum()) for a in patches.values()
    )
    assert first == pytest.approx(exact**0.5, rel=1e-4)
    clear_caches()

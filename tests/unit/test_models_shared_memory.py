"""A LoRA step describes the patcher before and after its LoRAs: one module, whose parameters are
walked once per step (shared_module_memory), never kept after it, and each caller gets its own copy."""

from __future__ import annotations

import torch

from monitors.models import state
from monitors.models.state import module_memory, shared_module_memory


def test_one_walk_per_module_within_the_block_and_none_kept_after(monkeypatch):
    walks = []
    real = state._module_memory

    def counting(module):
        walks.append(module)
        return real(module)

    monkeypatch.setattr(state, "_module_memory", counting)
    first, second = torch.nn.Linear(4, 3), torch.nn.Linear(2, 2)
    with shared_module_memory():
        a = module_memory(first)
        a["size_bytes"] = -1  # a caller's change stays its own
        b = module_memory(first)
        c = module_memory(second)
    assert walks == [first, second]
    assert b == {"size_bytes": 60, "bytes_by_device": {"cpu": 60}, "dtype": "float32", "n_elements": 15}
    assert c["n_elements"] == 6
    assert module_memory(first) == b and walks == [first, second, first]  # outside: walked again
    assert state._SHARED_MEMORY.get() is None


def test_a_lora_step_walks_its_model_once(monkeypatch):
    from monitors.lora.report import build_lora_step

    from .test_lora_patches import Patcher

    walks = []
    real = state._module_memory
    monkeypatch.setattr(state, "_module_memory", lambda m: walks.append(m) or real(m))
    module = torch.nn.Module()
    module.diffusion_model = torch.nn.Linear(4, 4)
    build_lora_step("1", {}, Patcher(module).clone())
    assert walks.count(module) == 1

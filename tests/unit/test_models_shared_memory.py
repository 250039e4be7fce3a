"""A LoRA step describes the patcher before and after its LoRAs: one module, whose parameters are
walked once per step (shared_module_memory), never kept after it, and each caller gets its own copy."""

from __future__ import annotations

import torch

from monitors.models.state import module_memory, shared_module_memory


class Counted(torch.nn.Linear):
    """A module that counts how often its tensors were listed (its own buffers(): walked through
    its methods, as any module that is not torch's own)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.walks = 0

    def buffers(self, recurse=True):
        self.walks += 1
        return super().buffers(recurse)


def test_one_walk_per_module_within_the_block_and_none_kept_after():
    first, second = Counted(4, 3), Counted(2, 2)
    with shared_module_memory():
        a = module_memory(first)
        a["size_bytes"] = -1  # a caller's change stays its own
        b = module_memory(first)
        c = module_memory(second)
    assert (first.walks, second.walks) == (1, 1)
    assert b == {"size_bytes": 60, "bytes_by_device": {"cpu": 60}, "dtype": "float32", "n_elements": 15}
    assert c["n_elements"] == 6
    assert module_memory(first) == b and first.walks == 2  # outside the block: walked again


def test_a_lora_step_walks_its_model_once():
    from monitors.lora.report import build_lora_step

    from .test_lora_patches import Patcher

    module = Counted(1, 1)
    module.diffusion_model = torch.nn.Linear(4, 4)
    build_lora_step("1", {}, Patcher(module).clone())
    assert module.walks == 1

"""monitors/lora/state_dicts.py: a LoRA step reads each module's state dict once, and keeps none."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from monitors.lora import analysis, coverage, side  # noqa: E402
from monitors.lora.state_dicts import shared_state_dicts, state_dict_of, with_shared_state_dicts  # noqa: E402


class Counting(torch.nn.Linear):
    def __init__(self):
        super().__init__(2, 2)
        self.reads = 0

    def state_dict(self, *args, **kwargs):
        self.reads += 1
        return super().state_dict(*args, **kwargs)


def test_within_the_block_each_module_is_read_once_and_outside_always():
    module, other = Counting(), Counting()
    with shared_state_dicts():
        first = state_dict_of(module)
        assert state_dict_of(module) is first and module.reads == 1
        state_dict_of(other)
        assert other.reads == 1
    assert state_dict_of(module) is not first and module.reads == 2  # nothing kept after the block
    assert state_dict_of(module) is not first and module.reads == 3


def test_the_three_readers_of_a_lora_step_share_one_read():
    module = Counting()
    patcher = types.SimpleNamespace(model=module, backup={})

    @with_shared_state_dicts
    def step():
        side.state_dicts(patcher, patcher)
        analysis.base_weight_lookup(patcher)("weight")
        return coverage._state_keys(module)

    assert step() == {"weight", "bias"}
    assert module.reads == 1
    step()
    assert module.reads == 2  # one more step, one more read

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


class Walks(torch.nn.Module):
    """A model whose module walks are counted (torch's own state_dict, no hooks)."""

    def __init__(self):
        super().__init__()
        self.walks = 0
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4)])
        self.register_buffer("scratch", torch.zeros(2), persistent=False)
        self.scale = torch.nn.Parameter(torch.ones(1))

    def named_modules(self, *args, **kwargs):
        self.walks += 1
        return super().named_modules(*args, **kwargs)


def test_a_plain_module_state_is_its_state_dict_read_live_without_a_walk_after_the_first():
    import gc
    import weakref

    model = Walks()
    live = state_dict_of(model)
    real = model.state_dict()
    assert list(live) == list(real) and len(live) == len(real) and "scratch" not in live
    for key, tensor in real.items():
        assert live[key].data_ptr() == tensor.data_ptr() and live[key].shape == tensor.shape
    assert model.walks == 1
    with shared_state_dicts():
        state_dict_of(model)
    state_dict_of(model)
    assert model.walks == 1  # the table is kept with the model
    model.blocks[0].weight = torch.nn.Parameter(torch.zeros(4, 3))  # ComfyUI may swap a weight
    assert state_dict_of(model)["blocks.0.weight"].abs().sum() == 0  # read live
    ref = weakref.ref(model)
    del model, live
    gc.collect()
    assert ref() is None  # the table does not keep its model alive


def test_a_module_with_its_own_state_dict_or_hooks_is_read_by_state_dict():
    hooked = torch.nn.Linear(2, 2)
    hooked._register_state_dict_hook(lambda module, state, prefix, local: None)
    assert isinstance(state_dict_of(Counting()), dict)
    assert isinstance(state_dict_of(hooked), dict)


def test_a_live_state_gives_shapes_as_the_state_dict_does():
    model = Walks()
    live = state_dict_of(model)
    for key, tensor in model.state_dict().items():
        assert live.shape(key) == list(tensor.shape)
    assert live.shape("no.such.key") is None

"""monitors/models/memory_tables.py (issue 35): a model described again walks no parameters; a new
placement (ComfyUI's loaded size, the first parameter's device or dtype) walks again."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from monitors.models.memory_tables import MEMORY_TABLES  # noqa: E402
from monitors.models.report import build_models_step  # noqa: E402
from monitors.models.state import _module_memory, describe_clip, describe_model  # noqa: E402


class Patcher:
    """ComfyUI's ModelPatcher as the models monitor reads it: its sizes and its module."""

    def __init__(self, module):
        self.model, self.patches, self.loaded = module, {}, 0

    def model_size(self):
        return sum(p.nbytes for p in self.model.parameters())

    def loaded_size(self):
        return self.loaded


class Clip:
    def __init__(self, module):
        self.cond_stage_model, self.patcher, self.tokenizer = module, Patcher(module), object()


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.Linear(16, 4))
    return module.to(torch.float16)


def test_a_model_described_again_walks_no_parameter_and_says_the_same():
    patcher = Patcher(model())
    first = describe_model(patcher)
    walks = MEMORY_TABLES.n_walks
    again = describe_model(patcher)
    assert MEMORY_TABLES.n_walks == walks
    assert again == first
    fresh = _module_memory(patcher.model)
    assert {k: again[k] for k in fresh} == fresh


def test_a_repeated_models_step_walks_nothing():
    patcher, clip = Patcher(model()), Clip(model())
    build_models_step("1", {"model": patcher, "clip": clip})
    walks = MEMORY_TABLES.n_walks
    build_models_step("1", {"model": patcher, "clip": clip})
    assert MEMORY_TABLES.n_walks == walks


def test_a_new_placement_is_walked_again():
    patcher = Patcher(model())
    describe_model(patcher)
    walks = MEMORY_TABLES.n_walks
    patcher.loaded = patcher.model_size()  # ComfyUI loaded it
    describe_model(patcher)
    assert MEMORY_TABLES.n_walks == walks + 1
    patcher.model.to(torch.float32)  # another dtype: the first parameter says so
    assert describe_model(patcher)["size_bytes"] == _module_memory(patcher.model)["size_bytes"]
    assert MEMORY_TABLES.n_walks == walks + 2
    patcher.loaded = 0
    describe_model(patcher)  # offloaded again: a placement seen before
    assert MEMORY_TABLES.n_walks == walks + 3


def test_a_table_served_is_a_copy_and_goes_with_its_model():
    clip = Clip(model())
    info = describe_clip(clip)
    info["bytes_by_device"]["cpu"] = -1
    assert describe_clip(clip)["bytes_by_device"]["cpu"] > 0
    n_models = MEMORY_TABLES.n_models()
    del clip, info
    gc.collect()
    assert MEMORY_TABLES.n_models() == n_models - 1


def test_a_module_without_its_patcher_is_walked_each_time_and_kept_nowhere():
    module = model()
    n_models = MEMORY_TABLES.n_models()
    assert describe_model(module)["size_bytes"] == _module_memory(module)["size_bytes"]
    assert MEMORY_TABLES.n_models() == n_models

"""nodes/lora_keys.calculate_weight hands ComfyUI's calculate_weight its newer keywords where it has
them (intermediate_dtype, original_weights: a copy of the unpatched weight when a model_as_lora
patch needs it) and calls an older one without them. The real one: tests/comfyui/test_dynamic_vram_contract.py."""

import importlib
import sys
import types

import pytest
import torch

from tests.unit.test_routes import PACK, import_pack


@pytest.fixture
def lora_keys(monkeypatch):
    calls = []
    lora = types.ModuleType("comfy.lora")
    comfy = types.ModuleType("comfy")
    comfy.lora = lora
    monkeypatch.setitem(sys.modules, "comfy", comfy)
    monkeypatch.setitem(sys.modules, "comfy.lora", lora)
    import_pack()
    module = importlib.import_module(f"{PACK}.nodes.lora_keys")
    return module, lora, calls


def test_newer_keywords_and_the_original_weight_for_model_as_lora(lora_keys):
    module, lora, calls = lora_keys

    def calculate_weight(patches, weight, key, intermediate_dtype=torch.float32, original_weights=None):
        calls.append((intermediate_dtype, original_weights))
        weight += 1
        return weight

    lora.calculate_weight = calculate_weight
    weight = torch.zeros(2, dtype=torch.float64)
    module.calculate_weight([(1.0, ("diff", (torch.ones(2),)), 1.0, None, None)], weight, "w")
    as_lora = [(1.0, ("model_as_lora", (torch.ones(2),)), 1.0, None, None)]
    module.calculate_weight(as_lora, weight, "w")
    (dtype, none), (_, original) = calls
    assert dtype == torch.float64 and none is None
    assert list(original) == ["w"] and torch.equal(original["w"][0][0], torch.ones(2, dtype=torch.float64))
    assert original["w"][0][0] is not weight  # a copy: the patch changes `weight` in place
    assert torch.equal(weight, torch.full((2,), 2.0, dtype=torch.float64))


def test_an_older_calculate_weight_is_called_without_them(lora_keys):
    module, lora, calls = lora_keys

    def calculate_weight(patches, weight, key):
        calls.append(key)
        return weight

    lora.calculate_weight = calculate_weight
    module.calculate_weight(
        [(1.0, ("model_as_lora", (torch.ones(1),)), 1.0, None, None)], torch.zeros(1), "k"
    )
    assert calls == ["k"]
    assert module._is_model_as_lora((1.0, (torch.zeros(1),), 1.0)) is False  # a bare (tensor,) patch

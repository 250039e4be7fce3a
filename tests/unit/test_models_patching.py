"""Where a patcher's patches live (monitors/models/patching.py) with plain fakes: keys whose
module is missing, a key both backed up and patched on the fly, keys patched neither way."""

from __future__ import annotations

import types

import torch

from monitors.models.patching import patch_placement, patched_on_the_fly


class LowVramPatch:
    """Named like ComfyUI's class before dynamic VRAM (no `is_lowvram_patch` attribute)."""


def model() -> torch.nn.Module:
    root = torch.nn.Module()
    root.blocks = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)])
    root.scale = torch.nn.Parameter(torch.ones(1))
    return root


def test_a_key_whose_module_is_missing_is_not_patched_on_the_fly():
    root = model()
    root.blocks[0].weight_function = [LowVramPatch()]
    assert patched_on_the_fly(root, "blocks.0.weight") is True
    assert patched_on_the_fly(root, "blocks.7.weight") is False
    assert patched_on_the_fly(root, "nowhere.at.all.weight") is False
    assert patched_on_the_fly(root, "scale") is False  # a parameter of the root itself
    root.scale_lowvram_function = LowVramPatch()
    assert patched_on_the_fly(root, "scale") is True


def patcher(root, patches, backup):
    root.current_weight_patches_uuid = "u"
    return types.SimpleNamespace(model=root, patches=patches, backup=backup, patches_uuid="u")


def test_a_backed_up_key_patched_on_the_fly_counts_once_on_the_fly():
    root = model()
    root.blocks[0].weight_function = [LowVramPatch()]
    keys = {"blocks.0.weight": [], "blocks.1.weight": [], "blocks.1.bias": []}
    backup = {"blocks.0.weight": None, "blocks.1.weight": None}  # blocks.1.bias: neither way
    assert patch_placement(patcher(root, keys, backup)) == {
        "patch_application": "mixed",
        "weights_patched": False,
        "n_patched_in_place": 1,
        "n_patched_on_the_fly": 1,
    }
    assert patch_placement(patcher(root, {"blocks.1.bias": []}, backup)) == {
        "patch_application": "none",
        "weights_patched": True,
        "n_patched_in_place": 0,
        "n_patched_on_the_fly": 0,
    }

"""Key-map targets that patch a slice of a weight, `(key, (dim, offset, length))` (q, k and v of a
fused qkv weight; more model families since ComfyUI 0.33): counted in the key coverage, and a slice
that does not fit its weight is reported."""

from types import SimpleNamespace

import torch

from monitors.lora.coverage import coverage_from_patches, loader_findings, slice_targets


class Module:
    def __init__(self, **shapes):
        self.tensors = {key: torch.zeros(shape) for key, shape in shapes.items()}

    def state_dict(self):
        return dict(self.tensors)


QKV = "blocks.0.attn.qkv.weight"


def test_slices_of_a_fused_weight_are_counted_once_per_weight():
    patch_dict = {
        (QKV, (0, 0, 4)): ("diff", (torch.zeros(4, 4),)),
        (QKV, (0, 4, 4)): ("diff", (torch.zeros(4, 4),)),
        (QKV, (0, 8, 4)): ("diff", (torch.zeros(4, 4),)),
        "blocks.0.proj.weight": SimpleNamespace(loaded_keys=set()),
        ("blocks.0.norm.weight", None, abs): ("diff", (torch.zeros(4),)),  # a whole weight, converted
    }
    model = Module(**{QKV: (12, 4), "blocks.0.proj.weight": (4, 4), "blocks.0.norm.weight": (4,)})
    figures = slice_targets(patch_dict, model)
    assert figures == {
        "n_slice_targets": 3,
        "n_sliced_weights": 1,
        "n_slices_beyond_weight": 0,
        "slices_beyond_weight": [],
    }
    coverage = coverage_from_patches([], {}, {}, {}, patch_dict, model)
    assert coverage["n_target_weights"] == 3 and coverage["n_targets_not_loaded"] == 0
    assert coverage["n_slice_targets"] == 3


def test_a_slice_beyond_its_weight_is_named_and_warned_about():
    patch_dict = {
        (QKV, (0, 8, 8)): ("diff", (torch.zeros(8, 4),)),  # 8..16 of 12 rows
        (QKV, (2, 0, 1)): ("diff", (torch.zeros(1),)),  # no third dimension
        ("absent.weight", (0, 0, 1)): ("diff", (torch.zeros(1),)),  # not loaded: counted there
    }
    figures = slice_targets(patch_dict, None, Module(**{QKV: (12, 4)}))
    assert figures["n_slice_targets"] == 3 and figures["n_sliced_weights"] == 2
    assert figures["slices_beyond_weight"] == [f"{QKV}: dim 0, 8..16 of 12", f"{QKV}: dim 2, 0..1 of None"]
    coverage = {"n_file_keys": 3, "n_matched_keys": 3, "n_unmatched_keys": 0, **figures}
    loader = {"node_id": "5", "lora_name": "x.safetensors", "skipped": False, "strength_model": 1.0}
    [finding] = loader_findings(loader, None, {**coverage, "n_unmatched_text_encoder_keys": 0})
    assert finding.code == "lora_slices_beyond_weight" and finding.level == "warning"
    assert finding.message.startswith("LoRA x.safetensors (node 5): 2 patches target a slice outside")


def test_without_modules_nothing_is_beyond():
    figures = slice_targets({(QKV, (0, 0, 4)): None})
    assert figures["n_slice_targets"] == 1 and figures["n_slices_beyond_weight"] == 0

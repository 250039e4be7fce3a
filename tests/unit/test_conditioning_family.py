"""monitors/conditioning/family.py with known answers: the token rules of a family, shapes that
fit several families or none, the CLIP class combined with the shape, and the families remembered
per tensor (scripts/mutate.py survivors of the first tests)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from monitors.conditioning import family as fam
from monitors.conditioning.family import RULES_BY_FAMILY, FamilyRule, family_from_shape, identify_family


def test_rules_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RULES_BY_FAMILY["SD1.x"].hidden = 1


def test_token_rules_of_a_free_length_encoder():
    free = FamilyRule("x", "e", 10, None)
    assert free.padded_to == 1
    assert free.tokens_possible(None) is True
    assert free.tokens_possible(1) is True and free.tokens_possible(0) is False
    assert free.tokens_exact(None) is False
    assert free.tokens_exact(1) is False  # a free length is never the padded one


def test_token_rules_of_chunked_padded_and_exact_encoders():
    sd1 = RULES_BY_FAMILY["SD1.x"]
    assert [sd1.tokens_possible(n) for n in (77, 154, 100, 0)] == [True, True, False, False]
    assert sd1.tokens_possible(100) is False
    assert [sd1.tokens_exact(n) for n in (77, 154)] == [True, False]
    hidream = RULES_BY_FAMILY["HiDream"]
    assert [hidream.tokens_possible(n) for n in (128, 127, 129)] == [True, False, False]
    assert [hidream.tokens_exact(n) for n in (128, 127)] == [True, False]
    hunyuan_dit = RULES_BY_FAMILY["HunyuanDiT"]
    assert [hunyuan_dit.tokens_exact(n) for n in (77, 78, 154)] == [True, False, False]
    wan = RULES_BY_FAMILY["WAN 2.1/2.2"]
    assert [wan.tokens_possible(n) for n in (511, 512, 700)] == [False, True, True]
    assert [wan.tokens_exact(n) for n in (512, 700)] == [True, False]


def test_a_shape_no_token_count_fits_keeps_every_shaped_family_as_candidate():
    # 4096/2048 is HiDream (needs its llama3 extra) or SD3 (at least 154 tokens): 100 tokens fit neither.
    answer = family_from_shape(4096, 2048, 100)
    assert answer == {
        "family": "HiDream",
        "encoder": "T5-XXL + Llama-3.1-8B",
        "confidence": "ambiguous",
        "candidates": ["SD3"],
        "basis": "shape",
    }


def _shape(family_name, confidence="exact"):
    return {
        "family": family_name,
        "encoder": None,
        "confidence": confidence,
        "candidates": [],
        "basis": "shape",
    }


def test_the_clip_class_combined_with_the_shape():
    assert identify_family(_shape("Flux.1"), ()) == _shape("Flux.1")
    one = identify_family(_shape("unknown (hidden 96)", "unknown"), ("Flux.1",))
    assert one == {
        "family": "Flux.1",
        "encoder": "T5-XXL + CLIP-L",
        "confidence": "exact",
        "candidates": [],
        "basis": "clip class",
        "shape_family": "unknown (hidden 96)",
    }
    # a class serving two families: the shape picks one of them, exactly
    picked = identify_family(_shape("LTXV 0.9"), ("Mochi", "LTXV 0.9"))
    assert (picked["family"], picked["encoder"], picked["confidence"], picked["candidates"]) == (
        "LTXV 0.9",
        "T5-XXL",
        "exact",
        ["Mochi"],
    )
    # ... or neither: both are named, the first one's encoder, only likely
    neither = identify_family(_shape("WAN 2.1/2.2"), ("SD1.x", "SDXL"))
    assert (neither["family"], neither["encoder"], neither["confidence"], neither["candidates"]) == (
        "SD1.x / SDXL",
        "CLIP-L",
        "likely",
        ["SD1.x", "SDXL"],
    )
    unknown = identify_family(_shape("SD1.x"), ("Some future family",))
    assert (unknown["family"], unknown["encoder"], unknown["confidence"]) == (
        "Some future family",
        None,
        "exact",
    )


def test_a_remembered_family_is_found_for_that_very_tensor_only():
    a, b = torch.zeros(1, 2, 3), torch.zeros(1, 2, 3)
    fam.remember_family(a, {"family": "SDXL"})
    found = fam.remembered_family(a)
    assert found == {"family": "SDXL"}
    found["family"] = "changed"  # a copy
    assert fam.remembered_family(a) == {"family": "SDXL"}
    assert fam.remembered_family(b) is None
    fam.remember_family(1.5, {"family": "x"})  # no weak reference to a float: ignored
    assert fam.remembered_family(1.5) is None


def test_remembered_families_are_bounded_and_live_ones_stay():
    tensors = [torch.zeros(1) for _ in range(fam.MAX_REMEMBERED_FAMILIES + 10)]
    assert fam.MAX_REMEMBERED_FAMILIES == 256
    for index, tensor in enumerate(tensors):
        fam.remember_family(tensor, {"family": str(index)})
    # the oldest went first: entries 10 to 265 (256 of them) are all that is kept
    assert fam.remembered_family(tensors[9]) is None
    assert fam.remembered_family(tensors[10]) == {"family": "10"}
    assert fam.remembered_family(tensors[-1]) == {"family": str(len(tensors) - 1)}

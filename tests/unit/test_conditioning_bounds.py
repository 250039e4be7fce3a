"""What analyse_conditioning says at each bound (entries, findings, extras, the statistics limit)
and the side and comparison figures on known values: validity, counts, bytes, families, texts."""

from __future__ import annotations

import types

import pytest
import torch

from monitors.conditioning import analysis
from monitors.conditioning.analysis import analyse_conditioning
from monitors.conditioning.prompt_text import text_stats


def cond(tokens=77, hidden=768, pooled=768, **extras):
    pooled_output = None if pooled is None else torch.ones(1, pooled)
    return [torch.full((1, tokens, hidden), 0.5), {"pooled_output": pooled_output, **extras}]


def codes(step, level=None):
    return [f.code for f in step.findings if level is None or f.level == level]


def messages(step, code):
    return [f.message for f in step.findings if f.code == code]


def _encoder(*class_names):
    base = object
    for name in reversed(class_names):
        base = type(name, (base,), {})
    return base()


def _trace(*texts):
    entries = [{"input": "text", "source": "widget", "note": None, **text_stats(t)} for t in texts]
    return {"encoders": [{"node_id": "6", "class_type": "CLIPTextEncode", "texts": entries}], "notes": []}


def test_entries_are_described_up_to_64_and_the_rest_counted():
    assert analysis.MAX_ENTRIES == 64
    exactly = analyse_conditioning("1", [cond(4, 8, None)] * 64)
    assert len(exactly.details["positive"]["entries"]) == 64 and "many_entries" not in codes(exactly)
    above = analyse_conditioning("1", [cond(4, 8, None)] * 65)
    assert len(above.details["positive"]["entries"]) == 64
    assert messages(above, "many_entries") == ["positive: 65 entries, the first 64 are described"]


def test_findings_stop_at_50_and_the_rest_are_counted():
    assert analysis.MAX_FINDINGS == 50
    step = analyse_conditioning("1", [["not a tensor", {}]] * 60)
    # no_clip, 60 cond_not_tensor, text_unresolved (no prompt graph): 62 findings, 50 kept
    assert len(step.findings) == 50
    assert step.monitor_errors == ("12 more finding(s) dropped (limit 50)",)


def test_extras_are_described_up_to_32():
    assert analysis.MAX_EXTRAS == 32
    many = {f"k{i:02d}": i for i in range(40)}
    entry = analyse_conditioning("1", [cond(**many)]).details["positive"]["entries"][0]
    assert entry["n_extra_keys"] == 40 and entry["extra_keys"] == [f"k{i:02d}" for i in range(32)]
    assert list(entry["extras"]) == [f"k{i:02d}" for i in range(32)]
    assert entry["extras"]["k31"] == {"type": "int", "value": 31}


@pytest.mark.parametrize(
    ("tensor", "batch", "tokens", "hidden"),
    [
        (torch.ones(2, 5, 8), 2, 5, 8),
        (torch.ones(5, 8), None, 5, 8),
        (torch.ones(8), None, None, 8),
        (torch.tensor(1.0), None, None, None),
    ],
)
def test_batch_tokens_and_hidden_by_rank(tensor, batch, tokens, hidden):
    entry = analyse_conditioning("1", [[tensor, {}]]).details["positive"]["entries"][0]
    assert (entry["batch_size"], entry["n_tokens"], entry["hidden_size"]) == (batch, tokens, hidden)


@pytest.mark.parametrize("special", [float("nan"), float("inf")])
def test_a_special_value_in_an_embedding_extra_is_an_error(special):
    extra = torch.zeros(1, 4, 8)
    extra[0, 0, 0] = special
    step = analyse_conditioning("1", [cond(conditioning_llama3=extra)])
    assert messages(step, "nan_values") == [
        "positive: entry 0 extra 'conditioning_llama3' has NaN or infinite values"
    ]


def test_attended_tokens_are_counted_for_masks_of_1_to_the_statistics_limit(monkeypatch):
    def attended(mask):
        step = analyse_conditioning("1", [cond(attention_mask=mask)])
        return step.details["positive"]["entries"][0]["n_attended_tokens"]

    assert attended(torch.tensor([1])) == 1
    assert attended(torch.zeros(0)) is None
    monkeypatch.setattr(analysis, "STATS_MAX_ELEMENTS", 4)
    assert attended(torch.tensor([1, 1, 0, 1])) == 3
    assert attended(torch.tensor([1, 1, 0, 1, 1])) is None


def test_total_bytes_add_only_what_is_there():
    cond_bytes = 77 * 768 * 4
    bare = analyse_conditioning("1", [cond(pooled=None, note="x")]).details["positive"]
    assert bare["entries"][0]["total_bytes"] == cond_bytes and bare["total_bytes"] == cond_bytes
    full = analyse_conditioning("1", [cond(mask=torch.ones(1, 77, dtype=torch.int64))]).details["positive"]
    assert full["total_bytes"] == cond_bytes + 768 * 4 + 77 * 8


def test_side_validity_and_counts():
    empty = analyse_conditioning("1", []).details["positive"]
    assert empty["n_entries"] == 0 and empty["valid"] is False
    mixed = analyse_conditioning("1", [cond(), ["x", {}]]).details["positive"]
    assert (
        mixed["n_entries"] == 2 and mixed["valid"] is False and mixed["total_bytes"] == 77 * 768 * 4 + 768 * 4
    )
    assert analyse_conditioning("1", [cond(), cond()]).details["positive"]["valid"] is True


def test_entries_of_different_hidden_sizes_are_named():
    step = analyse_conditioning("1", [cond(77, 768, None), cond(77, 1024, None), [torch.tensor(1.0), {}]])
    assert messages(step, "mixed_hidden_sizes") == [
        "positive: entries have different hidden sizes [768, 1024]"
    ]


def test_comparison_needs_both_sides_valid():
    step = analyse_conditioning("1", [cond()], [["x", {}]])
    assert step.details["comparison"]["pooled_match"] is None
    assert "pooled_mismatch" not in codes(step)


def test_families_that_differ_at_the_same_hidden_size_are_named():
    # SD1.x (CLIP-L, pooled 768, 77 tokens) against Stable Audio (T5-base, no pooled, 128 tokens)
    step = analyse_conditioning("1", [cond(77, 768, 768)], [cond(128, 768, None)])
    assert step.details["comparison"]["family"] == ["SD1.x", "Stable Audio"]
    assert messages(step, "family_mismatch") == ["positive looks like SD1.x, negative like Stable Audio"]
    same = analyse_conditioning("1", [cond(77, 768, 768)], [cond(154, 768, 768)])
    assert "family_mismatch" not in codes(same)


def test_same_text_needs_texts_on_both_sides():
    assert analyse_conditioning("1", [cond()], [cond()]).details["comparison"]["same_text"] is None
    blank = analyse_conditioning(
        "1", [cond()], [cond()], traces={"positive": _trace(" "), "negative": _trace(" ")}
    )
    assert blank.details["comparison"]["same_text"] is True and "same_prompt" not in codes(blank)
    differ = analyse_conditioning(
        "1", [cond()], [cond()], traces={"positive": _trace("a cat"), "negative": _trace("a dog")}
    )
    assert differ.details["comparison"]["same_text"] is False and "same_prompt" not in codes(differ)


def test_a_clip_without_a_text_encoder_is_named_and_a_real_one_is_not():
    real = analyse_conditioning(
        "1", [cond()], clip=types.SimpleNamespace(cond_stage_model=_encoder("SD1ClipModel"))
    )
    assert "clip_not_a_clip" not in codes(real) and real.summary["encoder_class"] == "SD1ClipModel"
    fake = analyse_conditioning("1", [cond()], clip=types.SimpleNamespace())
    assert messages(fake, "clip_not_a_clip") == [
        "the clip input is a SimpleNamespace without a text encoder, not a CLIP"
    ]


def test_node_id_is_a_string_or_none():
    assert analyse_conditioning(7, [cond()]).node_id == "7"
    assert analyse_conditioning(None, [cond()]).node_id is None

"""monitors/latent/analysis.py on plain tensors: kind, family, statistics, masks, bad input; known
values at each boundary: every family's decoded size, the statistics limit, rank edges, finding
levels and messages, nested detection, truncation of long inputs."""

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from monitors.latent import analysis as latent_mod
from monitors.latent.analysis import analyse_latent, decoded_size, is_nested
from monitors.numeric import describe
from monitors.vocabulary.headline import headline_text


def codes(findings):
    return [f.code for f in findings]


@pytest.mark.parametrize(
    ("shape", "kind", "family"),
    [
        ((1, 4, 64, 64), "image", "SD1 / SD2 / SDXL"),
        ((2, 16, 128, 128), "image", "SD3 / Flux.1"),
        ((1, 128, 64, 64), "image", "Flux.2"),
        ((1, 16, 21, 60, 104), "video", "WAN 2.1 / HunyuanVideo / Kandinsky 5"),
        ((1, 48, 31, 44, 80), "video", "WAN 2.2 5B"),
        ((1, 32, 31, 44, 80), "video", "HunyuanVideo 1.5"),
        ((1, 12, 28, 60, 106), "video", "Mochi"),
        ((1, 128, 13, 16, 24), "video", "LTXV"),
        ((1, 7, 8, 8), "image", None),
        ((1, 64, 100), "other", None),
    ],
)
def test_kind_and_family_from_channels_and_rank(shape, kind, family):
    summary, details, findings = analyse_latent({"samples": torch.randn(*shape) * 0.5})
    assert summary["latent_type"] == kind
    assert summary["family"] == family
    assert summary["shape"] == list(shape)
    assert summary["n_channels"] == shape[1]
    assert summary["size_bytes"] == math.prod(shape) * 4
    assert summary["dtype"] == "float32" and summary["device"] == "cpu"
    assert summary["n_nan"] == 0 and summary["n_inf"] == 0
    assert "non_finite" not in codes(findings)
    if family is None and kind != "other":
        assert "unknown_family" in codes(findings)


def test_video_decoded_size_and_alternatives():
    _, details, _ = analyse_latent({"samples": torch.zeros(1, 16, 3, 8, 8)})
    samples = details["samples"]
    assert samples["frames"] == 3
    assert samples["decoded_size"] == {"height": 64, "width": 64, "frames": 9}  # WAN: 9 frames -> 3
    assert samples["family_alternatives"] == ["Cosmos"]


def test_empty_latent_image_is_all_zero_with_a_hint():
    summary, _, findings = analyse_latent({"samples": torch.zeros(1, 4, 8, 8)})
    assert summary["mean"] == 0 and summary["std"] == 0
    [finding] = [f for f in findings if f.code == "all_zero"]
    assert "EmptyLatentImage" in finding.message


def test_nan_and_inf_are_counted_and_an_error():
    samples = torch.zeros(1, 4, 4, 4)
    samples[0, 0, 0, :3] = float("nan")
    samples[0, 1, 0, 0] = float("inf")
    samples[0, 1, 0, 1] = 2.0
    summary, details, findings = analyse_latent({"samples": samples})
    assert summary["n_nan"] == 3 and summary["n_inf"] == 1
    assert details["samples"]["max"] == 2.0  # statistics cover finite values only
    [finding] = [f for f in findings if f.code == "non_finite"]
    assert finding.level == "error" and "3 NaN and 1 Inf" in finding.message


def test_noise_mask_batch_index_and_extras():
    latent = {
        "samples": torch.randn(2, 4, 8, 8),
        "noise_mask": torch.ones(2, 1, 64, 64) * 0.5,
        "batch_index": [3, 4],
        "type": "image",
        "custom": torch.zeros(3),
        "note": "x",
    }
    summary, details, _ = analyse_latent(latent)
    assert summary["has_noise_mask"] is True
    assert details["noise_mask"]["shape"] == [2, 1, 64, 64] and details["noise_mask"]["mean"] == 0.5
    assert details["batch_index"] == [3, 4] and details["n_batch_index"] == 2
    assert details["latent_type"] == "image"
    assert details["extras"] == {"custom": {"shape": [3], "dtype": "float32"}, "note": "str"}
    assert "noise mask" in headline_text("latent", summary)


def test_without_noise_mask():
    summary, details, _ = analyse_latent({"samples": torch.randn(1, 4, 8, 8)})
    assert summary["has_noise_mask"] is False and "noise_mask" not in details


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (None, "not_a_latent"),
        (torch.zeros(1, 4, 8, 8), "not_a_latent"),
        ("samples", "not_a_latent"),
        ({}, "no_samples"),
        ({"samples": [1, 2]}, "no_samples"),
        ({"samples": torch.zeros(0, 4, 8, 8)}, "empty"),
        ({"samples": torch.tensor(1.0)}, "unusual_rank"),
        ({"samples": torch.zeros(5)}, "unusual_rank"),
    ],
)
def test_bad_input_is_a_finding_not_a_crash(value, code):
    summary, details, findings = analyse_latent(value)
    assert code in codes(findings)
    assert isinstance(headline_text("latent", summary), str)


def test_huge_shape_is_metadata_only_without_allocation():
    huge = torch.zeros(1).expand(4, 16, 1000, 1000, 1000)  # 64 G elements, one real float
    summary, details, findings = analyse_latent({"samples": huge})
    assert summary["n_elements"] == 64 * 10**9
    assert summary["size_bytes"] == 256 * 10**9
    assert details["samples"]["stats_skipped"] is True and summary["mean"] is None
    assert "stats_skipped" in codes(findings)
    meta = torch.empty(1, 16, 21, 90, 160, device="meta")
    summary, _, _ = analyse_latent({"samples": meta})
    assert summary["device"] == "meta" and summary["latent_type"] == "video" and summary["mean"] is None


def test_nested_tensor_parts_are_each_described():
    class Nested:  # the shape of comfy.nested_tensor.NestedTensor
        is_nested = True

        def __init__(self, tensors):
            self.tensors = tensors

    summary, details, _ = analyse_latent(
        {"samples": Nested([torch.zeros(1, 128, 3, 4, 4), torch.ones(1, 8, 10)])}
    )
    assert details["nested"] is True and summary["n_parts"] == 2
    assert [part["kind"] for part in details["samples"]] == ["video", "other"]
    assert summary["size_bytes"] == (128 * 48 + 80) * 4


def test_half_precision_and_integer_latents():
    summary, _, _ = analyse_latent({"samples": torch.ones(1, 4, 2, 2, dtype=torch.float16)})
    assert summary["dtype"] == "float16" and summary["size_bytes"] == 32 and summary["mean"] == 1.0
    summary, _, _ = analyse_latent({"samples": torch.arange(16, dtype=torch.int64).reshape(1, 4, 2, 2)})
    assert summary["mean"] == 7.5


def test_analysis_does_not_change_or_keep_the_latent():
    samples = torch.randn(1, 4, 8, 8)
    before = samples.clone()
    latent = {"samples": samples}
    summary, details, _ = analyse_latent(latent)
    assert torch.equal(samples, before) and latent == {"samples": samples}

    def holds_tensor(value):
        if isinstance(value, torch.Tensor):
            return True
        if isinstance(value, dict):
            return any(holds_tensor(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return any(holds_tensor(v) for v in value)
        return False

    assert not holds_tensor(summary) and not holds_tensor(details)


finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False, width=32)
special = st.sampled_from([float("nan"), float("inf"), float("-inf")])


@settings(max_examples=60, deadline=None)
@given(
    rank=st.integers(min_value=3, max_value=5),
    channels=st.sampled_from([1, 4, 12, 16, 32, 48, 128]),
    values=st.lists(st.one_of(finite, special), min_size=1, max_size=64),
)
def test_property_counts_and_stats_match_torch(rank, channels, values):
    data = torch.tensor(values, dtype=torch.float32)
    shape = (1, channels) + (1,) * (rank - 3) + (len(values),)
    samples = data.repeat(channels).reshape(shape)
    summary, details, findings = analyse_latent({"samples": samples})
    n_nan = int(torch.isnan(samples).sum())
    n_inf = int(torch.isinf(samples).sum())
    assert summary["n_nan"] == n_nan and summary["n_inf"] == n_inf
    assert summary["latent_type"] == latent_mod.latent_kind(rank)
    assert ("non_finite" in codes(findings)) == bool(n_nan or n_inf)
    finite_values = samples[torch.isfinite(samples)].double()
    if finite_values.numel():
        assert summary["mean"] == pytest.approx(float(finite_values.mean()), rel=1e-6, abs=1e-3)
        assert details["samples"]["min"] == float(finite_values.min())
        assert details["samples"]["max"] == float(finite_values.max())
    else:
        assert summary["mean"] is None


# Pixels per latent pixel and frames per latent frame, from ComfyUI 0.8's latent formats and VAEs.
@pytest.mark.parametrize(
    ("name", "shape", "size"),
    [
        ("SD1 / SD2 / SDXL", [1, 4, 64, 96], {"height": 512, "width": 768}),
        ("SD3 / Flux.1", [1, 16, 64, 96], {"height": 512, "width": 768}),
        ("Flux.2", [1, 128, 64, 96], {"height": 1024, "width": 1536}),
        (
            "WAN 2.1 / HunyuanVideo / Kandinsky 5",
            [1, 16, 21, 60, 104],
            {"height": 480, "width": 832, "frames": 81},
        ),
        ("Cosmos", [1, 16, 16, 88, 160], {"height": 704, "width": 1280, "frames": 121}),
        ("WAN 2.2 5B", [1, 48, 31, 44, 80], {"height": 704, "width": 1280, "frames": 121}),
        ("HunyuanVideo 1.5", [1, 32, 31, 44, 80], {"height": 704, "width": 1280, "frames": 121}),
        ("LTXV", [1, 128, 13, 16, 24], {"height": 512, "width": 768, "frames": 97}),
        ("Mochi", [1, 12, 28, 60, 106], {"height": 480, "width": 848, "frames": 163}),
    ],
)
def test_each_family_decodes_to_its_known_size(name, shape, size):
    [family] = [f for f in latent_mod.FAMILIES if f.name == name]
    assert (family.channels, family.rank) == (shape[1], len(shape))
    assert decoded_size(shape, family) == size


def test_families_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        latent_mod.FAMILIES[0].channels = 8


def test_a_video_family_on_an_image_shape_gives_no_frames_and_empty_time_gives_zero_frames():
    wan = latent_mod.FAMILIES[3]
    assert decoded_size([1, 16, 8, 8], wan) == {"height": 64, "width": 64}
    _, details, findings = analyse_latent({"samples": torch.zeros(1, 16, 0, 8, 8)})
    assert codes(findings) == ["empty"]
    assert details["samples"]["decoded_size"] == {"height": 64, "width": 64, "frames": 0}


def test_a_latent_at_the_statistics_limit_gets_statistics_and_one_above_says_why_not(monkeypatch):
    monkeypatch.setattr(latent_mod, "STATS_MAX_ELEMENTS", 16)  # the finding's text
    monkeypatch.setattr(describe, "STATS_MAX_ELEMENTS", 16)  # the limit itself
    _, at_limit, findings = analyse_latent({"samples": torch.ones(1, 4, 2, 2)})
    assert at_limit["samples"]["stats_skipped"] is False and at_limit["samples"]["mean"] == 1.0
    assert "stats_skipped" not in codes(findings)
    _, above, findings = analyse_latent({"samples": torch.ones(1, 17)})
    assert above["samples"]["stats_skipped"] is True and above["samples"]["mean"] is None
    [finding] = [f for f in findings if f.code == "stats_skipped"]
    assert finding.message == "Statistics skipped: 17 elements is above the limit of 16."


def test_statistics_limit_is_128_mi_elements():
    assert latent_mod.STATS_MAX_ELEMENTS == describe.STATS_MAX_ELEMENTS == 2**27
    just_above = torch.zeros(1).expand(1, 1, 2**27 + 1)  # one real float
    _, details, _ = analyse_latent({"samples": just_above})
    assert details["samples"]["stats_skipped"] is True


@pytest.mark.parametrize(
    ("shape", "batch_size", "channels", "level"),
    [
        ((5,), 5, None, "warning"),
        ((2, 3), 2, 3, "warning"),
        ((2, 3, 4), 2, 3, "info"),
        ((1, 4, 1, 1, 2, 2), 1, 4, "info"),
    ],
)
def test_unusual_ranks_keep_batch_and_channels(shape, batch_size, channels, level):
    summary, details, findings = analyse_latent({"samples": torch.ones(*shape)})
    assert details["samples"]["batch_size"] == batch_size
    assert summary["n_channels"] == channels
    [finding] = findings
    assert (finding.code, finding.level) == ("unusual_rank", level)
    assert summary["latent_type"] == "other" and summary["family"] is None


def test_known_image_and_video_latents_have_no_findings():
    for shape in ((1, 4, 8, 8), (1, 16, 3, 8, 8)):
        summary, _, findings = analyse_latent({"samples": torch.ones(*shape)})
        assert findings == [] and summary["family"] is not None


def test_unknown_family_message_names_image_or_video():
    _, _, [image] = analyse_latent({"samples": torch.ones(1, 7, 8, 8)})
    assert image.message == "No known latent family has 7 channels as an image latent."
    _, _, [video] = analyse_latent({"samples": torch.ones(1, 7, 2, 8, 8)})
    assert video.message == "No known latent family has 7 channels as a video latent."


def test_all_zero_needs_both_min_and_max_zero_and_the_hint_is_for_4_channel_images_only():
    half = torch.zeros(1, 4, 8, 8)
    half[0, 0, 0, 0] = 1.0
    assert "all_zero" not in codes(analyse_latent({"samples": half})[2])
    negative = torch.zeros(1, 4, 8, 8)
    negative[0, 0, 0, 0] = -1.0
    assert "all_zero" not in codes(analyse_latent({"samples": negative})[2])
    [sixteen] = analyse_latent({"samples": torch.zeros(1, 16, 8, 8)})[2]
    assert sixteen.message == "All values are zero: an empty latent."
    [video] = [f for f in analyse_latent({"samples": torch.zeros(1, 4, 2, 8, 8)})[2] if f.code == "all_zero"]
    assert video.message == "All values are zero: an empty latent."
    [four] = analyse_latent({"samples": torch.zeros(1, 4, 8, 8)})[2]
    assert "EmptyLatentImage" in four.message


def test_nested_needs_the_flag_and_a_list_of_tensors():
    class Obj:
        def __init__(self, **attributes):
            self.__dict__.update(attributes)

    assert is_nested(Obj(is_nested=True, tensors=[torch.zeros(1)])) is True
    assert is_nested(Obj(is_nested=True, tensors=None)) is False
    assert is_nested(Obj(tensors=[torch.zeros(1)])) is False
    assert is_nested(Obj(is_nested=1, tensors=[torch.zeros(1)])) is False


def test_a_long_batch_index_is_cut_to_64_entries_and_a_bad_one_to_200_characters():
    _, details, _ = analyse_latent({"samples": torch.zeros(1, 4, 8, 8), "batch_index": list(range(100))})
    assert details["batch_index"] == list(range(64)) and details["n_batch_index"] == 100
    _, details, findings = analyse_latent({"samples": torch.zeros(1, 4, 8, 8), "batch_index": "x" * 300})
    assert details["batch_index"] == "x" * 200 and "bad_batch_index" in codes(findings)

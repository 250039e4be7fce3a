"""monitors/latent/analysis.py with known values at each boundary the first tests left open
(scripts/mutate.py survivors): every family's decoded size, the statistics limit, rank edges,
finding levels and messages, nested detection, truncation of long inputs."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from monitors.latent import analysis as latent_mod
from monitors.latent.analysis import analyse_latent, decoded_size, is_nested
from monitors.numeric import describe


def codes(findings):
    return [f.code for f in findings]


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


def test_statistics_limit_is_inclusive(monkeypatch):
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


def test_long_batch_index_is_cut_to_64_and_a_bad_one_to_200_characters():
    _, details, _ = analyse_latent({"samples": torch.zeros(1, 4, 8, 8), "batch_index": list(range(100))})
    assert details["batch_index"] == list(range(64)) and details["n_batch_index"] == 100
    _, details, findings = analyse_latent({"samples": torch.zeros(1, 4, 8, 8), "batch_index": "x" * 300})
    assert details["batch_index"] == "x" * 200 and "bad_batch_index" in codes(findings)

"""The conditioning step traces the negative side's prompt text when a negative is connected."""

import pytest

torch = pytest.importorskip("torch")

from monitors.conditioning.report import build_conditioning_step  # noqa: E402

PROMPT = {
    "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "x.safetensors"}},
    "4": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["1", 1], "text": "a photo of a cat"}},
    "5": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["1", 1], "text": "blurry"}},
    "9": {"class_type": "Monitor", "inputs": {"positive": ["4", 0], "negative": ["5", 0]}},
}


def test_both_sides_traced_to_their_text():
    positive = [[torch.randn(1, 77, 768), {}]]
    negative = [[torch.randn(1, 77, 768), {}]]
    step = build_conditioning_step("9", PROMPT, positive, negative)
    assert step.summary["negative_connected"] is True
    (pos,) = step.details["positive"]["encoders"]
    (neg,) = step.details["negative"]["encoders"]
    assert (pos["node_id"], [t["text"] for t in pos["texts"]]) == ("4", ["a photo of a cat"])
    assert (neg["node_id"], [t["text"] for t in neg["texts"]]) == ("5", ["blurry"])

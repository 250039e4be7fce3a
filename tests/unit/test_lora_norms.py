"""Cheap exact norms of LoRA / LoHa / LoKr / diff changes against materialised references."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from monitors.lora.analysis import analyse_entry
from monitors.lora.norms import frobenius_norm, kron_norm, loha_norm, lora_norm

REL = 1e-4


class Adapter:
    """Duck-typed stand-in for a ComfyUI weight adapter (`.name`, `.weights`)."""

    def __init__(self, name, weights):
        self.name = name
        self.weights = weights
        self.loaded_keys = set()


def rand(*shape, seed=0, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def close(value, reference):
    assert value == pytest.approx(reference, rel=REL), (value, reference)


def test_frobenius_norm_matches_torch_and_is_chunked(monkeypatch):
    import monitors.lora.norms as norms

    t = rand(37, 41, seed=1)
    close(frobenius_norm(t), float(torch.linalg.vector_norm(t.double())))
    monkeypatch.setattr(norms, "CHUNK_ELEMENTS", 100)  # many chunks: same answer
    close(frobenius_norm(t), float(torch.linalg.vector_norm(t.double())))
    assert frobenius_norm(torch.zeros(0)) == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_lora_norm_linear(dtype):
    up, down = rand(48, 8, seed=1, dtype=dtype), rand(8, 96, seed=2, dtype=dtype)
    reference = torch.linalg.vector_norm(up.double() @ down.double())
    close(lora_norm(up, down), float(reference))


def test_lora_norm_conv_factors_are_flattened():
    up, down = rand(16, 4, 1, 1, seed=3), rand(4, 8, 3, 3, seed=4)
    reference = torch.linalg.vector_norm(up.flatten(1).double() @ down.flatten(1).double())
    close(lora_norm(up, down), float(reference))


def test_lora_norm_rejects_mismatched_ranks():
    with pytest.raises(ValueError):
        lora_norm(rand(4, 3), rand(2, 5))


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 40),
    r=st.integers(1, 12),
    seed=st.integers(0, 10_000),
)
def test_lora_norm_any_shape(m, n, r, seed):
    up, down = rand(m, r, seed=seed), rand(r, n, seed=seed + 1)
    close(lora_norm(up, down), float(torch.linalg.vector_norm(up.double() @ down.double())))


@pytest.mark.parametrize(
    "m, n, r1, r2",
    [(64, 48, 4, 4), (32, 16, 3, 5), (6, 5, 8, 8)],  # the last one takes the row-block path
)
def test_loha_norm(m, n, r1, r2):
    w1a, w1b = rand(m, r1, seed=1), rand(r1, n, seed=2)
    w2a, w2b = rand(m, r2, seed=3), rand(r2, n, seed=4)
    reference = torch.linalg.vector_norm((w1a.double() @ w1b.double()) * (w2a.double() @ w2b.double()))
    close(loha_norm(w1a, w1b, w2a, w2b), float(reference))


def test_loha_row_blocks_cover_every_row(monkeypatch):
    import monitors.lora.norms as norms

    monkeypatch.setattr(norms, "CHUNK_ELEMENTS", 7)  # one row per block
    w1a, w1b, w2a, w2b = rand(5, 9, seed=1), rand(9, 4, seed=2), rand(5, 9, seed=3), rand(9, 4, seed=4)
    reference = torch.linalg.vector_norm((w1a.double() @ w1b.double()) * (w2a.double() @ w2b.double()))
    close(loha_norm(w1a, w1b, w2a, w2b), float(reference))


def test_kron_norm():
    a, b = rand(3, 4, seed=1), rand(5, 2, seed=2)
    close(kron_norm(frobenius_norm(a), frobenius_norm(b)), float(torch.linalg.vector_norm(torch.kron(a, b))))


# -- whole entries, with ComfyUI's scale rules (notes 2.1) -----------------------------------------


def entry(value, strength=1.0, strength_model=1.0, offset=None, function=None):
    return (strength, value, strength_model, offset, function)


def test_lora_entry_with_alpha_and_strength():
    up, down = rand(32, 4, seed=1), rand(4, 20, seed=2)
    row = analyse_entry(entry(Adapter("lora", (up, down, 2.0, None, None, None)), strength=0.7))
    assert (row["type"], row["rank"], row["alpha"]) == ("lora", 4, 2.0)
    assert row["scale"] == pytest.approx(0.5) and row["effective_scale"] == pytest.approx(0.35)
    reference = torch.linalg.vector_norm(0.7 * (2.0 / 4) * (up.double() @ down.double()))
    close(row["delta_norm"], float(reference))
    assert row["patch_bytes"] == (32 * 4 + 4 * 20) * 4 and row["patch_device"] == "cpu"


def test_lora_entry_without_alpha_scales_by_one_and_negative_strength():
    up, down = rand(8, 2, seed=5), rand(2, 8, seed=6)
    row = analyse_entry(entry(Adapter("lora", (up, down, None, None, None, None)), strength=-1.5))
    assert row["scale"] == 1.0 and row["effective_scale"] == -1.5
    close(row["delta_norm"], float(torch.linalg.vector_norm(1.5 * (up.double() @ down.double()))))


def test_loha_entry():
    w1a, w1b, w2a, w2b = rand(12, 3, seed=1), rand(3, 10, seed=2), rand(12, 3, seed=3), rand(3, 10, seed=4)
    row = analyse_entry(entry(Adapter("loha", (w1a, w1b, 6.0, w2a, w2b, None, None, None)), strength=0.5))
    assert (row["type"], row["rank"], row["scale"]) == ("loha", 3, 2.0)
    reference = (
        0.5 * 2.0 * torch.linalg.vector_norm((w1a.double() @ w1b.double()) * (w2a.double() @ w2b.double()))
    )
    close(row["delta_norm"], float(reference))


@pytest.mark.parametrize("factorised", ["none", "w1", "w2", "both"])
def test_lokr_entry(factorised):
    w1, w2 = rand(4, 6, seed=1), rand(8, 5, seed=2)
    w1_a, w1_b = rand(4, 2, seed=3), rand(2, 6, seed=4)
    w2_a, w2_b = rand(8, 3, seed=5), rand(3, 5, seed=6)
    weights = [w1, w2, 12.0, None, None, None, None, None, None]
    dim = None
    if factorised in ("w1", "both"):
        weights[0], weights[3], weights[4], dim = None, w1_a, w1_b, 2
    if factorised in ("w2", "both"):
        weights[1], weights[5], weights[6], dim = None, w2_a, w2_b, 3
    row = analyse_entry(entry(Adapter("lokr", tuple(weights)), strength=0.8))
    left = w1 if weights[0] is not None else w1_a @ w1_b
    right = w2 if weights[1] is not None else w2_a @ w2_b
    scale = 12.0 / dim if dim else 1.0
    assert row["rank"] == dim and row["scale"] == pytest.approx(scale)
    reference = 0.8 * scale * torch.linalg.vector_norm(torch.kron(left.double(), right.double()))
    close(row["delta_norm"], float(reference))


@pytest.mark.parametrize(
    "value",
    [lambda d: ("diff", (d,)), lambda d: (d,), lambda d: ("diff", (d, {"pad_weight": True}))],
    ids=["diff", "bare", "padded"],
)
def test_diff_entry(value):
    diff = rand(10, 7, seed=9)
    row = analyse_entry(entry(value(diff), strength=0.25))
    assert row["type"] == "diff" and row["rank"] is None
    close(row["delta_norm"], 0.25 * float(torch.linalg.vector_norm(diff.double())))


@pytest.mark.parametrize(
    "value, kind, reason",
    [
        (Adapter("lora", (rand(4, 2), rand(2, 4), 1.0, None, torch.ones(4), None)), "lora", "DoRA"),
        (
            Adapter("lora", (rand(4, 2, 1, 1), rand(2, 2, 1, 1), 1.0, rand(2, 2, 3, 3), None, None)),
            "lora",
            "Tucker",
        ),
        (
            Adapter(
                "loha",
                (
                    rand(4, 2),
                    rand(2, 4),
                    1.0,
                    rand(4, 2),
                    rand(2, 4),
                    rand(2, 2, 3, 3),
                    rand(2, 2, 3, 3),
                    None,
                ),
            ),
            "loha",
            "Tucker",
        ),
        (
            Adapter(
                "lokr",
                (rand(2, 2), None, 1.0, None, None, rand(2, 2), rand(2, 2, 3, 3), rand(2, 2, 3, 3), None),
            ),
            "lokr",
            "Tucker",
        ),
        (Adapter("glora", (rand(2, 4), rand(4, 2), rand(4, 2), rand(2, 4), 1.0, None)), "glora", "GLoRA"),
        (Adapter("oft", (rand(2, 2, 2), None, 0.0, None)), "oft", "rotation"),
        (Adapter("boft", (rand(2, 2, 2, 2), None, 0.0, None)), "boft", "rotation"),
        (("set", (rand(4, 4),)), "set", "replaced"),
        (("model_as_lora", (rand(4, 4),)), "model_as_lora", "base weight"),
        ([(rand(4, 4), lambda a, **k: a), entry(("diff", (rand(4, 4),)))], "merge", "merged"),
        (Adapter("mystery", ()), "unknown", "unknown"),
        (object(), "unknown", "unknown"),
    ],
)
def test_entries_without_a_cheap_norm_say_why(value, kind, reason):
    row = analyse_entry(entry(value, strength=0.5))
    assert row["type"] == kind
    assert row["delta_norm"] is None
    assert reason in row["delta_norm_unavailable"]


def test_malformed_patch_is_reported_on_its_row():
    row = analyse_entry(entry(Adapter("lora", (rand(4, 2), rand(3, 4), 1.0, None, None, None))))
    assert row["type"] == "lora" and row["delta_norm"] is None
    assert row["delta_norm_unavailable"].startswith("unreadable patch: ValueError: rank mismatch")
    row = analyse_entry(entry(Adapter("lokr", (None, None, 1.0))))
    assert row["delta_norm"] is None and row["delta_norm_unavailable"].startswith("unreadable patch")


def test_strength_zero_is_no_change_even_for_dora():
    dora = Adapter("lora", (rand(4, 2), rand(2, 4), 1.0, None, torch.ones(4), None))
    for value in (dora, ("diff", (rand(4, 4),))):
        row = analyse_entry(entry(value, strength=0.0))
        assert row["delta_norm"] == 0.0 and row["delta_norm_unavailable"] is None


def test_function_or_strength_model_make_the_norm_unknown():
    value = Adapter("lora", (rand(4, 2), rand(2, 4), None, None, None, None))
    assert "function" in analyse_entry(entry(value, function=lambda a: a))["delta_norm_unavailable"]
    row = analyse_entry(entry(value, strength_model=0.5))
    assert row["delta_norm"] is None and "base_weight_scale" in row["delta_norm_unavailable"]
    # ComfyUI's entry-level strength_model has its own name: strength_model is the loader's only
    assert row["base_weight_scale"] == 0.5 and "strength_model" not in row


def test_rows_are_plain_data():
    row = analyse_entry(
        entry(Adapter("lora", (rand(4, 2), rand(2, 4), 1.0, None, None, None)), offset=(0, 1, 2))
    )
    assert row["offset"] == [0, 1, 2]
    for value in row.values():
        assert value is None or isinstance(value, (str, int, float, list)), value
    assert math.isfinite(row["delta_norm"])

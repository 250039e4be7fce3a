"""Which patches ComfyUI applies (shape rules, leaf parameters) and the exact change of a weight over
all its patches, against materialised references and hand-computed values (issue 18)."""

import math

import pytest
import torch

from monitors.lora.patches import delta_shape_mismatch
from monitors.lora.weights import (
    cheap_linear,
    leaf_parameter_rule,
    materialised_change,
    summed_linear_norm,
    weight_rows,
    weight_total,
)

from .test_lora_norms import Adapter, rand


def lora(up, down, alpha=None, mid=None, dora=None, reshape=None):
    return Adapter("lora", (up, down, alpha, mid, dora, reshape))


def entry(value, strength=1.0, strength_model=1.0, offset=None, function=None):
    return (strength, value, strength_model, offset, function)


def change_of(entry_):
    """The float64 change one entry makes: ComfyUI's rules for lora (alpha / rank) and diff."""
    strength, value, *_ = entry_
    if isinstance(value, Adapter):
        up, down, alpha = value.weights[:3]
        scale = alpha / down.shape[0] if alpha is not None else 1.0
        return (
            strength
            * scale
            * (up.double().reshape(up.shape[0], -1) @ down.double().reshape(down.shape[0], -1))
        )
    tensor = value[0] if len(value) == 1 else value[1][0]
    return strength * tensor.double()


def calculate(entries, weight, key):
    """A stand-in for ComfyUI's calculate_weight: diff/lora add their change, set replaces."""
    for strength, value, _strength_model, _offset, _function in entries:
        if isinstance(value, tuple) and len(value) == 2 and value[0] == "set":
            weight = value[1][0].to(weight.dtype).clone()
        else:
            weight = weight + change_of((strength, value)).reshape(weight.shape).to(weight.dtype)
    return weight


def norm(t) -> float:
    return float(torch.linalg.vector_norm(t.double()))


def row(type_="lora", delta=1.0, scale=1.0, applied=True, linear=True, offset=None, base=None, **extra):
    return {
        "type": type_,
        "delta_norm": delta,
        "effective_scale": scale,
        "applied": applied,
        "linear": linear,
        "offset": offset,
        "base_norm": base,
        "block": "b",
        **extra,
    }


# -- shapes ComfyUI can apply ---------------------------------------------------------------------


def test_lora_shape_rules():
    up, down = torch.zeros(6, 2), torch.zeros(2, 5)
    assert delta_shape_mismatch("lora", lora(up, down), (6, 5)) is None
    # the same number of elements in another layout: ComfyUI reshapes, it applies
    assert delta_shape_mismatch("lora", lora(up, down), (5, 6)) is None
    assert delta_shape_mismatch("lora", lora(up, down), (6, 4)) == "file makes [6, 5], model weight is [6, 4]"
    assert (
        delta_shape_mismatch("lora", lora(torch.zeros(6, 3), down), (6, 5))
        == "up [6, 3] and down [2, 5] do not multiply"
    )
    # conv factors: up [out, r, 1, 1], down [r, in, kh, kw]
    conv_up, conv_down = torch.zeros(4, 2, 1, 1), torch.zeros(2, 3, 3, 3)
    assert delta_shape_mismatch("lora", lora(conv_up, conv_down), (4, 3, 3, 3)) is None
    assert (
        delta_shape_mismatch("lora", lora(conv_up, conv_down), (4, 3, 1, 1))
        == "file makes [4, 27], model weight is [4, 3, 1, 1]"
    )
    # padded and Tucker forms follow other rules: each alone is left to ComfyUI
    bad = (7, 7)
    assert delta_shape_mismatch("lora", lora(up, down, mid=torch.zeros(2, 2)), bad) is None
    assert delta_shape_mismatch("lora", lora(up, down, reshape=[7, 7]), bad) is None
    assert delta_shape_mismatch("lora", Adapter("lora", (up, down)), (6, 5)) is None  # short tuple


def test_loha_shape_rules():
    def loha(m1, n1, m2, n2, t1=None, r=3):
        return Adapter(
            "loha", (torch.zeros(m1, r), torch.zeros(r, n1), 1.0, torch.zeros(m2, r), torch.zeros(r, n2), t1)
        )

    assert delta_shape_mismatch("loha", loha(6, 5, 6, 5), (6, 5)) is None
    assert delta_shape_mismatch("loha", loha(6, 5, 6, 5), (5, 6)) is None  # same size
    assert (
        delta_shape_mismatch("loha", loha(6, 5, 6, 5), (6, 4))
        == "file makes [6, 5] x [6, 5], model weight is [6, 4]"
    )
    # the two Hadamard factors disagree, whatever the model weight
    assert (
        delta_shape_mismatch("loha", loha(6, 5, 5, 6), (6, 5))
        == "file makes [6, 5] x [5, 6], model weight is [6, 5]"
    )
    assert delta_shape_mismatch("loha", loha(6, 5, 6, 4), (6, 5)) is not None
    assert delta_shape_mismatch("loha", loha(6, 5, 7, 5), (6, 5)) is not None
    assert delta_shape_mismatch("loha", loha(6, 5, 5, 6, t1=torch.zeros(3, 3)), (6, 5)) is None


def test_lokr_shape_rules():
    w1, w2 = torch.zeros(2, 3), torch.zeros(4, 5)
    full = Adapter("lokr", (w1, w2, 1.0, None, None, None, None, None))
    assert delta_shape_mismatch("lokr", full, (8, 15)) is None
    assert delta_shape_mismatch("lokr", full, (8, 14)) == "file makes 120 elements, model weight is [8, 14]"
    # factorised sides: w1 = w1_a [2, r] @ w1_b [r, 3], w2 = w2_a [4, r] @ w2_b [r, 5, 1, 1]
    factored = Adapter(
        "lokr",
        (
            None,
            None,
            1.0,
            torch.zeros(2, 7),
            torch.zeros(7, 3),
            torch.zeros(4, 6),
            torch.zeros(6, 5, 1, 1),
            None,
        ),
    )
    assert delta_shape_mismatch("lokr", factored, (8, 15)) is None
    assert (
        delta_shape_mismatch("lokr", factored, (8, 16)) == "file makes 120 elements, model weight is [8, 16]"
    )
    tucker = Adapter(
        "lokr", (w1, None, 1.0, None, None, torch.zeros(4, 6), torch.zeros(6, 5), torch.zeros(1))
    )
    assert delta_shape_mismatch("lokr", tucker, (1, 1)) is None


def test_oft_and_boft_shape_rules():
    oft = Adapter("oft", (torch.zeros(4, 2, 2), None, 1.0, None))  # 4 blocks of 2: 8 rows
    assert delta_shape_mismatch("oft", oft, (8, 3)) is None
    assert delta_shape_mismatch("oft", oft, (3, 8)) == "file blocks cover 8 rows, model weight is [3, 8]"
    assert delta_shape_mismatch("oft", oft, ()) == "file blocks cover 8 rows, model weight is []"
    boft = Adapter("boft", (torch.zeros(2, 3, 4, 4), None, 1.0, None))  # 3 blocks of 4: 12 rows
    assert delta_shape_mismatch("boft", boft, (12, 5)) is None
    assert delta_shape_mismatch("boft", boft, (6, 5)) == "file blocks cover 12 rows, model weight is [6, 5]"
    no_alpha = Adapter("boft", (torch.zeros(2, 3, 4, 4), None, None, 1.0))
    assert delta_shape_mismatch("boft", no_alpha, (12, 5)) == (
        "BOFT without alpha: ComfyUI's calculate_weight fails on it"
    )
    assert (
        delta_shape_mismatch("oft", Adapter("oft", (torch.zeros(4, 2, 2), None, None, None)), (8, 3)) is None
    )


def test_diff_shape_rules():
    d = torch.zeros(3, 4)
    assert delta_shape_mismatch("diff", ("diff", (d,)), (3, 4)) is None
    assert delta_shape_mismatch("diff", (d,), (3, 4)) is None
    assert delta_shape_mismatch("diff", ("diff", (d,)), (4, 3)) == "file [3, 4], model weight is [4, 3]"
    assert delta_shape_mismatch("diff", (d,), (4, 3)) == "file [3, 4], model weight is [4, 3]"
    # pad_weight: ComfyUI pads the weight to the diff, any shape applies
    assert delta_shape_mismatch("diff", ("diff", (d, {"pad_weight": True})), (2, 2)) is None
    assert delta_shape_mismatch("diff", ("diff", (d, "not a mapping")), (2, 2)) is not None
    assert delta_shape_mismatch("set", ("set", (d,)), (9, 9)) is None
    assert delta_shape_mismatch("glora", Adapter("glora", ()), (9, 9)) is None


def test_leaf_parameter_rule():
    root = torch.nn.Module()
    root.leaf = torch.nn.Linear(2, 3)
    root.leaf.register_buffer("scale", torch.ones(3))
    root.parent = torch.nn.Linear(2, 3)
    root.parent.child = torch.nn.Linear(3, 3)
    root.empty_children = torch.nn.Linear(2, 2)
    root.empty_children.act = torch.nn.ReLU()  # a child without parameters: still a leaf for the loader
    rule = leaf_parameter_rule(root)
    assert rule("leaf.weight") is None
    assert rule("empty_children.weight") is None
    assert rule("leaf.scale") == "not a parameter: ComfyUI never patches it"
    assert rule("leaf.missing") == "not a parameter: ComfyUI never patches it"
    assert rule("parent.weight") == "parameter of a module with child modules: ComfyUI's loader skips it"
    assert rule("parent.child.weight") is None
    assert rule("nowhere.weight") is None  # no such module: left to ComfyUI
    assert rule("weight") is None  # no module path
    assert leaf_parameter_rule(object())("leaf.weight") is None


# -- the exact norm of a weight's summed change ---------------------------------------------------


def test_cheap_linear_needs_each_condition():
    assert cheap_linear(row("lora")) and cheap_linear(row("diff"))
    assert not cheap_linear(row("loha"))
    assert not cheap_linear(row("lora", delta=None))
    assert not cheap_linear(row("lora", linear=False))
    assert not cheap_linear(row("lora", offset=[0, 0, 2]))
    no_linear = row("lora")
    del no_linear["linear"]
    assert not cheap_linear(no_linear)


def test_summed_norm_of_two_loras_of_the_same_layout():
    a = entry(lora(rand(8, 2, seed=1), rand(2, 12, seed=2), alpha=1.0), strength=0.5)
    b = entry(lora(rand(8, 3, seed=3), rand(3, 12, seed=4)), strength=-2.0)
    rows = [row(scale=0.5 * 0.5), row(scale=-2.0)]
    exact = norm(change_of(a) + change_of(b))
    assert summed_linear_norm(rows, [a, b]) == pytest.approx(exact, rel=1e-12)


def test_summed_norm_of_loras_of_different_layouts_and_diffs():
    # [8, 2] @ [2, 12] and [4, 2] @ [2, 24] make 96 elements each: ComfyUI reshapes both to the weight
    a = entry(lora(rand(8, 2, seed=1), rand(2, 12, seed=2)), strength=0.7)
    b = entry(lora(rand(4, 2, seed=3), rand(2, 24, seed=4)), strength=1.3)
    d = entry(("diff", (rand(8, 12, seed=5),)), strength=-0.4)
    bare = entry((rand(8, 12, seed=6),), strength=0.9)
    changes = [change_of(e).reshape(-1) for e in (a, b, d, bare)]
    rows = [row(scale=0.7), row(scale=1.3), row("diff", scale=-0.4), row("diff", scale=0.9)]
    assert summed_linear_norm(rows, [a, b, d, bare]) == pytest.approx(norm(sum(changes)), rel=1e-12)
    assert summed_linear_norm(rows[2:], [d, bare]) == pytest.approx(norm(changes[2] + changes[3]), rel=1e-12)
    # a diff first, then a LoRA: the mixed inner product either way round
    assert summed_linear_norm([rows[2], rows[0]], [d, a]) == pytest.approx(
        norm(changes[2] + changes[0]), rel=1e-12
    )
    assert summed_linear_norm([rows[0], rows[2]], [a, d]) == pytest.approx(
        norm(changes[0] + changes[2]), rel=1e-12
    )


class Products(torch.Tensor):
    """A tensor that records the shape of every matrix product made from it."""

    shapes: list = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs or {})
        if func in (torch.Tensor.__matmul__, torch.matmul, torch.Tensor.matmul):
            cls.shapes.append(tuple(out.shape))
        return out


def test_loras_of_one_layout_never_build_the_m_x_n_change():
    a = entry(lora(rand(8, 2, seed=1).as_subclass(Products), rand(2, 12, seed=2).as_subclass(Products)), 0.5)
    b = entry(lora(rand(8, 3, seed=3).as_subclass(Products), rand(3, 12, seed=4).as_subclass(Products)), 1.5)
    Products.shapes = []
    total = summed_linear_norm([row(scale=0.5), row(scale=1.5)], [a, b])
    made = list(Products.shapes)
    assert total == pytest.approx(norm(change_of(a) + change_of(b)), rel=1e-12)
    # rank x rank Gram products only (2 x 2, 2 x 3, 3 x 3), never an 8 x 12 change
    assert made and max(r * c for r, c in made) <= 9
    Products.shapes = []
    c = entry(lora(rand(4, 2, seed=5).as_subclass(Products), rand(2, 24, seed=6).as_subclass(Products)), 1.0)
    summed_linear_norm([row(scale=0.5), row()], [a, c])
    assert (8, 12) in Products.shapes and (4, 24) in Products.shapes  # other layouts: materialised


def test_summed_norm_by_hand():
    # two diffs of ones on a 2 x 2 weight, strengths 0.25 and 0.5: a change of 0.75 everywhere,
    # norm 1.5; minus one another: 0.25 everywhere, norm 0.5 (below 1: no floor at 1)
    ones = torch.ones(2, 2)
    a, b = entry(("diff", (ones,)), 0.25), entry(("diff", (ones,)), 0.5)
    assert summed_linear_norm([row("diff", scale=0.25), row("diff", scale=0.5)], [a, b]) == pytest.approx(1.5)
    assert summed_linear_norm([row("diff", scale=0.25), row("diff", scale=-0.5)], [a, b]) == pytest.approx(
        0.5
    )
    # a rank-1 LoRA of ones [2, 1] @ [1, 2] with a diff of ones: (1 + 1) everywhere, norm 4
    l1 = entry(lora(torch.ones(2, 1), torch.ones(1, 2)))
    assert summed_linear_norm([row(), row("diff")], [l1, a]) == pytest.approx(4.0)
    # cancelling exactly: 0, never the root of a negative rounding residue
    assert summed_linear_norm([row("diff", scale=1.0), row("diff", scale=-1.0)], [a, a]) == 0.0
    assert summed_linear_norm([row(scale=None), row()], [l1, l1]) is None
    with pytest.raises(ValueError):
        summed_linear_norm([row()], [l1, l1])


def test_materialised_change_is_the_framework_arithmetic():
    weight = rand(3, 4, seed=1)
    d = entry(("diff", (rand(3, 4, seed=2),)), strength=2.0)
    assert materialised_change(calculate, [d], weight, "k") == pytest.approx(norm(change_of(d)), rel=1e-6)
    # set: the change is new - old
    target = rand(3, 4, seed=3)
    assert materialised_change(calculate, [entry(("set", (target,)))], weight, "k") == pytest.approx(
        norm(target.double() - weight.double()), rel=1e-6
    )


def test_weight_total_of_nothing_applied_is_zero():
    assert weight_total("k", [row(applied=False)], [object()], None, None, None, {}) == (0.0, None)
    assert weight_total("k", [], [], None, None, None, {}) == (0.0, None)


def test_weight_total_of_one_cheap_patch_is_its_own_norm():
    # the row's own figure is taken as it is (7.0 is not the tensors' norm: no recomputation)
    one = entry(lora(torch.ones(2, 1), torch.ones(1, 2)))
    assert weight_total("k", [row(delta=7.0)], [one], None, None, None, {}) == (7.0, None)
    # a non-linear type alone is its own norm too: no base weight needed
    assert weight_total("k", [row("loha", delta=3.0)], [one], None, None, None, {}) == (3.0, None)
    # the applied one among applied and not applied
    rows = [row(delta=5.0, applied=False), row(delta=7.0)]
    assert weight_total("k", rows, [one, one], None, None, None, {}) == (7.0, None)


def test_weight_total_of_cheap_patches_sums_the_changes():
    ones = torch.ones(2, 2)
    a, b = entry(("diff", (ones,)), 0.25), entry(("diff", (ones,)), 0.5)
    rows = [row("diff", delta=0.5, scale=0.25), row("diff", delta=1.0, scale=0.5)]
    assert weight_total("k", rows, [a, b], None, None, None, {}) == (pytest.approx(1.5), None)


def test_weight_total_caches_by_key_and_entries():
    a = entry(("diff", (torch.ones(2, 2),)), 0.25)
    cache = {("k", (id(a),)): ("cached", None)}
    assert weight_total("k", [row("diff", delta=0.5)], [a], None, None, None, cache) == ("cached", None)
    fresh: dict = {}
    assert weight_total("k", [row("diff", delta=0.5)], [a], None, None, None, fresh) == (0.5, None)
    assert fresh == {("k", (id(a),)): (0.5, None)}


def test_weight_total_needs_the_weight_for_a_non_linear_mix_or_an_unknown_norm():
    one = entry(lora(torch.ones(2, 1), torch.ones(1, 2)))
    no_calc = (None, "the change depends on the base weight (no framework arithmetic given)")
    mixed = [row(delta=2.0), row("loha", delta=3.0)]
    assert weight_total("k", mixed, [one, one], None, None, None, {}) == no_calc
    assert weight_total("k", [row(delta=None)], [one], None, None, None, {}) == no_calc
    offset = [row(delta=2.0), row(delta=2.0, offset=[0, 0, 1])]
    assert weight_total("k", offset, [one, one], None, None, None, {}) == no_calc


def test_materialise_fills_unknown_rows_and_spends_the_budget():
    weight = rand(3, 4, seed=1)
    d1 = entry(("diff", (rand(3, 4, seed=2),)), 1.5)
    target = rand(3, 4, seed=3)
    s = entry(("set", (target,)))
    rows = [row("diff", delta=99.0, scale=1.5), row("set", delta=None, linear=False)]
    budget = [12]  # exactly the weight's size: enough
    total, reason = weight_total("k", rows, [d1, s], weight, calculate, budget, {})
    assert reason is None and budget == [0]
    # the set replaces whatever came before it: the change is target - weight
    assert total == pytest.approx(norm(target.double() - weight.double()), rel=1e-6)
    assert rows[1]["delta_norm"] == pytest.approx(norm(target.double() - weight.double()), rel=1e-6)
    assert rows[1]["delta_norm_unavailable"] is None
    assert rows[1]["delta_norm_method"] == "patched copy of the base weight"
    assert rows[0]["delta_norm"] == 99.0 and "delta_norm_method" not in rows[0]  # known: kept
    # one patch needing the weight: its own materialised norm is the total
    single = [row("set", delta=None, linear=False)]
    assert weight_total("k", single, [s], weight, calculate, None, {}) == (
        pytest.approx(norm(target.double() - weight.double()), rel=1e-6),
        None,
    )


def test_one_patch_needing_the_weight_is_patched_once():
    calls = []

    def counting(entries, weight, key):
        calls.append(len(entries))
        return calculate(entries, weight, key)

    s = entry(("set", (torch.full((2, 2), 3.0),)))
    total, _ = weight_total("k", [row("set", delta=None)], [s], torch.zeros(2, 2), counting, None, {})
    assert total == pytest.approx(6.0) and calls == [1]
    calls.clear()
    d = entry(("diff", (torch.ones(2, 2),)))
    rows = [row("set", delta=None), row("diff", delta=2.0)]
    total, _ = weight_total("k", rows, [s, d], torch.zeros(2, 2), counting, None, {})
    assert total == pytest.approx(8.0) and calls == [1, 2]  # the set alone, then both together
    with pytest.raises(ValueError):
        weight_total("k", [row(), row()], [s], None, None, None, {})


def test_materialise_refuses_what_it_cannot_read():
    s = entry(("set", (torch.ones(3, 4),)))
    unknown = [row("set", delta=None)]
    assert weight_total("k", unknown, [s], None, calculate, None, {}) == (None, "base weight not readable")
    meta = torch.empty(3, 4, device="meta")
    assert weight_total("k", [row("set", delta=None)], [s], meta, calculate, None, {}) == (
        None,
        "base weight not readable",
    )
    budget = [11]  # one element short
    assert weight_total("k", [row("set", delta=None)], [s], torch.zeros(3, 4), calculate, budget, {}) == (
        None,
        "skipped: base-weight read budget spent",
    )
    assert budget == [11]

    def broken(entries, weight, key):
        raise RuntimeError("boom")

    assert weight_total("k", [row("set", delta=None)], [s], torch.zeros(3, 4), broken, None, {}) == (
        None,
        "patched copy failed: RuntimeError: boom",
    )
    param = torch.nn.Parameter(torch.zeros(3, 4))
    total, reason = weight_total("k", [row("set", delta=None)], [s], param, calculate, None, {})
    assert reason is None and total == pytest.approx(math.sqrt(12))


def test_weight_rows_per_weight():
    weight = torch.zeros(2, 2)
    ones = torch.ones(2, 2)
    a, b = entry(("diff", (ones,)), 0.25), entry(("diff", (ones,)), 0.5)
    s = entry(("set", (torch.full((2, 2), 3.0),)))
    rows_by_key = {
        "m.a.weight": [
            row("diff", delta=0.5, scale=0.25, base=4.0),
            row("diff", delta=1.0, scale=0.5, base=4.0),
        ],
        "m.b.weight": [row("set", delta=None, base=2.0, relative_change=None, key="m.b.weight")],
        "m.c.weight": [row("diff", delta=0.5, applied=False, base=None)],
    }
    added = {"m.b.weight": [s], "m.a.weight": [a, b], "m.c.weight": [a]}
    out = weight_rows(
        added, rows_by_key, {"m.a.weight": weight, "m.b.weight": weight}.get, calculate, None, {}
    )
    assert [w["key"] for w in out] == ["m.a.weight", "m.b.weight", "m.c.weight"]
    first, second, third = out
    assert first == {
        "key": "m.a.weight",
        "block": "b",
        "n_entries": 2,
        "n_applied": 2,
        "applied": True,
        "delta_norm": pytest.approx(1.5),
        "delta_norm_unavailable": None,
        "base_norm": 4.0,
        "base_norm_unavailable": None,
        "relative_change": pytest.approx(1.5 / 4.0),
    }
    # the set's norm (3 everywhere on 4 elements: 6) is filled in, with its relative change
    assert second["delta_norm"] == pytest.approx(6.0) and second["relative_change"] == pytest.approx(3.0)
    assert rows_by_key["m.b.weight"][0]["relative_change"] == pytest.approx(3.0)
    assert (third["n_applied"], third["applied"], third["delta_norm"], third["relative_change"]) == (
        0,
        False,
        0.0,
        None,
    )


def test_weight_rows_without_weight_or_arithmetic():
    s = entry(("set", (torch.ones(2, 2),)))

    def failing(key):
        raise KeyError(key)

    for lookup in (None, failing):
        (out,) = weight_rows(
            {"k": [s]}, {"k": [row("set", delta=None, base=2.0)]}, lookup, calculate, None, {}
        )
        assert out["delta_norm"] is None and out["delta_norm_unavailable"] == "base weight not readable"
        assert out["relative_change"] is None
    (out,) = weight_rows({"k": [s]}, {"k": [row("set", delta=None, base=2.0)]}, None, None, None, {})
    assert out["delta_norm_unavailable"] == (
        "the change depends on the base weight (no framework arithmetic given)"
    )
    # a zero base norm: no relative change rather than a division by zero
    (zero,) = weight_rows({"k": [s]}, {"k": [row("diff", delta=1.0, base=0.0)]}, None, None, None, {})
    assert zero["delta_norm"] == 1.0 and zero["relative_change"] is None
    # every row with a norm and a base norm gets its relative change, whatever it held before
    known = [row("diff", delta=1.0, base=4.0, relative_change="stale")]
    weight_rows({"k": [s]}, {"k": known}, None, None, None, {})
    assert known[0]["relative_change"] == 0.25

"""Collecting a dump's tensors (monitors/dumps/collect.py): unique stable names, the bounds on
nesting, items and text, and the text-encoder family guessed for the dump."""

from __future__ import annotations

import torch

from monitors.conditioning.family import remember_family
from monitors.dumps.collect import CollectedTensors, collect_tensors, guess_encoder_family, safe_key


class Nested:
    """A nested tensor's interface: `is_nested` and its parts in `tensors`."""

    is_nested = True

    def __init__(self, parts):
        self.tensors = parts


def test_a_name_taken_by_a_tensor_an_extra_or_a_skipped_value_gets_the_next_free_number():
    c = CollectedTensors()
    c.add("x", torch.zeros(1))
    c.add("x", 5)
    c.add("x", object())
    c.add("x", torch.ones(1))
    assert list(c.tensors) == ["x", "x_4"]
    assert c.extras == {"x_2": "5"}
    assert c.skipped == {"x_3": "object"}
    d = CollectedTensors()
    d.add("y", "text")
    d.add("y", torch.zeros(1))
    d.add("z", object())
    d.add("z", torch.zeros(1))
    assert list(d.tensors) == ["y_2", "z_2"]


def test_none_is_left_out_and_plain_values_are_short_text():
    c = CollectedTensors()
    c.add("none", None)
    c.add("flag", True)
    c.add("long", "a" * 600)
    c.add("values", list(range(300)))
    c.add("pair", (1.5, "b"))
    assert "none" not in c.extras and not c.tensors and not c.skipped
    assert c.extras["flag"] == "True"
    assert c.extras["long"] == "a" * 500
    assert len(c.extras["values"]) == 500 and c.extras["values"].startswith("[0, 1, 2")
    assert c.extras["pair"] == '[1.5, "b"]'


def test_nested_tensors_are_named_by_part():
    c = CollectedTensors()
    c.add("cond", Nested([torch.zeros(2), torch.zeros(3)]))
    assert list(c.tensors) == ["cond.0", "cond.1"]
    c.add("not_nested", type("Plain", (), {"is_nested": 1, "tensors": [torch.zeros(1)]})())
    assert c.skipped == {"not_nested": "Plain"}


def test_nesting_is_followed_four_levels_deep():
    deep = {"a": [{"b": [torch.zeros(1)]}]}
    c = CollectedTensors()
    c.add("root", deep)  # depth 0: root, a, a.0, a.0.b, then the tensor at depth 4
    assert list(c.tensors) == ["root.a.0.b.0"]
    d = CollectedTensors()
    d.add("root", deep, depth=1)  # one level less to spare: the list at depth 4 is listed
    assert not d.tensors and d.skipped == {"root.a.0.b": "list"}
    e = CollectedTensors()
    e.add("m", {"k": {"j": torch.zeros(1)}}, depth=3)
    assert not e.tensors and e.skipped == {"m.k": "dict"}


def test_lists_and_dicts_are_followed_for_their_first_256_items():
    c = CollectedTensors()
    c.add("l", [torch.zeros(1)] * 300 + [object()])
    assert len(c.tensors) == 256 and "l.255" in c.tensors and not c.skipped
    d = CollectedTensors()
    d.add("d", {f"k{i}": torch.zeros(1) for i in range(300)})
    assert len(d.tensors) == 256 and "d.k255" in d.tensors
    e = CollectedTensors()
    e.add("n", Nested([torch.zeros(1)] * 300))
    assert len(e.tensors) == 256


def test_total_bytes_counts_every_element():
    c = CollectedTensors()
    c.add("a", torch.zeros(2, 3, dtype=torch.float32))
    c.add("b", torch.zeros(5, dtype=torch.float16))
    assert c.total_bytes == 2 * 3 * 4 + 5 * 2
    assert CollectedTensors().total_bytes == 0


def test_safe_keys_are_letters_digits_and_underscores_at_most_64():
    assert safe_key("weird key!") == "weird_key_"
    assert safe_key(3) == "3"
    assert safe_key("") == "_"
    assert safe_key("k" * 70) == "k" * 64


def test_conditioning_latent_and_image_are_followed_to_their_first_256_entries():
    cond = [[torch.zeros(1, 2, 3), {}] for _ in range(300)]
    collected = collect_tensors(conditioning=cond)
    assert len(collected.tensors) == 256 and "cond.255.tensor" in collected.tensors
    extras = {f"k{i}": i for i in range(300)}
    collected = collect_tensors(conditioning=[[torch.zeros(1), extras]], latent=dict(extras))
    assert len(collected.extras) == 512
    assert "cond.0.k255" in collected.extras and "latent.k255" in collected.extras


def test_conditioning_extras_are_one_level_down_and_a_short_entry_is_skipped():
    deep = {"a": {"b": {"c": {"d": torch.zeros(1)}}}, "t": {"u": {"v": torch.zeros(1)}}}
    collected = collect_tensors(
        conditioning=[(torch.zeros(1), {"x": deep}), (torch.zeros(1),)], latent={"y": deep}
    )
    # the extra itself at depth 1: x.a (2), x.a.b (3), x.a.b.c (4) is listed; x.t.u.v a tensor
    assert collected.skipped == {"cond.0.x.a.b.c": "dict", "cond.1": "tuple", "latent.y.a.b.c": "dict"}
    assert list(collected.tensors) == ["cond.0.tensor", "cond.0.x.t.u.v", "latent.y.t.u.v"]


def test_the_image_tensor_is_named_image():
    image = torch.zeros(1, 2, 2, 3)
    collected = collect_tensors(image=image)
    assert collected.tensors == {"image": image} and not collected.skipped


def sdxl_conditioning():
    return [[torch.zeros(1, 77, 2048), {"pooled_output": torch.zeros(1, 1280)}]]


def test_the_family_from_the_shape():
    assert guess_encoder_family(sdxl_conditioning()) == "SDXL (exact)"
    sd1 = [[torch.zeros(1, 77, 768), {"pooled_output": torch.zeros(1, 768)}]]
    assert guess_encoder_family(sd1) == "SD1.x (exact)"


def test_no_family_when_the_shape_fits_none_or_the_value_is_not_conditioning():
    assert guess_encoder_family([[torch.zeros(1, 5, 33), {}]]) is None
    assert guess_encoder_family("text") is None
    assert guess_encoder_family([]) is None


def test_the_conditioning_monitors_answer_comes_first_unless_it_is_unknown():
    cond = sdxl_conditioning()
    remember_family(cond[0][0], {"family": "Flux", "confidence": "likely"})
    assert guess_encoder_family(cond) == "Flux (likely)"
    other = sdxl_conditioning()
    remember_family(other[0][0], {"family": "Flux", "confidence": "unknown"})
    assert guess_encoder_family(other) == "SDXL (exact)"


def test_a_conditioning_without_a_batch_dimension_counts_its_tokens():
    cond = [[torch.zeros(77, 2048), {"pooled_output": torch.zeros(1, 1280)}]]
    assert guess_encoder_family(cond) == "SDXL (exact)"  # 77 tokens; without the count only "likely"


def test_an_object_with_tensors_but_no_is_nested_is_not_a_nested_tensor():
    c = CollectedTensors()
    c.add("v", type("Holder", (), {"tensors": [torch.zeros(1)]})())
    assert not c.tensors and c.skipped == {"v": "Holder"}


def test_a_nested_tensors_parts_count_as_one_level_of_nesting():
    c = CollectedTensors()
    c.add("n", Nested([[[[[torch.zeros(1)]]]]]))  # parts at 1, then lists at 2, 3 and 4
    assert not c.tensors and c.skipped == {"n.0.0.0.0": "list"}

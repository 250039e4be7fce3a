"""monitors.pipeline_profiler.extract: which extractor form a function is, what a decorated call's
extractor result becomes in the report, and a model's parameter figures."""

import math

import torch

from monitors.pipeline_profiler.extract import (
    _plain,
    describe_parameters,
    either_form,
    is_method,
    n_positional,
    safe_extract,
)


class Notes:
    def __init__(self):
        self.notes = []

    def note(self, message):
        self.notes.append(message)


def test_is_method_only_for_a_first_parameter_self_or_cls():
    assert is_method(lambda self, x: x) and is_method(lambda cls: cls)
    assert not is_method(lambda x, self: x) and not is_method(lambda: 0)
    assert not is_method(type)  # no signature to read


def test_n_positional_counts_what_can_be_passed_by_position():
    def f(a, b, /, c, *, d, **kw):
        return a

    assert n_positional(f) == 3
    assert n_positional(lambda: 0) == 0
    assert n_positional(lambda a, *args: a) is None
    assert n_positional(type) is None


def test_either_form_keeps_three_parameters_and_adapts_two():
    def three(args, kwargs, result):
        return {"result": result}

    assert either_form(three, lambda: 0) is three
    assert either_form(None, lambda: 0) is None
    any_number = lambda *a: {"n": len(a)}  # noqa: E731
    assert either_form(any_number, lambda: 0) is any_number

    def two(args, kwargs):
        return {"args": args, "kwargs": kwargs}

    plain = either_form(two, lambda x, y: 0)
    assert plain((1, 2), {"k": 3}, "result") == {"args": (1, 2), "kwargs": {"k": 3}}
    method = either_form(two, lambda self, y: 0)
    assert method(("self", 2), {}, "result") == {"args": (2,), "kwargs": {}}


def test_safe_extract_gives_plain_data_or_nothing_with_a_note():
    session = Notes()
    assert safe_extract(session, "s", None, (), {}, 1) == {}
    assert safe_extract(session, "s", lambda a, k, r: None, (), {}, 1) == {}
    assert session.notes == []

    def boom(a, k, r):
        raise ValueError("bad step")

    assert safe_extract(session, "denoise", boom, (), {}, 1) == {}
    assert safe_extract(session, "decode", lambda a, k, r: [1], (), {}, 1) == {}
    assert session.notes == [
        "denoise: extract failed: ValueError: bad step",
        "decode: extract must return a mapping, got list",
    ]


def test_safe_extract_copies_plain_info_and_converts_the_rest():
    session = Notes()
    info = {"step": 1, "t": 0.5, "name": "x", "on": True, "none": None}
    out = safe_extract(session, "s", lambda a, k, r: info, (), {}, 1)
    assert out == info and out is not info
    odd = safe_extract(session, "s", lambda a, k, r: {"shape": (1, 2), 3: float("inf")}, (), {}, 1)
    assert odd == {"shape": [1, 2], "3": None}

    class Info(dict):
        pass

    assert safe_extract(session, "s", lambda a, k, r: Info(x=(1,)), (), {}, 1) == {"x": [1]}
    assert session.notes == []


def test_plain_values_are_what_the_report_keeps_as_is():
    assert (
        _plain("k", "v") and _plain("k", 1) and _plain("k", False) and _plain("k", None) and _plain("k", 0.5)
    )
    assert not _plain(1, "v") and not _plain("k", (1,)) and not _plain("k", [1])
    assert not _plain("k", math.inf) and not _plain("k", math.nan)


def test_describe_parameters_of_a_module():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1, bias=False))
    model[1].weight.requires_grad_(False)
    model[1].half()
    assert describe_parameters(model) == {
        "class_name": "Sequential",
        "n_parameters": 10,
        "n_trainable_parameters": 8,
        "parameter_bytes": 8 * 4 + 2 * 2,
        "dtypes": {"float32": 8, "float16": 2},
        "devices": {"cpu": 10},
    }


def test_describe_parameters_of_other_objects():
    assert describe_parameters(object()) == {}
    assert describe_parameters(type("P", (), {"parameters": 3})()) == {}
    empty = describe_parameters(torch.nn.ReLU())
    assert empty["n_parameters"] == 0 and empty["parameter_bytes"] == 0 and empty["dtypes"] == {}


def test_describe_parameters_of_any_object_with_parameters():
    class Param:  # no requires_grad: not counted as trainable
        dtype, device = "int8", "meta"

        def numel(self):
            return 5

        def element_size(self):
            return 1

    class Model:
        def parameters(self):
            return iter([Param(), Param()])

    assert describe_parameters(Model()) == {
        "class_name": "Model",
        "n_parameters": 10,
        "n_trainable_parameters": 0,
        "parameter_bytes": 10,
        "dtypes": {"int8": 10},
        "devices": {"meta": 10},
    }

"""Finding the prompt text behind a CONDITIONING in API-format prompt graphs, and its statistics."""

import pytest

from monitors.conditioning.prompt_text import MAX_TEXT_CHARS, MAX_WALK_NODES, text_stats, trace_text_encoders

CLIP = ["4", 1]


def encode(text, clip=CLIP, class_type="CLIPTextEncode"):
    return {"class_type": class_type, "inputs": {"text": text, "clip": clip}}


def monitor(positive, negative=None):
    inputs = {"positive": positive}
    if negative is not None:
        inputs["negative"] = negative
    return {"class_type": "PipelineMonitorConditioning", "inputs": inputs}


def texts_of(trace):
    return [(e["node_id"], t["input"], t["text"]) for e in trace["encoders"] for t in e["texts"]]


def test_text_stats():
    stats = text_stats("A cat, (sitting:1.2)\nnaïve <b>x</b>")
    assert stats["n_characters"] == 35
    assert stats["n_words"] == 5
    assert stats["n_special_characters"] == 10  # , ( : . ) < > < / >
    assert stats["n_lines"] == 2 and stats["n_non_ascii"] == 1 and stats["n_utf8_bytes"] == 36
    assert stats["has_markup"] and not stats["has_script"] and not stats["is_blank"]
    assert text_stats("")["n_lines"] == 0 and text_stats(" \n ")["is_blank"]
    assert text_stats("<SCRIPT src=x>")["has_script"] and text_stats("javascript: alert(1)")["has_script"]
    assert not text_stats("a < b and c > d")["has_markup"]


def test_text_is_truncated_with_its_full_length():
    stats = text_stats("x" * 10_000)
    assert (
        stats["n_characters"] == 10_000 and len(stats["text"]) == MAX_TEXT_CHARS and stats["text_truncated"]
    )


def test_direct_encoder_widget():
    prompt = {"6": encode("a photo of a cat"), "7": encode("blurry"), "9": monitor(["6", 0], ["7", 0])}
    assert texts_of(trace_text_encoders(prompt, "9", "positive")) == [("6", "text", "a photo of a cat")]
    negative = trace_text_encoders(prompt, "9", "negative")
    assert texts_of(negative) == [("7", "text", "blurry")] and negative["path"] == ["7"]
    assert negative["encoders"][0]["texts"][0]["source"] == "widget"


def test_through_conditioning_nodes_to_several_encoders():
    prompt = {
        "6": encode("a cat"),
        "7": encode("a hat"),
        "8": {
            "class_type": "ConditioningSetArea",
            "inputs": {"conditioning": ["7", 0], "width": 64, "height": 64},
        },
        "10": {
            "class_type": "ConditioningCombine",
            "inputs": {"conditioning_1": ["6", 0], "conditioning_2": ["8", 0]},
        },
        "11": {"class_type": "FluxGuidance", "inputs": {"conditioning": ["10", 0], "guidance": 3.5}},
        "9": monitor(["11", 0]),
    }
    trace = trace_text_encoders(prompt, 9, "positive")
    assert texts_of(trace) == [("6", "text", "a cat"), ("7", "text", "a hat")]
    assert trace["path"] == ["11", "10", "6", "8", "7"]
    assert trace["notes"] == []


def test_positive_negative_nodes_follow_the_output_slot():
    prompt = {
        "6": encode("good"),
        "7": encode("bad"),
        "12": {
            "class_type": "ControlNetApplyAdvanced",
            "inputs": {
                "positive": ["6", 0],
                "negative": ["7", 0],
                "control_net": ["13", 0],
                "image": ["14", 0],
            },
        },
        "9": monitor(["12", 0], ["12", 1]),
    }
    assert texts_of(trace_text_encoders(prompt, "9", "positive")) == [("6", "text", "good")]
    assert texts_of(trace_text_encoders(prompt, "9", "negative")) == [("7", "text", "bad")]


def test_text_linked_to_a_primitive_node():
    prompt = {
        "5": {"class_type": "PrimitiveStringMultiline", "inputs": {"value": "from a primitive"}},
        "6": encode(["5", 0]),
        "9": monitor(["6", 0]),
    }
    text = trace_text_encoders(prompt, "9", "positive")["encoders"][0]["texts"][0]
    assert text["text"] == "from a primitive" and text["source"] == "linked"
    assert text["source_node_id"] == "5" and text["source_class_type"] == "PrimitiveStringMultiline"
    assert text["n_characters"] == 16


def test_text_made_at_run_time_is_unresolved_with_the_reason():
    prompt = {
        "5": {
            "class_type": "StringConcatenate",
            "inputs": {"string_a": ["3", 0], "string_b": ["4", 0], "delimiter": ""},
        },
        "6": encode(["5", 0]),
        "9": monitor(["6", 0]),
    }
    text = trace_text_encoders(prompt, "9", "positive")["encoders"][0]["texts"][0]
    assert text["text"] is None and text["n_characters"] is None
    assert "StringConcatenate" in text["note"]


def test_input_types_callback_decides_which_inputs_are_text():
    types = {
        "CLIPTextEncodeSD3": {
            "clip": "CLIP",
            "clip_l": "STRING",
            "clip_g": "STRING",
            "t5xxl": "STRING",
            "empty_padding": "COMBO",
        },
        "MyConditioner": {"cond_in": "CONDITIONING", "strength": "FLOAT"},
    }
    prompt = {
        "6": {
            "class_type": "CLIPTextEncodeSD3",
            "inputs": {"clip": CLIP, "clip_l": "l", "clip_g": "g", "t5xxl": "t5", "empty_padding": "none"},
        },
        "8": {"class_type": "MyConditioner", "inputs": {"cond_in": ["6", 0], "strength": 1.0}},
        "9": monitor(["8", 0]),
    }
    trace = trace_text_encoders(prompt, "9", "positive", input_types=types.get)
    assert texts_of(trace) == [("6", "clip_l", "l"), ("6", "clip_g", "g"), ("6", "t5xxl", "t5")]
    # Without the node definitions, "cond_in" is not recognised as a conditioning input.
    assert trace_text_encoders(prompt, "9", "positive")["encoders"] == []


def test_a_failing_input_types_callback_falls_back_to_names():
    def broken(class_type):
        raise RuntimeError("boom")

    prompt = {"6": encode("a cat"), "9": monitor(["6", 0])}
    assert texts_of(trace_text_encoders(prompt, "9", "positive", input_types=broken)) == [
        ("6", "text", "a cat")
    ]


@pytest.mark.parametrize(
    "prompt, node_id, note",
    [
        (None, "9", "not available"),
        ({"9": monitor(["6", 0])}, "9", "node 6 is not in the prompt graph"),
        ({"9": monitor(["6", 0])}, None, "not linked"),
        ({"9": {"class_type": "X", "inputs": {}}}, "9", "not linked"),
        ({"9": "garbage"}, "9", "not linked"),
        (
            {"1": {"class_type": "PMTestConditioning", "inputs": {"tokens": 77}}, "9": monitor(["1", 0])},
            "9",
            "without a CLIP input",
        ),
    ],
)
def test_what_cannot_be_followed_is_explained(prompt, node_id, note):
    trace = trace_text_encoders(prompt, node_id, "positive")
    assert trace["encoders"] == []
    assert any(note in n for n in trace["notes"]), trace["notes"]


def test_cycles_and_huge_graphs_are_bounded():
    cycle = {
        "1": {
            "class_type": "ConditioningCombine",
            "inputs": {"conditioning_1": ["2", 0], "conditioning_2": ["1", 0]},
        },
        "2": {
            "class_type": "ConditioningCombine",
            "inputs": {"conditioning_1": ["1", 0], "conditioning_2": ["2", 0]},
        },
        "9": monitor(["1", 0]),
    }
    assert trace_text_encoders(cycle, "9", "positive")["path"] == ["1", "2"]
    chain = {
        str(i): {"class_type": "ConditioningZeroOut", "inputs": {"conditioning": [str(i + 1), 0]}}
        for i in range(500)
    }
    chain["m"] = monitor(["0", 0])
    trace = trace_text_encoders(chain, "m", "positive")
    assert len(trace["path"]) == MAX_WALK_NODES
    assert any("stopped after" in n for n in trace["notes"])

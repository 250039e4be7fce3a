"""The bounds and edges of finding a prompt's text (monitors/conditioning/prompt_text.py): walk and
encoder caps, non-ASCII and truncation boundaries, node definitions' input types, links, notes said
once, literal text under another input name, one-sided nodes read through either output, and what
attach_texts says of an empty trace and of each text's node."""

from __future__ import annotations

from monitors.conditioning.prompt_text import (
    attach_texts,
    input_types_from_spec,
    is_link,
    text_stats,
    trace_text_encoders,
)

CLIP = ["clip", 1]


def encode(text, class_type="CLIPTextEncode"):
    return {"class_type": class_type, "inputs": {"text": text, "clip": CLIP}}


def monitor(link):
    return {"class_type": "PipelineMonitorConditioning", "inputs": {"positive": link}}


def test_the_walk_stops_after_64_nodes_and_keeps_16_encoders():
    chain = {
        str(i): {"class_type": "ConditioningZeroOut", "inputs": {"conditioning": [str(i + 1), 0]}}
        for i in range(100)
    }
    chain["m"] = monitor(["0", 0])
    assert len(trace_text_encoders(chain, "m", "positive")["path"]) == 64
    combine = {"class_type": "Combine", "inputs": {f"conditioning_{i}": [f"e{i}", 0] for i in range(20)}}
    prompt = {"c": combine, "m": monitor(["c", 0]), **{f"e{i}": encode(f"t{i}") for i in range(20)}}
    trace = trace_text_encoders(prompt, "m", "positive")
    assert [e["node_id"] for e in trace["encoders"]] == [f"e{i}" for i in range(16)]


def test_non_ascii_starts_at_128_and_truncation_above_2000_characters():
    assert text_stats("\x7f\x80")["n_non_ascii"] == 1
    exact = text_stats("a" * 2000)
    assert exact["text_truncated"] is False and len(exact["text"]) == 2000
    assert text_stats("a" * 2001)["text_truncated"] is True


def test_input_types_from_a_node_definition():
    spec = {
        "required": {"text": ("STRING", {"multiline": True}), "clip": ("CLIP",), "mode": (["a", "b"],)},
        "optional": {"empty": (), "odd": "STRING"},
        "hidden": {"prompt": ("PROMPT",)},
    }
    assert input_types_from_spec(spec) == {
        "text": "STRING",
        "clip": "CLIP",
        "mode": "COMBO",
        "empty": "COMBO",
        "odd": "COMBO",
    }
    assert input_types_from_spec({"required": None}) == {}


def test_a_link_is_a_node_id_and_an_output_slot():
    assert is_link(["4", 1]) and is_link((4, 0))
    assert not is_link([4.5, 0])
    assert not is_link(["4", "1"])
    assert not is_link(["4", 1, 2])


def test_a_failing_node_definition_is_noted_once_per_class():
    prompt = {
        "c": {
            "class_type": "ConditioningCombine",
            "inputs": {"conditioning_1": ["a", 0], "conditioning_2": ["b", 0]},
        },
        "a": encode("one"),
        "b": encode("two"),
        "m": monitor(["c", 0]),
    }

    def failing(class_type):
        raise KeyError(class_type)

    trace = trace_text_encoders(prompt, "m", "positive", failing)
    assert [t["text"] for e in trace["encoders"] for t in e["texts"]] == ["one", "two"]
    assert trace["notes"] == [
        "input types of ConditioningCombine unknown (KeyError: 'ConditioningCombine'): guessed from input names",
        "input types of CLIPTextEncode unknown (KeyError: 'CLIPTextEncode'): guessed from input names",
    ]


def test_a_literal_under_another_input_name_is_the_text():
    def types(class_type):
        return {"content": "STRING", "other": "STRING"} if class_type.startswith("Primitive") else None

    prompt = {
        "p": {"class_type": "PrimitiveStringMultiline", "inputs": {"content": "a castle"}},
        "e": {"class_type": "CLIPTextEncode", "inputs": {"text": ["p", 0], "clip": CLIP}},
        "m": monitor(["e", 0]),
    }
    text = trace_text_encoders(prompt, "m", "positive", types)["encoders"][0]["texts"][0]
    assert text["text"] == "a castle" and text["source_input"] == "content" and text["source"] == "linked"
    prompt["p"]["inputs"]["other"] = "a moat"  # two literals: which one is the text cannot be said
    text = trace_text_encoders(prompt, "m", "positive", types)["encoders"][0]["texts"][0]
    assert text["text"] is None
    assert text["note"] == "made at run time by node p (PrimitiveStringMultiline): not a literal"


def test_a_text_linked_to_a_node_missing_from_the_prompt():
    prompt = {
        "e": {"class_type": "CLIPTextEncode", "inputs": {"text": ["7", 0], "clip": CLIP}},
        "m": monitor(["e", 0]),
    }
    text = trace_text_encoders(prompt, "m", "positive")["encoders"][0]["texts"][0]
    assert text["input"] == "text" and text["source"] == "linked" and text["source_node_id"] == "7"
    assert text["note"] == "linked to node 7, which is not in the prompt"
    assert text["text"] is None and text["n_characters"] is None


def test_a_node_with_only_a_positive_input_is_followed_from_either_output():
    prompt = {
        "x": {"class_type": "OneSided", "inputs": {"positive": ["e", 0]}},
        "e": encode("a lighthouse"),
        "m": monitor(["x", 1]),
    }
    trace = trace_text_encoders(prompt, "m", "positive")
    assert [e["node_id"] for e in trace["encoders"]] == ["e"]


def test_the_largest_known_peak_and_the_empty_trace_note():
    side = {"total_bytes": 100}
    trace = {
        "encoders": [
            {"node_id": "6", "class_type": "CLIPTextEncode", "texts": [], "profile": {"peak_rss_bytes": 100}},
            {"node_id": "7", "class_type": "CLIPTextEncode", "texts": [], "profile": {"peak_rss_bytes": 300}},
            {"node_id": "8", "class_type": "CLIPTextEncode", "texts": [], "profile": {}},
        ]
    }
    attach_texts(side, trace, "positive", lambda *finding: None)
    assert side["encode_peak_rss_bytes"] == 300
    findings = []
    attach_texts(
        {"total_bytes": None}, {"encoders": [], "notes": []}, "negative", lambda *f: findings.append(f)
    )
    assert findings == [
        ("info", "negative: prompt text not found (no text encode node upstream)", "text_unresolved")
    ]


def test_a_text_finding_names_its_node():
    prompt = {"6": encode("  "), "m": monitor(["6", 0])}
    trace = trace_text_encoders(prompt, "m", "positive")
    findings = []
    attach_texts({"total_bytes": 10}, trace, "positive", lambda *f: findings.append(f))
    assert findings == [
        (
            "warning",
            "positive: text 'text' of node 6 (CLIPTextEncode) is empty: the encoder gets no prompt",
            "empty_prompt",
        )
    ]

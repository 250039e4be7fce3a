"""PipelineMonitorConditioning in-process: real tiny SD1/SDXL CLIPs through ComfyUI's CLIPTextEncode."""

from __future__ import annotations

import gc
import weakref

import conditioning_support
import pytest
from conditioning_support import NODE, codes, encode, execute, run_node
from testing_pack.conditioning_nodes import make_tiny_clip

pytestmark = pytest.mark.comfyui

# Fixtures shared with the server tests.
sdxl_clip = conditioning_support.sdxl_clip
executor = conditioning_support.executor


def graph(positive_text="a photo of a cat", negative_text="blurry, lowres"):
    """The API-format prompt the monitor (node 9) sees: two CLIPTextEncode nodes fed by node 4."""
    return {
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": positive_text, "clip": ["4", 1]}},
        "7": {"class_type": "CLIPTextEncode", "inputs": {"text": negative_text, "clip": ["4", 1]}},
        "9": {"class_type": NODE, "inputs": {"positive": ["6", 0], "negative": ["7", 0], "clip": ["4", 1]}},
    }


def test_node_schema(comfy):
    node = comfy.nodes.NODE_CLASS_MAPPINGS[NODE]
    spec = node.INPUT_TYPES()
    assert list(spec["required"]) == ["positive"] and spec["required"]["positive"][0] == "CONDITIONING"
    assert {name: v[0] for name, v in spec["optional"].items()} == {
        "negative": "CONDITIONING",
        "clip": "CLIP",
        "model": "MODEL",
        "memory_budget_mib": "INT",
    }
    assert list(node.RETURN_TYPES) == ["CONDITIONING", "CONDITIONING", "CLIP"]
    assert node.OUTPUT_NODE is True
    assert not hasattr(node, "IS_CHANGED") and "fingerprint_inputs" not in node.__dict__


def test_real_sd1_encoding_passes_through_and_is_described(comfy, tiny, pack_runtime):
    positive, negative = (
        encode(comfy, tiny.clip, "a photo of a cat"),
        encode(comfy, tiny.clip, "blurry, lowres"),
    )
    output, step = run_node(
        comfy, pack_runtime, prompt=graph(), positive=positive, negative=negative, clip=tiny.clip
    )
    assert output.result[0] is positive and output.result[1] is negative and output.result[2] is tiny.clip
    assert isinstance(output.ui["text"], list)
    lines = output.ui["text"][0].splitlines()  # written out, not recomputed with the node's function
    assert lines[:3] == ["encoder family: SD1.x", "encoder class: SD1ClipModel", "negative connected: yes"]
    assert step["node_id"] == "9" and step["monitor_errors"] == []
    side = step["details"]["positive"]
    cond, extras = positive[0]
    entry = side["entries"][0]
    assert entry["shape"] == [1, 77, 32] == list(cond.shape) and entry["dtype"] == "float32"
    assert entry["n_tokens"] == 77 and entry["hidden_size"] == 32 and entry["pooled_shape"] == [1, 32]
    assert entry["bytes"] == cond.numel() * cond.element_size()
    assert entry["min"] == pytest.approx(float(cond.min())) and entry["max"] == pytest.approx(
        float(cond.max())
    )
    assert entry["mean"] == pytest.approx(float(cond.double().mean()), abs=1e-7)
    assert entry["n_nan"] == 0 and entry["extra_keys"] == sorted(k for k in extras if k != "pooled_output")
    family = side["family"]
    assert family["family"] == "SD1.x" and family["basis"] == "clip class"
    assert family["shape_family"] == "unknown (hidden 32)"  # tiny: no real encoder is 32 wide
    clip = step["details"]["clip"]
    assert clip["encoder_class"] == "SD1ClipModel" and clip["families"] == ["SD1.x"]
    assert clip["n_patches"] == 0 and clip["patches_uuid"] == str(tiny.clip.patcher.patches_uuid)
    texts = [t for e in side["encoders"] for t in e["texts"]]
    assert [(t["text"], t["n_characters"], t["n_words"]) for t in texts] == [("a photo of a cat", 16, 5)]
    negative_texts = [t["text"] for e in step["details"]["negative"]["encoders"] for t in e["texts"]]
    assert negative_texts == ["blurry, lowres"]
    summary = step["summary"]
    assert summary["family"] == "SD1.x" and summary["encoder_class"] == "SD1ClipModel"
    assert summary["positive_n_characters"] == 16 and summary["negative_n_special_characters"] == 1
    assert summary["hidden_size_match"] is True
    assert step["details"]["comparison"]["pooled_size"] == [32, 32]
    # The encoders did not run in this run: no time, so no characters per second.
    assert summary["positive_encode_s"] is None and summary["positive_characters_per_s"] is None
    assert [f["code"] for f in step["findings"] if f["level"] != "info"] == []


def test_diffusion_model_at_encode_time_and_memory_budget(comfy, tiny, pack_runtime):
    positive = encode(comfy, tiny.clip, "a cat")
    output, step = run_node(
        comfy, pack_runtime, prompt=graph(), positive=positive, model=tiny.model, memory_budget_mib=1
    )
    assert output.result[0] is positive
    model = step["details"]["diffusion_model"]
    assert model["object_id"] == id(tiny.model) and model["class"] == type(tiny.model).__name__
    assert model["device"] == "cpu" and model["unknown_reason"] is None
    assert step["summary"]["model_class"] == model["class"]
    assert step["summary"]["memory_budget_bytes"] == 1024**2
    assert step["details"]["encode"]["n_encoders"] == 1  # the graph's positive encode node


def test_real_sdxl_class_encoding(comfy, sdxl_clip, pack_runtime):
    positive = encode(comfy, sdxl_clip, "a red bicycle")
    _, step = run_node(comfy, pack_runtime, prompt=graph("a red bicycle"), positive=positive, clip=sdxl_clip)
    entry = step["details"]["positive"]["entries"][0]
    assert entry["shape"] == [1, 77, 96] and entry["pooled_shape"] == [1, 64]  # CLIP-L 32 + CLIP-G 64
    assert step["summary"]["family"] == "SDXL" and step["summary"]["encoder_class"] == "SDXLClipModel"
    assert step["details"]["negative"] == {"connected": False}


def test_sd1_positive_with_sdxl_negative_is_a_mismatch(comfy, tiny, sdxl_clip, pack_runtime):
    positive, negative = encode(comfy, tiny.clip, "a cat"), encode(comfy, sdxl_clip, "a dog")
    output, step = run_node(
        comfy, pack_runtime, prompt=graph("a cat", "a dog"), positive=positive, negative=negative
    )
    assert output.result[0] is positive and output.result[1] is negative and output.result[2] is None
    assert {"hidden_mismatch", "pooled_mismatch"} <= set(codes(step, "error"))
    assert step["details"]["comparison"]["hidden_size"] == [32, 96]
    assert "no_clip" in codes(step, "info")


def test_long_empty_and_markup_prompts_through_the_real_encoder(comfy, tiny, pack_runtime):
    long_text = "a scenic mountain lake at dawn, " * 313  # 10,016 characters
    script = "<script>alert('pm')</script><b>a cat</b>"
    positive, negative = encode(comfy, tiny.clip, long_text), encode(comfy, tiny.clip, "")
    _, step = run_node(comfy, pack_runtime, prompt=graph(long_text, ""), positive=positive, negative=negative)
    entry = step["details"]["positive"]["entries"][0]
    assert entry["n_tokens"] % 77 == 0 and entry["n_tokens"] > 77 * 10  # many 77-token chunks
    text = step["details"]["positive"]["encoders"][0]["texts"][0]
    assert (
        text["n_characters"] == len(long_text) and text["text"] == long_text[:2000] and text["text_truncated"]
    )
    assert "long_prompt" in codes(step, "info") and "empty_prompt" in codes(step, "info")
    _, step = run_node(
        comfy, pack_runtime, prompt=graph(script, ""), positive=encode(comfy, tiny.clip, script)
    )
    assert step["details"]["positive"]["encoders"][0]["texts"][0]["text"] == script
    assert "script_in_prompt" in codes(step, "warning")
    empty = encode(comfy, tiny.clip, "")
    _, step = run_node(comfy, pack_runtime, prompt=graph(""), positive=empty)
    assert "empty_prompt" in codes(step, "warning")


def test_nan_conditioning_and_no_clip(comfy, tiny, pack_runtime):
    cond, extras = encode(comfy, tiny.clip, "a cat")[0]
    poisoned = cond.clone()
    poisoned[0, 3, :4] = float("nan")
    positive = [[poisoned, dict(extras)]]
    output, step = run_node(comfy, pack_runtime, prompt=graph("a cat"), positive=positive)
    assert output.result[0] is positive and output.result[2] is None
    assert "nan_values" in codes(step, "error") and "no_clip" in codes(step, "info")
    assert step["summary"]["positive_n_nan"] == 4
    assert any("NaN" in line for line in output.ui["text"])


@pytest.mark.parametrize(
    "positive, negative, code",
    [
        ("not conditioning", None, "not_a_list"),
        ({"pooled_output": None}, None, "not_a_list"),
        ([[1, 2, 3]], None, "entry_not_pair"),
        ([], None, "no_entries"),
        (None, None, "not_a_list"),
        ("valid", [["text", 5]], "cond_not_tensor"),
        ("valid", [["text", {"pooled_output": object()}]], "cond_not_tensor"),
    ],
)
def test_malformed_inputs_give_findings_and_pass_through(comfy, tiny, pack_runtime, positive, negative, code):
    if positive == "valid":
        positive = encode(comfy, tiny.clip, "a cat")
    output, step = run_node(
        comfy, pack_runtime, prompt=graph(), positive=positive, negative=negative, clip=tiny.clip
    )
    assert output.result[0] is positive and output.result[1] is negative and output.result[2] is tiny.clip
    assert code in codes(step, "error"), step["findings"]
    assert step["monitor_errors"] == [] and isinstance(output.ui["text"], list)


def test_non_tensor_extras_are_described(comfy, tiny, pack_runtime):
    cond, extras = encode(comfy, tiny.clip, "a cat")[0]
    positive = [[cond, {**extras, "hooks": object(), "strength": 0.5, "area": (64, 64, 0, 0)}]]
    _, step = run_node(comfy, pack_runtime, prompt=graph(), positive=positive, clip=tiny.clip)
    described = step["details"]["positive"]["entries"][0]["extras"]
    assert described["hooks"] == {"type": "object"} and described["strength"]["value"] == 0.5
    assert described["area"] == {"type": "tuple", "length": 4}
    assert step["monitor_errors"] == []


def test_a_failing_analysis_never_fails_the_node(comfy, tiny, pack_runtime, monkeypatch):
    module = comfy.pack_module("monitors.conditioning.report")

    def boom(*args, **kwargs):
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr(module, "analyse_conditioning", boom)
    positive = encode(comfy, tiny.clip, "a cat")
    output, step = run_node(comfy, pack_runtime, prompt=graph(), positive=positive, clip=tiny.clip)
    assert output.result[0] is positive and output.result[2] is tiny.clip
    assert step["monitor_errors"] == ["RuntimeError: analysis exploded"]


def test_no_tensor_or_clip_survives_a_run(comfy, pack_runtime):
    clip = make_tiny_clip("sd1", seed=9)
    positive, negative = encode(comfy, clip, "a cat"), encode(comfy, clip, "a dog")
    refs = [
        weakref.ref(t) for side in (positive, negative) for t in (side[0][0], side[0][1]["pooled_output"])
    ]
    refs += [weakref.ref(clip), weakref.ref(clip.patcher), weakref.ref(clip.cond_stage_model)]
    output, step = run_node(
        comfy, pack_runtime, prompt=graph(), positive=positive, negative=negative, clip=clip
    )
    assert step["details"]["clip"]["encoder_class"] == "SD1ClipModel"
    del output, positive, negative, clip
    gc.collect()
    assert [r() is None for r in refs] == [True] * len(refs)
    assert len(pack_runtime.store) == 1  # the report is kept, and holds none of them


def test_real_executor_path_with_encode_times(comfy, executor, pack_runtime):
    prompt = {
        "1": {"class_type": "PMTestTinyClip", "inputs": {"kind": "sd1", "seed": 0}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"text": "a photo of a cat", "clip": ["1", 0]}},
        "3": {"class_type": "CLIPTextEncode", "inputs": {"text": "wearing a red hat", "clip": ["1", 0]}},
        "4": {
            "class_type": "ConditioningCombine",
            "inputs": {"conditioning_1": ["2", 0], "conditioning_2": ["3", 0]},
        },
        "5": {"class_type": "PrimitiveStringMultiline", "inputs": {"value": "blurry, lowres"}},
        "6": {"class_type": "CLIPTextEncode", "inputs": {"text": ["5", 0], "clip": ["1", 0]}},
        "9": {"class_type": NODE, "inputs": {"positive": ["4", 0], "negative": ["6", 0], "clip": ["1", 0]}},
        "10": {"class_type": "PMTestConditioningId", "inputs": {"conditioning": ["9", 0]}},
        "11": {"class_type": "PMTestConditioningId", "inputs": {"conditioning": ["4", 0]}},
    }
    prompt_id = execute(executor, prompt, ["9", "10", "11"])
    outputs = executor.history_result["outputs"]
    assert outputs["10"] == outputs["11"]  # the very same CONDITIONING object, same values
    report = pack_runtime.store.get(prompt_id)
    rows = {row["node_id"]: row for row in report["nodes"]}
    step = [s for s in report["steps"] if s["kind"] == "conditioning"][0]
    positive, negative = step["details"]["positive"], step["details"]["negative"]
    assert positive["n_entries"] == 2 and [e["node_id"] for e in positive["encoders"]] == ["2", "3"]
    assert [t["text"] for e in positive["encoders"] for t in e["texts"]] == [
        "a photo of a cat",
        "wearing a red hat",
    ]
    assert positive["encode_duration_s"] == pytest.approx(rows["2"]["duration_s"] + rows["3"]["duration_s"])
    assert positive["encode_duration_s"] > 0 and positive["encoders"][0]["profile"]["cached"] is False
    assert positive["n_characters"] == 33
    assert positive["characters_per_s"] == pytest.approx(33 / positive["encode_duration_s"])
    assert positive["bytes_per_character"] == pytest.approx(positive["total_bytes"] / 33)
    assert positive["encode_peak_rss_bytes"] == max(rows["2"]["peak_rss_bytes"], rows["3"]["peak_rss_bytes"])
    text = negative["encoders"][0]["texts"][0]
    assert text["text"] == "blurry, lowres" and text["source"] == "linked" and text["source_node_id"] == "5"
    assert negative["encode_duration_s"] == rows["6"]["duration_s"]
    assert step["summary"]["family"] == "SD1.x" and step["summary"]["positive_encode_s"] > 0
    assert outputs["9"]["text"][0].splitlines()[:1] == ["encoder family: SD1.x"]
    assert "negative connected: yes" in outputs["9"]["text"][0].splitlines()
    # Queued again: everything is cached, and the step comes back marked cached.
    again = pack_runtime.store.get(execute(executor, prompt, ["9", "10", "11"]))
    assert [(s["kind"], s["cached"]) for s in again["steps"]] == [("conditioning", True)]


def test_input_types_come_from_comfyui_node_definitions(comfy):
    input_types = comfy.pack_module("nodes.conditioning_node").comfy_input_types
    assert input_types("CLIPTextEncode") == {"text": "STRING", "clip": "CLIP"}
    assert input_types("ConditioningCombine") == {
        "conditioning_1": "CONDITIONING",
        "conditioning_2": "CONDITIONING",
    }
    types = input_types("ControlNetApplyAdvanced")
    assert types["positive"] == types["negative"] == "CONDITIONING" and types["strength"] == "FLOAT"
    assert input_types("NoSuchNode") is None

"""The conditioning analyser on plain torch CONDITIONING lists: entries, families, checks, memory."""

import gc
import json
import math
import types
import weakref

import pytest
import torch

from monitors.conditioning.analysis import MAX_ENTRIES, MAX_FINDINGS, analyse_conditioning
from monitors.conditioning.family import families_from_encoder_class, family_from_shape
from monitors.report import to_jsonable
from monitors.vocabulary.headline import step_text


def conditioning(tokens=77, hidden=768, pooled=768, seed=0, batch=1, **extras):
    generator = torch.Generator().manual_seed(seed)
    cond = torch.randn((batch, tokens, hidden), generator=generator)
    pooled_output = None if pooled is None else torch.randn((batch, pooled), generator=generator)
    return [[cond, {"pooled_output": pooled_output, **extras}]]


def analyse(positive, negative=None, clip=None, traces=None):
    step = analyse_conditioning("9", positive, negative, clip, traces)
    # Everything in the step is plain JSON data.
    json.dumps(to_jsonable(step), allow_nan=False)
    return step


def codes(step, level=None):
    return [f.code for f in step.findings if level is None or f.level == level]


# One case per row of the encoder table (notes, section 4), plus the rows listed under "Also".
FAMILY_ROWS = [
    ("SD1 / SD2: CLIP-L", 77, 768, 768, (), "SD1.x"),
    ("SD1 / SD2: OpenCLIP-H", 77, 1024, 1024, (), "SD2.x"),
    ("SD1 long prompt (3 chunks)", 231, 768, 768, (), "SD1.x"),
    ("SDXL", 77, 2048, 1280, (), "SDXL"),
    ("SD3", 154, 4096, 2048, (), "SD3"),
    ("Flux.1", 256, 4096, 768, (), "Flux.1"),
    ("Flux.2", 40, 15360, None, (), "Flux.2"),
    ("Chroma, PixArt", 24, 4096, None, (), "Chroma / PixArt"),
    ("Mochi", 256, 4096, None, (), "Mochi"),
    ("LTXV 0.9", 128, 4096, None, (), "LTXV 0.9"),
    ("WAN 2.1/2.2", 512, 4096, None, (), "WAN 2.1/2.2"),
    ("Cosmos", 512, 1024, None, (), "Cosmos"),
    ("LTX-2", 60, 7680, None, (), "LTX-2"),
    ("HunyuanVideo 1.0", 40, 4096, 768, (), "HunyuanVideo 1.0"),
    ("Qwen-Image", 30, 3584, None, (), "Qwen-Image"),
    ("HunyuanVideo 1.5 / HunyuanImage 2.1", 30, 3584, None, ("conditioning_byt5small",), "HunyuanVideo 1.5"),
    ("Kandinsky 5", 30, 3584, 768, (), "Kandinsky 5"),
    ("HiDream", 128, 4096, 2048, ("conditioning_llama3",), "HiDream"),
    ("SDXL refiner / Cascade", 77, 1280, 1280, (), "SDXL refiner / Stable Cascade"),
    ("AuraFlow", 256, 2048, None, (), "AuraFlow"),
    ("Stable Audio", 128, 768, None, (), "Stable Audio"),
    ("Z-Image", 30, 2560, None, (), "Z-Image"),
    ("NewBie", 30, 2560, 1024, (), "NewBie"),
    ("Lumina 2", 30, 2304, None, (), "Lumina 2"),
    ("Omnigen2 / Ovis", 30, 2048, None, (), "Omnigen2 / Ovis"),
    ("HunyuanDiT", 77, 1024, 1024, ("conditioning_mt5xl",), "HunyuanDiT"),
    ("ACE-Step", 30, 768, None, ("conditioning_lyrics",), "ACE-Step"),
]


@pytest.mark.parametrize(
    "tokens, hidden, pooled, extra_keys, expected",
    [row[1:] for row in FAMILY_ROWS],
    ids=[r[0] for r in FAMILY_ROWS],
)
def test_family_from_shape_per_table_row(tokens, hidden, pooled, extra_keys, expected):
    extras = {key: torch.zeros(1, 4, 8) for key in extra_keys}
    step = analyse(conditioning(tokens, hidden, pooled, **extras))
    family = step.details["positive"]["family"]
    assert family["family"].startswith(expected), family
    assert family["basis"] == "shape"
    assert family["confidence"] in ("exact", "likely"), family
    assert step.summary["positive_family"] == step.summary["family"] == family["family"]
    assert step.summary["positive_n_tokens"] == tokens and step.summary["positive_hidden_size"] == hidden
    assert step.summary["positive_pooled_size"] == pooled
    assert "unknown_family" not in codes(step)


def test_shape_families_keep_their_candidates():
    long_wan = family_from_shape(4096, None, 700)  # a long umT5 prompt: WAN grown, or another T5
    assert long_wan["family"] == "WAN 2.1/2.2" and long_wan["confidence"] == "ambiguous"
    assert {"Mochi", "LTXV 0.9", "Chroma / PixArt"} <= set(long_wan["candidates"])
    flux = family_from_shape(4096, 768, 256)
    assert flux["family"] == "Flux.1" and flux["confidence"] == "exact"
    assert flux["candidates"] == ["HunyuanVideo 1.0"]
    odd = family_from_shape(768, 768, 100)  # CLIP output is always a multiple of 77 tokens
    assert odd["family"] == "SD1.x" and odd["confidence"] == "ambiguous"


def test_unknown_hidden_size():
    step = analyse(conditioning(77, 32, 32))
    assert step.summary["family"] == "unknown (hidden 32)"
    assert "unknown_family" in codes(step, "info")


def _encoder_object(*class_names):
    """An object whose class and bases carry these names, most specific first."""
    base = object
    for name in reversed(class_names):
        base = type(name, (base,), {})
    return base()


def test_clip_class_names_the_family_and_wins_over_the_shape():
    clip = types.SimpleNamespace(cond_stage_model=_encoder_object("SDXLClipModel"))
    step = analyse(conditioning(77, 96, 64), clip=clip)  # a tiny SDXL: no shape rule knows 96
    family = step.details["positive"]["family"]
    assert family["family"] == "SDXL" and family["basis"] == "clip class"
    assert family["shape_family"] == "unknown (hidden 96)"
    assert step.summary["encoder_class"] == "SDXLClipModel"
    assert "no_clip" not in codes(step) and "unknown_family" not in codes(step)


def test_classes_made_on_the_fly_resolve_through_their_base():
    mochi = _encoder_object("MochiTEModel_", "MochiT5XXL")
    assert families_from_encoder_class(mochi) == ("Mochi", "LTXV 0.9")
    clip = types.SimpleNamespace(cond_stage_model=mochi)
    step = analyse(conditioning(128, 4096, None), clip=clip)
    assert step.summary["family"] == "LTXV 0.9"  # the class serves both, the 128 tokens say LTXV
    hunyuan = _encoder_object("QwenImageTEModel_", "HunyuanImageTEModel", "QwenImageTEModel")
    assert families_from_encoder_class(hunyuan) == ("HunyuanVideo 1.5 / HunyuanImage 2.1",)
    assert families_from_encoder_class(_encoder_object("MyEncoder")) == ()


def test_clip_that_did_not_encode_this_conditioning_is_flagged():
    clip = types.SimpleNamespace(cond_stage_model=_encoder_object("SD1ClipModel"))
    step = analyse(conditioning(77, 2048, 1280), clip=clip)
    assert "clip_family_mismatch" in codes(step, "warning")


def test_entry_facts_and_statistics_match_torch():
    positive = conditioning(154, 768, 768, attention_mask=torch.tensor([[1] * 100 + [0] * 54]))
    cond, extras = positive[0]
    step = analyse(positive)
    entry = step.details["positive"]["entries"][0]
    assert entry["shape"] == [1, 154, 768] and entry["dtype"] == "float32" and entry["device"] == "cpu"
    assert entry["n_elements"] == cond.numel() and entry["bytes"] == cond.numel() * 4
    assert entry["n_tokens"] == 154 and entry["hidden_size"] == 768 and entry["batch_size"] == 1
    assert entry["min"] == pytest.approx(float(cond.min())) and entry["max"] == pytest.approx(
        float(cond.max())
    )
    assert entry["mean"] == pytest.approx(float(cond.double().mean()), abs=1e-9)
    assert entry["std"] == pytest.approx(float(cond.double().std(unbiased=False)), rel=1e-6)
    assert entry["n_nan"] == 0 and entry["n_inf"] == 0
    assert entry["pooled_shape"] == [1, 768] and entry["pooled"]["n_nan"] == 0
    assert entry["extra_keys"] == ["attention_mask"] and entry["n_attended_tokens"] == 100
    assert entry["extras"]["attention_mask"]["shape"] == [1, 154]
    assert entry["total_bytes"] == cond.numel() * 4 + 768 * 4 + 154 * 8
    assert step.summary["positive_bytes"] == entry["total_bytes"]
    assert step.findings and codes(step) == ["no_clip", "text_unresolved"]


def test_nan_and_inf_are_errors_and_outputs_do_not_matter_to_the_analysis():
    positive = conditioning()
    positive[0][0][0, :5, 0] = float("nan")
    positive[0][0][0, 5, 0] = float("inf")
    positive[0][1]["pooled_output"][0, 0] = float("nan")
    before = positive[0][0].clone()
    step = analyse(positive)
    assert set(codes(step, "error")) == {"nan_values", "inf_values", "pooled_nan"}
    entry = step.details["positive"]["entries"][0]
    assert entry["n_nan"] == 5 and entry["n_inf"] == 1 and math.isfinite(entry["mean"])
    assert step.summary["positive_n_nan"] == 5
    assert torch.equal(torch.nan_to_num(positive[0][0]), torch.nan_to_num(before))  # untouched


@pytest.mark.parametrize(
    "bad, code",
    [
        (None, "not_a_list"),
        ({"cond": 1}, "not_a_list"),
        (torch.zeros(1, 77, 768), "not_a_list"),
        ([], "no_entries"),
        ([torch.zeros(1, 77, 768)], "entry_not_pair"),
        ([[torch.zeros(1, 77, 768)]], "entry_not_pair"),
        ([["text", {}]], "cond_not_tensor"),
        ([[torch.zeros(1, 77, 768), "extras"]], "extras_not_dict"),
        ([[torch.zeros(1, 0, 768), {"pooled_output": None}]], "empty_tensor"),
    ],
    ids=[
        "None",
        "dict",
        "tensor",
        "empty list",
        "bare tensor",
        "1-list",
        "str cond",
        "str extras",
        "0 tokens",
    ],
)
def test_malformed_conditioning_gives_an_error_finding(bad, code):
    step = analyse(bad)
    assert code in codes(step, "error"), step.findings
    assert step.monitor_errors == ()
    assert step_text(step)


def test_odd_shapes_and_non_tensor_extras_are_described():
    hooks = object()
    positive = [
        [
            torch.ones(768),
            {"pooled_output": [1, 2], "hooks": hooks, "clip_start_percent": 0.25, "name": "x" * 500},
        ]
    ]
    step = analyse(positive)
    entry = step.details["positive"]["entries"][0]
    assert "bad_shape" in codes(step, "warning") and "pooled_not_tensor" in codes(step, "warning")
    assert entry["extras"]["hooks"] == {"type": "object"}
    assert entry["extras"]["clip_start_percent"] == {"type": "float", "value": 0.25}
    assert len(entry["extras"]["name"]["value"]) == 100
    assert entry["pooled"] is None and entry["pooled_size"] is None


def test_zeroed_conditioning_is_noted():
    step = analyse([[torch.zeros(1, 77, 768), {"pooled_output": torch.zeros(1, 768)}]])
    assert "all_zero" in codes(step, "info")


def test_many_entries_are_bounded():
    step = analyse(conditioning(77, 8, None) * (MAX_ENTRIES + 5))
    side = step.details["positive"]
    assert side["n_entries"] == MAX_ENTRIES + 5 and len(side["entries"]) == MAX_ENTRIES
    assert "many_entries" in codes(step)


def test_findings_are_bounded():
    bad = [["not a tensor", {}]] * 60
    step = analyse(bad)
    assert len(step.findings) == MAX_FINDINGS
    assert any("dropped" in e for e in step.monitor_errors)


def test_positive_and_negative_side_by_side():
    step = analyse(conditioning(77, 2048, 1280), conditioning(154, 2048, 1280, seed=1))
    comparison = step.details["comparison"]
    assert comparison["n_tokens"] == [77, 154] and comparison["hidden_size"] == [2048, 2048]
    assert comparison["hidden_size_match"] is True and comparison["pooled_match"] is True
    assert comparison["family"] == ["SDXL", "SDXL"]
    assert step.summary["negative_n_tokens"] == 154 and step.summary["hidden_size_match"] is True
    assert not codes(step, "error") and not codes(step, "warning")


def test_mismatched_positive_and_negative_are_errors():
    step = analyse(conditioning(77, 2048, 1280), conditioning(77, 768, 768))
    assert {"hidden_mismatch", "pooled_mismatch"} <= set(codes(step, "error"))
    assert step.summary["hidden_size_match"] is False
    step = analyse(conditioning(77, 2048, 1280), conditioning(77, 2048, None))
    assert "pooled_mismatch" in codes(step, "warning")


def test_without_negative():
    step = analyse(conditioning())
    assert step.details["negative"] == {"connected": False} and step.details["comparison"] is None
    assert step.summary["negative_connected"] is False and step.summary["negative_n_tokens"] is None
    assert "negative connected: no" in step_text(step).splitlines()


def _trace(*texts, node_id="6", profile=None):
    from monitors.conditioning.prompt_text import text_stats

    entries = [{"input": "text", "source": "widget", "note": None, **text_stats(t)} for t in texts]
    return {
        "encoders": [
            {"node_id": node_id, "class_type": "CLIPTextEncode", "texts": entries, "profile": profile}
        ],
        "path": [node_id],
        "notes": [],
    }


def test_text_statistics_cost_per_character_and_text_findings():
    profile = {"duration_s": 0.5, "peak_rss_bytes": 1000, "cached": False}
    positive = conditioning(77, 768, 768)
    traces = {
        "positive": _trace("a cat, (sitting:1.2)", profile=profile),
        "negative": _trace("", node_id="7"),
    }
    step = analyse(positive, conditioning(77, 768, 768, seed=1), traces=traces)
    side = step.details["positive"]
    assert side["n_characters"] == 20 and side["n_words"] == 3 and side["n_special_characters"] == 5
    assert side["encode_duration_s"] == 0.5 and side["characters_per_s"] == 40
    assert side["bytes_per_character"] == side["total_bytes"] / 20
    assert step.summary["positive_encode_s"] == 0.5 and step.summary["positive_characters_per_s"] == 40
    assert [(f.level, f.code) for f in step.findings if f.code == "empty_prompt"] == [
        ("info", "empty_prompt")
    ]
    assert step.summary["negative_n_characters"] == 0 and step.summary["negative_bytes_per_character"] is None
    assert step.details["comparison"]["same_text"] is False


def test_empty_positive_prompt_is_a_warning_and_same_prompts_are_flagged():
    step = analyse(conditioning(), traces={"positive": _trace("  ")})
    assert "empty_prompt" in codes(step, "warning")
    step = analyse(
        conditioning(), conditioning(seed=1), traces={"positive": _trace("cat"), "negative": _trace("cat")}
    )
    assert "same_prompt" in codes(step, "warning")


def test_long_and_markup_prompts_are_kept_as_bounded_plain_text():
    long_text = "word " * 2000  # 10,000 characters
    script = '<script>alert("x")</script> a cat'
    step = analyse(conditioning(), traces={"positive": _trace(long_text, script, "<b>bold</b> cat")})
    texts = step.details["positive"]["encoders"][0]["texts"]
    assert texts[0]["n_characters"] == 10_000 and len(texts[0]["text"]) == 2000 and texts[0]["text_truncated"]
    assert texts[1]["text"] == script  # stored verbatim: the panel shows it as text
    assert {"long_prompt", "markup_in_prompt"} <= set(codes(step, "info"))
    assert "script_in_prompt" in codes(step, "warning")
    assert len(json.dumps(to_jsonable(step))) < 60_000


def test_no_tensor_survives_the_analysis():
    positive, negative = conditioning(512, 256, 32, mask=torch.ones(1, 512)), conditioning(77, 256, 64)
    tensors = [t for side in (positive, negative) for t in (side[0][0], *side[0][1].values())]
    refs = [weakref.ref(t) for t in tensors]
    del tensors
    step = analyse(positive, negative)
    del positive, negative
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)
    assert step.summary["positive_n_tokens"] == 512


def test_step_in_a_run_report_is_valid_json_on_disk(tmp_path, probes_for):
    import jsonschema

    from monitors.engine.recorder import RunRecorder
    from monitors.engine.store import RunStore
    from tests.unit.test_report_store import SCHEMA

    probes_for("no GPU")
    store = RunStore(str(tmp_path))
    recorder = RunRecorder(store)
    recorder.begin_run("conditioning-1", None)
    positive = conditioning(hooks=object())
    positive[0][0][0, 0, 0] = float("nan")
    step = analyse(positive, conditioning(77, 2048, 1280), traces={"positive": _trace("<script>x</script>")})
    assert recorder.add_step(step)
    recorder.end_run("success")
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1
    on_disk = json.loads(files[0].read_text(), parse_constant=pytest.fail)  # strict JSON: no NaN
    jsonschema.validate(on_disk, SCHEMA)
    saved = on_disk["steps"][0]
    assert saved["kind"] == "conditioning" and saved["details"]["positive"]["entries"][0]["n_nan"] == 1
    assert saved["details"]["positive"]["encoders"][0]["texts"][0]["text"] == "<script>x</script>"


def test_extras_are_bounded():
    from monitors.conditioning.analysis import MAX_EXTRAS

    extras = {f"key_{i:03}": i for i in range(500)}
    step = analyse(conditioning(**extras))
    entry = step.details["positive"]["entries"][0]
    assert entry["n_extra_keys"] == 500 and len(entry["extra_keys"]) == MAX_EXTRAS
    assert len(entry["extras"]) <= MAX_EXTRAS


def _encoder_profile(duration_s, rss_above, gpu_above=None):
    gpu = [] if gpu_above is None else [{"device": "cuda:0", "peak_allocated_above_start_bytes": gpu_above}]
    return {
        "duration_s": duration_s,
        "cached": False,
        "peak_rss_bytes": 10 * rss_above,
        "peak_rss_above_start_bytes": rss_above,
        "rss_change_bytes": rss_above // 2,
        "gpu_peaks": gpu,
    }


def test_encode_total_time_memory_per_encoder_and_budget_finding():
    MiB = 1024**2
    traces = {
        "positive": _trace(
            "a cat", node_id="6", profile=_encoder_profile(0.5, 100 * MiB, gpu_above=300 * MiB)
        ),
        "negative": _trace("blurry", node_id="7", profile=_encoder_profile(0.25, 50 * MiB)),
    }
    step = analyse_conditioning(
        "9",
        conditioning(77, 768, 768),
        conditioning(77, 768, 768, seed=1),
        None,
        traces,
        memory_budget_bytes=200 * MiB,
    )
    json.dumps(to_jsonable(step), allow_nan=False)
    encode = step.details["encode"]
    assert encode["total_s"] == 0.75 and step.summary["encode_total_s"] == 0.75
    assert encode["n_encoders"] == 2
    by_node = {e["node_id"]: e for e in encode["encoders"]}
    assert by_node["6"]["memory_above_start_bytes"] == 300 * MiB  # the GPU figure first
    assert by_node["6"]["peak_gpu_allocated_above_start_bytes"] == 300 * MiB
    assert by_node["7"]["memory_above_start_bytes"] == 50 * MiB and by_node["7"]["sides"] == ["negative"]
    # one meaning per name: GPU allocated and RSS apart, whatever the machine
    assert step.summary["encode_peak_gpu_allocated_above_start_bytes"] == 300 * MiB
    assert step.summary["encode_peak_rss_above_start_bytes"] == 100 * MiB
    assert step.summary["memory_budget_bytes"] == 200 * MiB
    assert step.summary["memory_budget_exceeded"] is True
    over = [f for f in step.findings if f.code == "memory_budget_exceeded"]
    assert len(over) == 1 and "node 6" in over[0].message and over[0].level == "warning"


def test_no_budget_and_no_model_are_none_with_a_reason():
    step = analyse(
        conditioning(77, 768, 768), traces={"positive": _trace("a cat", profile=_encoder_profile(0.1, 1))}
    )
    assert step.summary["memory_budget_exceeded"] is None and step.summary["memory_budget_bytes"] is None
    assert step.details["encode"]["memory_budget"]["unknown_reason"]
    assert step.summary["model_class"] is None
    assert "MODEL" in step.details["diffusion_model"]["unknown_reason"]


def test_diffusion_model_identity_at_encode_time():
    class FakeModelPatcher:
        def __init__(self):
            self.model = torch.nn.Linear(2, 2)
            self.patches = {}
            self.load_device = torch.device("cpu")

    model = FakeModelPatcher()
    step = analyse_conditioning("9", conditioning(77, 768, 768), model=model)
    info = step.details["diffusion_model"]
    assert info["object_id"] == id(model) and info["class"] == "FakeModelPatcher"
    assert info["module_class"] == "Linear" and info["device"] == "cpu"
    assert step.summary["model_class"] == "FakeModelPatcher" and step.summary["model_device"] == "cpu"
    json.dumps(to_jsonable(step), allow_nan=False)

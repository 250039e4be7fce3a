"""The memory picture of the passthrough monitors (models, LoRA, conditioning): which upstream
nodes get a full span, how their spans merge into one picture, and None with a reason when
nothing upstream ran."""

from __future__ import annotations

import types

import pytest
import torch

from monitors.conditioning.report import build_conditioning_step
from monitors.conditioning.upstream import upstream_node_ids as conditioning_upstream
from monitors.engine.recorder import RunRecorder
from monitors.engine.span import METHOD_KERNEL_HWM, METHOD_SAMPLED, Change, Peak, SpanResult, merge_sequential
from monitors.engine.store import RunStore
from monitors.engine.upstream_memory import (
    CACHED_REASON,
    NO_RECORDER_REASON,
    NO_RUN_REASON,
    NO_UPSTREAM_REASON,
    PROFILE_OFF_REASON,
    upstream_memory,
    watch_plan,
)
from monitors.lora.report import build_lora_step
from monitors.lora.upstream import upstream_node_ids as lora_upstream
from monitors.models.report import build_models_step
from monitors.models.upstream import upstream_node_ids as models_upstream
from monitors.probes import DETAIL_LIGHT
from monitors.probes.fake import GiB, fake_probes
from monitors.probes.readings import Snapshot

MiB = 1024**2
WALKS = {"MonModels": models_upstream, "MonLora": lora_upstream, "MonCond": conditioning_upstream}

# checkpoint 1 -> LoRA 2 -> LoRA 3 -> encoders 4 (positive), 5 (negative, through a combine 6)
GRAPH = {
    "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "x.safetensors"}},
    "2": {
        "class_type": "LoraLoader",
        "inputs": {"model": ["1", 0], "clip": ["1", 1], "lora_name": "a.safetensors", "strength_model": 1.0},
    },
    "3": {
        "class_type": "LoraLoaderModelOnly",
        "inputs": {"model": ["2", 0], "lora_name": "b.safetensors", "strength_model": 0.5},
    },
    "4": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["2", 1], "text": "a cat"}},
    "5": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["2", 1], "text": "blurry"}},
    "6": {
        "class_type": "ConditioningCombine",
        "inputs": {"conditioning_1": ["5", 0], "conditioning_2": ["5", 0]},
    },
    "7": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64}},
    "10": {"class_type": "MonModels", "inputs": {"model": ["1", 0], "clip": ["1", 1], "vae": ["1", 2]}},
    "11": {"class_type": "MonLora", "inputs": {"model": ["3", 0], "clip": ["2", 1]}},
    "12": {"class_type": "MonCond", "inputs": {"positive": ["4", 0], "negative": ["6", 0]}},
    "13": {"class_type": "MonLora", "inputs": {"model": ["1", 0]}},  # no LoRA loader upstream
}


def test_each_monitor_watches_the_nodes_its_step_describes():
    plan = watch_plan(GRAPH, WALKS)
    assert plan["10"] == ("1",)  # the loader, once for its three outputs
    assert plan["11"] == ("3", "2")  # the LoRA loaders, nearest first; not the checkpoint below
    assert plan["12"] == ("4", "5")  # the encoders, through the combine node
    assert plan["13"] == ()
    assert set(plan) == {"10", "11", "12", "13"}  # plain nodes are no monitors
    assert watch_plan(None, WALKS) == {} and watch_plan(GRAPH, {}) == {}


def _snapshot(at_s: float, rss: int, available: int) -> Snapshot:
    return Snapshot(
        monotonic_s=at_s, unix_time_s=1000.0 + at_s, process_rss_bytes=rss, ram_available_bytes=available
    )


def _result(start_s: float, duration_s: float, rss: tuple, peak: tuple, low: tuple, method=METHOD_KERNEL_HWM):
    """A closed span from start_s (unix 1000 + start_s) with rss (start, end), peak and low (value, at_s)."""
    baseline = _snapshot(start_s, rss[0], 8 * GiB)
    end = _snapshot(start_s + duration_s, rss[1], 7 * GiB)
    return SpanResult(
        name="node",
        start_unix_s=1000.0 + start_s,
        duration_s=duration_s,
        baseline=baseline,
        end=end,
        peaks={"process_rss_bytes": Peak(peak[0], peak[1], method)},
        changes={"process_rss_bytes": Change.between(*rss)},
        peak_rss_method=method,
        lows={"ram_available_bytes": Peak(low[0], low[1], METHOD_SAMPLED)},
    )


def test_sequential_spans_merge_into_one_from_the_first_start_to_the_last_end():
    first = _result(0.0, 1.0, (100 * MiB, 300 * MiB), (400 * MiB, 0.5), (6 * GiB, 0.25))
    second = _result(3.0, 2.0, (350 * MiB, 500 * MiB), (900 * MiB, 1.5), (5 * GiB, 0.75))
    merged = merge_sequential("upstream", [second, first])  # any order: sorted by start
    assert merged.start_unix_s == 1000.0 and merged.duration_s == pytest.approx(5.0)
    assert merged.baseline is first.baseline and merged.end is second.end
    change = merged.changes["process_rss_bytes"]
    assert (change.before, change.after, change.delta) == (100 * MiB, 500 * MiB, 400 * MiB)
    assert merged.peaks["process_rss_bytes"] == Peak(900 * MiB, 4.5, METHOD_KERNEL_HWM)  # 3 s + 1.5 s
    assert merged.lows["ram_available_bytes"] == Peak(5 * GiB, 3.75, METHOD_SAMPLED)
    assert merged.peak_rss_method == METHOD_KERNEL_HWM
    assert merged.changes["ram_available_bytes"].delta == -1 * GiB


def test_merge_keeps_the_earlier_extreme_and_a_sampled_method_when_any_span_sampled():
    first = _result(0.0, 1.0, (100, 200), (900, 0.5), (4, 0.1))
    second = _result(2.0, 1.0, (200, 300), (800, 0.5), (6, 0.1), method=METHOD_SAMPLED)
    merged = merge_sequential("upstream", [first, second])
    assert merged.peaks["process_rss_bytes"].value == 900 and merged.peaks["process_rss_bytes"].at_s == 0.5
    assert merged.lows["ram_available_bytes"].value == 4
    assert merged.peak_rss_method == METHOD_SAMPLED
    assert merge_sequential("upstream", []) is None and merge_sequential("upstream", [None]) is None


def test_merge_keeps_the_time_an_equal_extreme_was_first_reached_and_sub_second_gaps():
    # the second span repeats the first one's peak and low: the earlier times stand
    first = _result(0.0, 0.25, (100, 200), (900, 0.125), (4, 0.0625))
    second = _result(0.5, 0.25, (200, 300), (900, 0.125), (4, 0.0625))
    merged = merge_sequential("upstream", [first, second])
    assert merged.peaks["process_rss_bytes"] == Peak(900, 0.125, METHOD_KERNEL_HWM)
    assert merged.lows["ram_available_bytes"] == Peak(4, 0.0625, METHOD_SAMPLED)
    assert merged.duration_s == pytest.approx(0.75)  # 0.5 s between the starts + the last one's 0.25 s


def test_upstream_memory_without_upstream_or_with_nothing_run_is_none_with_the_reason():
    first = _result(0.0, 1.0, (100, 200), (300, 0.5), (4, 0.1))
    none = upstream_memory([], {})
    assert none["memory"] is None and none["memory_unknown_reason"] == NO_UPSTREAM_REASON
    cached = upstream_memory(["2", "3"], {})
    assert cached["memory"] is None and cached["memory_unknown_reason"] == CACHED_REASON
    assert cached["memory_scope"]["not_run_node_ids"] == ["2", "3"]
    partly = upstream_memory(["2", "3"], {"3": first})
    assert partly["memory_unknown_reason"] is None
    assert partly["memory_scope"] == {
        "upstream_node_ids": ["2", "3"],
        "measured_node_ids": ["3"],
        "not_run_node_ids": ["2"],
    }
    assert partly["memory"]["process_rss_bytes"]["baseline"] == 100


def _run(recorder, probes, prompt_id, ran):
    """Begin a run of GRAPH; the nodes in `ran` execute (LoRA 2 allocates 1 GiB on the GPU and
    raises RSS), the rest finish without a start (ComfyUI's cache)."""
    recorder.begin_run(prompt_id, GRAPH, upstream_walks=WALKS)
    for node_id in ("1", "2", "3", "4", "5", "6", "7"):
        if node_id in ran:
            recorder.node_started(node_id)
            if node_id == "2":
                probes.torch.allocate(0, GiB)
                probes.host.set_rss(2 * GiB)
                probes.host.set_rss(1 * GiB)
        recorder.node_finished(node_id)


def test_recorder_gives_watched_nodes_a_full_span_and_the_monitor_a_picture(tmp_path):
    probes = fake_probes("1 GPU")
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    _run(recorder, probes, "p1", ran={"1", "2", "3", "4", "5", "6", "7"})
    run = recorder._run
    assert run.watched == {"1", "2", "3", "4", "5"}
    assert set(run.full_results) == {"1", "2", "3", "4", "5"}
    # full detail: system RAM and NVML read for watched nodes only
    assert run.full_results["2"].baseline.ram_used_bytes is not None
    assert run.full_results["2"].baseline.gpus[0].nvml_used_bytes is not None

    lora = recorder.upstream_memory("11")
    assert lora["memory_unknown_reason"] is None
    assert lora["memory_scope"]["measured_node_ids"] == ["2", "3"]
    picture = lora["memory"]
    rss = picture["process_rss_bytes"]
    assert rss["baseline"] is not None and rss["end"] == 1 * GiB and rss["peak"] == 2 * GiB
    assert rss["peak_at_s"] is not None and rss["peak_at_s"] >= 0
    assert picture["system_ram"]["used_bytes"]["baseline"] is not None
    gpu = picture["gpus"][0]
    assert gpu["device"] == "cuda:0" and gpu["allocated_bytes"]["change"] == GiB
    assert gpu["allocated_bytes"]["peak"] >= GiB and gpu["nvml_used_bytes"]["end"] is not None
    assert picture["unknown_reasons"] == {}
    assert recorder.upstream_memory("12")["memory_scope"]["measured_node_ids"] == ["4", "5"]
    assert recorder.upstream_memory("13")["memory_unknown_reason"] == NO_UPSTREAM_REASON
    recorder.node_started("99")  # a node outside every plan (e.g. a sampler) keeps the light span
    assert recorder._run.open_nodes["99"].detail == DETAIL_LIGHT
    recorder.node_finished("99")
    assert "99" not in recorder._run.full_results
    report = recorder.end_run("success")
    plain = next(n for n in report.nodes if n.node_id == "7")
    assert plain.status == "executed"  # an unwatched row is unchanged (light span)
    assert recorder.upstream_memory("11")["memory_unknown_reason"] == NO_RUN_REASON


def test_cached_upstream_gives_none_with_the_reason_never_an_invented_picture(tmp_path):
    probes = fake_probes()
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    _run(recorder, probes, "p2", ran={"7"})
    lora = recorder.upstream_memory("11")
    assert lora["memory"] is None and lora["memory_unknown_reason"] == CACHED_REASON
    assert lora["memory_scope"]["not_run_node_ids"] == ["3", "2"]
    recorder.end_run("success")


def test_profile_off_or_no_recorder_says_so(tmp_path):
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=fake_probes(), profile_enabled=False)
    recorder.begin_run("p3", GRAPH, upstream_walks=WALKS)
    assert recorder.upstream_memory("11")["memory_unknown_reason"] == PROFILE_OFF_REASON
    assert recorder._run.watched == frozenset()
    recorder.end_run("success")
    step = build_models_step("10", {}, GRAPH, recorder=None)
    assert step.details["memory"] is None and step.details["memory_unknown_reason"] == NO_RECORDER_REASON


def test_the_three_steps_carry_the_picture(tmp_path):
    probes = fake_probes("1 GPU")
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    _run(recorder, probes, "p4", ran={"1", "2", "3", "4", "5", "6", "7"})
    module = torch.nn.Linear(2, 2)
    model = types.SimpleNamespace(model=module, patches={}, load_device="cpu")
    models = build_models_step("10", {"model": model}, GRAPH, recorder)
    lora = build_lora_step("11", GRAPH, model, None, recorder=recorder, lora_path=lambda name: None)
    conditioning = build_conditioning_step(
        "12", GRAPH, [[torch.ones(1, 77, 768), {}]], [[torch.ones(1, 77, 768), {}]], recorder=recorder
    )
    for step, measured in ((models, ["1"]), (lora, ["2", "3"]), (conditioning, ["4", "5"])):
        assert step.details["memory_unknown_reason"] is None, step.kind
        assert step.details["memory_scope"]["measured_node_ids"] == measured
        assert step.details["memory"]["process_rss_bytes"]["end"] is not None
        assert recorder.add_step(step)
    report = recorder.end_run("success").to_dict()
    assert [s["details"]["memory"]["duration_s"] >= 0 for s in report["steps"]] == [True] * 3

"""docs/metrics-reference.md: every JSON path it names appears in reports built here from the
real builders (GPU-only paths with the fake GPU backend), and the document is not stale."""

from __future__ import annotations

import re
import types
import uuid

import pytest
import torch
from safetensors.torch import save_file

from monitors import pipeline_profiler as pm
from monitors.conditioning.report import build_conditioning_step
from monitors.conditioning.upstream import upstream_node_ids as conditioning_upstream
from monitors.dumps.compare_step import start_compare_step
from monitors.dumps.report import INLINE_WRITER, LIVE_VALUE, build_dump_step
from monitors.engine.model_residency import ModelEvent
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.latent.report import build_latent_step
from monitors.lora.report import build_lora_step
from monitors.lora.upstream import upstream_node_ids as lora_upstream
from monitors.models.report import build_models_step
from monitors.pipeline_profiler import usage
from monitors.probes.fake import GiB, fake_probes
from monitors.vae.chain import run_chain
from monitors.vae.report import build_step as build_vae_step
from monitors.vocabulary.metrics_reference import DOC_PATH, all_figures, document_text
from tests.unit.test_lora_patches import Patcher, lora_patches, tiny_module
from tests.unit.test_lora_step_decisions import Coverage, computed, one_loader_prompt, patched
from tests.unit.test_step_builders import PROMPT
from tests.unit.test_vae_chain import FakeVAE, options, pixels

SEGMENT = re.compile(r"^(?P<key>[^\[\]]+)(?:\[(?P<filter>[^\]]*)\])?$")


def _split(path: str) -> list[str]:
    return path.split(".")


def path_present(root, path: str) -> bool:
    """A key exists at `path` (its value may be None) in at least one branch."""
    nodes = [root]
    for segment in _split(path):
        match = SEGMENT.match(segment)
        assert match, f"bad path segment {segment!r} in {path}"
        key, filt = match.group("key"), match.group("filter")
        following = []
        for node in nodes:
            if isinstance(node, dict) and key == "*":  # any key of a mapping
                following.extend(node.values())
            elif isinstance(node, dict) and key in node:
                following.append(node[key])
        if not following:
            return False
        if filt is not None:
            items = [item for value in following if isinstance(value, list) for item in value]
            if filt:
                name, _, wanted = filt.partition("=")
                items = [i for i in items if isinstance(i, dict) and str(i.get(name)) == wanted]
            if not items:
                return False
            following = items
        nodes = following
    return True


def _fake_model():
    module = torch.nn.Linear(2, 2)
    return types.SimpleNamespace(model=module, patches={}, patches_uuid=uuid.uuid4(), load_device="cpu")


def _fake_clip():
    encoder = torch.nn.Linear(2, 2)
    patcher = types.SimpleNamespace(model=encoder, patches={}, patches_uuid=uuid.uuid4(), load_device="cpu")
    return types.SimpleNamespace(cond_stage_model=encoder, patcher=patcher, tokenizer=None)


def _lora_step(recorder=None):
    """A LoRA'd MODEL and CLIP (one patch per weight) and a loader whose file check fails."""
    model = Patcher(tiny_module()).clone()
    model.add_patches(lora_patches(2, 1), 1.0)
    patcher = Patcher(tiny_module()).clone()
    patcher.add_patches(lora_patches(2, 5), 0.5)
    clip = types.SimpleNamespace(patcher=patcher, cond_stage_model=patcher.model, tokenizer=None)

    def broken(name):
        raise OSError("share offline")

    return build_lora_step(
        "9", PROMPT, model, clip, lora_path=broken, returned=(model, clip), recorder=recorder
    )


def _lora_file_step(tmp_path):
    """A loader whose file is read and whose keys are placed: the file and coverage rows."""
    path = tmp_path / "style.safetensors"
    save_file(
        {"lora_unet_a.lora_up.weight": torch.zeros(4, 2), "lora_unet_a.lora_down.weight": torch.zeros(2, 4)},
        str(path),
    )
    coverage = Coverage(computed(6, 4))
    return build_lora_step(
        "9", one_loader_prompt(), patched(0.8), lora_path=lambda name: str(path), coverage=coverage
    )


def _lora_step_after_prompt():
    """A first file's step finished after the prompt (monitors/lora/after_prompt.py): details.deferred."""
    model = Patcher(tiny_module()).clone()
    model.add_patches(lora_patches(2, 3), 0.7)
    works = []
    build_lora_step("11", PROMPT, model, defer=lambda work: works.append(work) or "job-1")
    work = works[0]()
    while True:
        try:
            next(work)
        except StopIteration as stop:
            return stop.value


def _model_event(kind, before, after, **extra):
    return ModelEvent(kind, "SDXL", 1, 1, "cuda:0", 0.1, abs(after - before), before, after, GiB,
                      loader_node_id="1", **extra)


MODEL_EVENTS = {
    "1": (_model_event("load_full", 0, GiB, reason="free_memory: memory for SDXL"),),
    "3": (_model_event("unload_full", GiB, 0), _model_event("load_full", 0, GiB, n_weights=3)),
}


class _Nested:  # the shape of comfy.nested_tensor.NestedTensor
    is_nested = True

    def __init__(self, tensors):
        self.tensors = tensors


@pytest.fixture
def run_report(tmp_path):
    probes = fake_probes("1 GPU")
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    # node 9 as the LoRA monitor (LoRA loader 3 upstream), 19 as the conditioning monitor (encoder 4)
    graph = {**PROMPT, "19": {"class_type": "MonitorConditioning", "inputs": {"positive": ["4", 0]}}}
    recorder.begin_run("p1", graph, upstream_walks={"Monitor": lora_upstream, "MonitorConditioning": conditioning_upstream})
    for node_id in ("1", "3", "4", "7:8"):  # 7:8: node 8 inside the subgraph instance 7
        recorder.node_started(node_id)
        probes.torch.allocate(0, GiB)
        for event in MODEL_EVENTS.get(node_id, ()):  # a load, an eviction and the reload
            recorder.model_event(event)
        recorder.node_finished(node_id)
    recorder.set_resident_at_end([{"model_class": "SDXL", "patcher_id": 1, "model_id": 1, "device": "cuda:0",
                                   "loaded_bytes": GiB, "model_size_bytes": GiB}])
    positive = [[torch.ones(1, 77, 768), {"pooled_output": torch.ones(1, 768)}]]
    latent = {"samples": torch.ones(1, 4, 8, 8)}
    steps = [
        build_models_step(
            "9", {"model": _fake_model(), "clip": _fake_clip(), "vae": FakeVAE()}, PROMPT, recorder
        ),
        _lora_step(recorder),
        build_conditioning_step(
            "19",
            graph,
            positive,
            clip=_fake_clip(),
            recorder=recorder,
            model=_fake_model(),
            memory_budget_bytes=GiB,
        ),
        build_latent_step("9", latent, PROMPT, recorder),
        # every key a latent's details may carry: a mask, a batch index, its type, another key; a
        # nested latent; a value that is no LATENT
        build_latent_step(
            "11",
            {"samples": torch.ones(2, 4, 8, 8), "noise_mask": torch.ones(1, 8, 8), "batch_index": [0, 1],
             "type": "image", "strength": 0.5},
        ),
        build_latent_step("12", {"samples": _Nested([torch.ones(1, 4, 8, 8), torch.ones(1, 4, 4, 4)])}),
        build_latent_step("13", "not a latent"),
        build_dump_step(
            "9", PROMPT, {"latent": latent}, "pm_ref", False, directory=str(tmp_path), prompt_id="p1"
        ),
        # compared in the prompt (the writer off): every key of details.work
        start_compare_step(
            "10", "pm_ref.safetensors", LIVE_VALUE, 1e-5, 1e-8, {"latent": latent},
            directory=str(tmp_path), writer=INLINE_WRITER,
        )[0],
        build_vae_step("5", run_chain(FakeVAE(video=True), pixels(9, 64, 64), options(probes=probes))),
        _lora_file_step(tmp_path),
        _lora_step_after_prompt(),
        # on the CPU: the system's available memory instead of the device's free memory
        build_vae_step("6", run_chain(FakeVAE(device="cpu"), pixels(1, 64, 64), options(probes=probes))),
    ]
    for step in steps:
        assert recorder.add_step(step)
    return recorder.end_run("success").to_dict()


@pytest.fixture
def profiling_report(tmp_path):
    usage.reset_usage_statistics()
    probes = fake_probes("1 GPU")
    pm.configure(
        probes=probes, report={"output_dir": str(tmp_path / "prof"), "format": "json", "trace": False}
    )
    try:

        @pm.profile_model_parameters(name="tiny")
        def load():
            return torch.nn.Linear(2, 2)

        load()
        with pm.profile_session("gen", deep=True) as session:  # deep: the deep_profile step too
            probes.torch.allocate(0, GiB)
            with pm.profile_method("matmul"):
                torch.ones(2, 2) @ torch.ones(2, 2)
        stats = usage.get_usage_statistics(probes)
    finally:
        pm.configure()
        usage.reset_usage_statistics()
    return session.report.to_dict(), stats


def test_every_documented_path_appears_in_a_report(run_report, profiling_report):
    profiled, stats = profiling_report
    missing = []
    for figure in all_figures():
        if figure.path.startswith("usage."):
            found = path_present(stats, figure.path[len("usage.") :])
        else:
            found = path_present(run_report, figure.path) or path_present(profiled, figure.path)
        if not found:
            missing.append(figure.path)
    assert not missing, "documented but in no report: " + ", ".join(missing)


def test_path_matching_is_strict():
    report = {"steps": [{"kind": "a", "summary": {"x": None}}], "nodes": [{"gpu_peaks": []}]}
    assert path_present(report, "steps[kind=a].summary.x")  # present though unknown
    assert not path_present(report, "steps[kind=b].summary.x")
    assert not path_present(report, "steps[kind=a].summary.y")
    assert not path_present(report, "nodes[].gpu_peaks[].device")
    mapping = {"predictions": {"direct": {"fits": None}, "tiled": {}}}
    assert path_present(mapping, "predictions.*.fits")
    assert not path_present(mapping, "predictions.*.needs")


def test_document_is_generated_and_names_every_figure():
    with open(DOC_PATH, encoding="utf-8") as f:
        text = f.read()
    assert text == document_text(), "stale: run python -m monitors.vocabulary.generated_files --write"
    for figure in all_figures():
        assert f"`{figure.path}`" in text

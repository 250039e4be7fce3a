"""The LoRA step of a first file finished after the prompt (monitors/lora/after_prompt.py): in the
prompt it reads back nothing and touches no weight's values, after it the figures equal a step made whole in the prompt, a repeat stays in the prompt, and the base weights
are the ones taken in the prompt whatever ComfyUI does to the model meanwhile."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from monitors.lora.after_prompt import BaseWeightNotTaken, first_time_work, take_base_weights
from monitors.lora.caches import clear_caches, file_identity
from monitors.lora.report import build_lora_step
from tests.readbacks import ReadbackCounter

from .test_lora_patches import Patcher
from .test_lora_readbacks import adapters, prompt, wide_module

FILES = ["a.safetensors", "b.safetensors"]


@pytest.fixture
def lora_files(tmp_path):
    """Two files on disk (their identity names the figures), the caches cleared around the test."""
    paths = {}
    for name in FILES:
        paths[name] = str(tmp_path / name)
        save_file({"x": torch.zeros(1)}, paths[name])
    clear_caches()
    yield paths
    clear_caches()


def stacked(base: Patcher, strengths=(0.8, 0.3), stack=None) -> tuple[Patcher, list]:
    stack = stack or [adapters(6, 0), adapters(6, 7)]
    patcher = base
    for patches, strength in zip(stack, strengths, strict=True):
        patcher = patcher.clone()
        patcher.add_patches(patches, strength)
    return patcher, stack


def build(patcher, paths, defer=None, strengths=(0.8, 0.3)):
    return build_lora_step("99", prompt(FILES, list(strengths)), patcher, lora_path=paths.get, defer=defer)


class Jobs:
    """A fake DEFERRED.submit: keeps the job to run when the test says."""

    def __init__(self) -> None:
        self.works = []

    def __call__(self, work):
        self.works.append(work)
        return f"job-{len(self.works)}"

    def run(self, index: int = 0):
        work = self.works[index]()
        slices = 0
        while True:
            try:
                next(work)
                slices += 1
            except StopIteration as stop:
                return stop.value, slices


def test_a_first_file_is_pending_in_the_prompt_reading_nothing_back(lora_files):
    patcher, stack = stacked(Patcher(wide_module(6)))
    jobs = Jobs()
    with ReadbackCounter() as counter:
        pending = build(patcher, lora_files, defer=jobs)
    assert counter.n_readbacks == 0
    weights = list(patcher.model.parameters())
    factors = [t for patches in stack for a in patches.values() for t in a.weights[:2]]
    assert not any(counter.touched(t) for t in weights + factors)
    assert pending.pending and pending.summary["success"] is None
    assert pending.summary["n_loras"] == 2 and pending.summary["model_delta_norm"] is None
    assert pending.details["deferred"]["job_id"] == "job-1"
    assert pending.details["deferred"]["after_prompt_s"] is None
    assert "model" not in pending.details
    assert [f.code for f in pending.findings] == ["lora_figures_after_prompt"]


def test_after_the_prompt_the_figures_equal_a_step_made_in_the_prompt(lora_files):
    base = Patcher(wide_module(6))
    patcher, _ = stacked(base)
    jobs = Jobs()
    pending = build(patcher, lora_files, defer=jobs)
    with ReadbackCounter() as counter:
        done, slices = jobs.run()
    assert counter.n_readbacks == 2  # as in the prompt: the patches' batch, then the weights'
    assert slices == 2  # one slice per side (MODEL, CLIP), the worker may yield between them
    clear_caches()
    whole = build(patcher, lora_files)
    assert not done.pending and not whole.pending
    for name, value in whole.summary.items():
        if name == "analysis_s":
            continue
        assert done.summary[name] == (pytest.approx(value, rel=1e-12) if isinstance(value, float) else value), name
    deferred = done.details["deferred"]
    assert deferred["job_id"] == "job-1" and deferred["in_prompt_s"] == pending.details["deferred"]["in_prompt_s"]
    assert deferred["after_prompt_s"] > 0
    assert deferred["finished_unix_s"] >= deferred["started_unix_s"]  # one clock: its end after its start
    assert done.details["model"]["overall"]["totals"] == whole.details["model"]["overall"]["totals"]
    assert "lora_figures_after_prompt" in [f.code for f in done.findings]


def test_the_sides_ends_are_described_where_the_monitor_stood_not_after_the_prompt(lora_files):
    """A sampler later in the prompt loads and patches the same model: the finished step still
    describes the model as the monitor saw it (its placement, its patch state)."""
    patcher, _ = stacked(Patcher(wide_module(6)))
    jobs = Jobs()
    build(patcher, lora_files, defer=jobs)
    seen = str(patcher.load_device)
    patcher.load_device = "cuda:7"  # what the rest of the prompt did to the model meanwhile
    done, _ = jobs.run()
    assert done.details["model"]["after"]["load_device"] == seen != "cuda:7"
    assert done.details["model"]["placement_changes"] == {}
    clear_caches()
    assert build(patcher, lora_files).details["model"]["after"]["load_device"] == "cuda:7"  # read now


def test_ends_that_cannot_be_described_in_the_prompt_keep_the_whole_step_there(lora_files, monkeypatch):
    """Described after the prompt they would describe the model as the sampler left it: the step
    is made in the prompt instead (where a failure is recorded as every monitor's is)."""
    import monitors.lora.after_prompt as after_prompt

    def broken(kind, after, before):
        raise RuntimeError("ends broke")

    monkeypatch.setattr(after_prompt, "describe_ends", broken)
    patcher, _ = stacked(Patcher(wide_module(6)))
    jobs = Jobs()
    step = build(patcher, lora_files, defer=jobs)
    assert jobs.works == [] and not step.pending


def test_a_repeat_stays_in_the_prompt_and_reads_back_nothing(lora_files):
    base = Patcher(wide_module(6))
    first, stack = stacked(base)
    jobs = Jobs()
    build(first, lora_files, defer=jobs)
    jobs.run()  # the first file analysed after its prompt: templates made
    again, _ = stacked(base, strengths=(0.5, -0.25), stack=stack)  # the loader's cached tensors
    with ReadbackCounter() as counter:
        repeat = build(again, lora_files, defer=jobs, strengths=(0.5, -0.25))
    assert not repeat.pending and len(jobs.works) == 1
    assert counter.n_readbacks == 0
    assert repeat.summary["model_delta_norm"] > 0


def test_a_first_file_is_first_time_work_until_its_templates_exist(lora_files):
    base = Patcher(wide_module(3))
    patcher = base.clone()
    patcher.add_patches(adapters(3, 0), 0.8)
    hop_files = [(file_identity(lora_files["a.safetensors"]), 0.8)]  # what the loaders name
    assert first_time_work("model", patcher, hop_files=hop_files)
    build_lora_step("99", prompt(["a.safetensors"], [0.8]), patcher, lora_path=lora_files.get)
    assert not first_time_work("model", patcher, hop_files=hop_files)
    assert not first_time_work("model", base)  # no patches: nothing to compute


def test_a_weight_replaced_after_the_prompt_is_read_as_it_was_taken():
    base = Patcher(wide_module(2))
    patcher = base.clone()
    patcher.add_patches(adapters(2, 0), 0.8)
    key = "diffusion_model.0.weight"
    before = patcher.model.diffusion_model[0].weight.detach().clone()
    lookup = take_base_weights("model", patcher)
    # ComfyUI's default patching: a new Parameter in the module, the old tensor kept as backup
    patcher.model.diffusion_model[0].weight = torch.nn.Parameter(before + 1.0, requires_grad=False)
    assert torch.equal(lookup(key), before)


def test_a_weight_changed_in_place_is_refused_and_an_in_place_patcher_gets_a_copy():
    base = Patcher(wide_module(2))
    patcher = base.clone()
    patcher.add_patches(adapters(2, 0), 0.8)
    key = "diffusion_model.0.weight"
    lookup = take_base_weights("model", patcher)
    with torch.no_grad():
        patcher.model.diffusion_model[0].weight.add_(1.0)  # an in-place change torch sees
    with pytest.raises(BaseWeightNotTaken):
        lookup(key)
    patcher.weight_inplace_update = True  # ComfyUI's copy_to_param: prev.data.copy_(patched)
    before = patcher.model.diffusion_model[0].weight.detach().clone()
    lookup = take_base_weights("model", patcher)
    patcher.model.diffusion_model[0].weight.data.copy_(before * 2)  # no version counter sees this
    assert torch.equal(lookup(key), before)


def test_inference_tensors_without_a_version_counter_are_taken_too():
    with torch.inference_mode():  # how ComfyUI loads its weights
        base = Patcher(wide_module(2))
    patcher = base.clone()
    patcher.add_patches(adapters(2, 0), 0.8)
    key = "diffusion_model.0.weight"
    before = patcher.model.diffusion_model[0].weight
    lookup = take_base_weights("model", patcher)
    with torch.inference_mode():
        patcher.model.diffusion_model[0].weight = torch.nn.Parameter(before + 1.0, requires_grad=False)
    assert torch.equal(lookup(key), before)


def test_a_first_file_reads_back_once_after_the_prompt_and_a_repeat_never(lora_files):
    base = Patcher(wide_module(5))
    stack = [adapters(5, 3)]
    patcher = base.clone()
    patcher.add_patches(stack[0], 0.8)
    jobs = Jobs()
    with ReadbackCounter() as in_prompt:
        pending = build_lora_step("99", prompt(FILES[:1], [0.8]), patcher, lora_path=lora_files.get, defer=jobs)
    assert pending.pending and in_prompt.n_readbacks == 0
    with ReadbackCounter() as after:
        done, _ = jobs.run()
    assert after.n_readbacks == 1 and done.summary["model_delta_norm"] > 0
    again = base.clone()
    again.add_patches(stack[0], 0.4)  # the loader's cached tensors at a new strength
    with ReadbackCounter() as repeat:
        step = build_lora_step("99", prompt(FILES[:1], [0.4]), again, lora_path=lora_files.get, defer=jobs)
    assert not step.pending and repeat.n_readbacks == 0 and len(jobs.works) == 1
    assert step.summary["model_delta_norm"] == pytest.approx(done.summary["model_delta_norm"] * 0.5, rel=1e-12)


def test_a_report_with_a_pending_step_renders_everywhere(lora_files):
    import jsonschema

    from monitors.engine.run_digest import run_digest
    from monitors.exporters.csv_tables import steps_csv
    from monitors.exporters.html import render_html
    from monitors.report import RunReport
    from tests.unit.test_report_store import SCHEMA

    patcher, _ = stacked(Patcher(wide_module(4)))
    pending = build(patcher, lora_files, defer=Jobs())
    report = RunReport("p1", "success", 1.0, 2.0, 1.0, steps=(pending,), complete=False).to_dict()
    jsonschema.validate(report, SCHEMA)
    html = render_html(report)
    assert "computed after the prompt" in html and "Traceback" not in html
    assert '<span class="badge">pending</span>' in html
    unfinished = {**report, "steps": [{**report["steps"][0], "pending": False, "unfinished_reason": "the prompt ended error"}]}
    assert "monitoring: the prompt ended error" in render_html(unfinished)
    assert "lora" in steps_csv(report)
    assert run_digest(report)["complete"] is False

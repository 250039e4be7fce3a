"""The LoRA step builder's decisions pinned with exact values (issue 18): which findings, at which
level, `success`, the loader counts, hop/loader pairing, when key coverage is computed, and the
exception list's limit. Plain fakes of ModelPatcher and CLIP (tests/unit/test_lora_patches.py),
real safetensors files, no ComfyUI."""

import os
import time
import traceback
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save_file

import monitors.lora.report as lora_report
import monitors.lora.step as lora_step
from monitors.lora.coverage import key_coverage
from monitors.lora.report import build_lora_step

from .test_lora_patches import WEIGHTS, Patcher, lora_patches, materialised_change, tiny_module


@pytest.fixture(autouse=True)
def _no_gpu(probes_for):
    probes_for("no GPU")


def codes(step) -> list[str]:
    return [f.code for f in step.findings]


def levels(step) -> dict[str, str]:
    return {f.code: f.level for f in step.findings}


def ckpt() -> dict:
    return {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "x.safetensors"}}


def loader(source: str, name: str, strength_model: float, strength_clip: float | None = None) -> dict:
    """A LoraLoader on `source` (LoraLoaderModelOnly when strength_clip is None)."""
    inputs = {"model": [source, 0], "lora_name": name, "strength_model": strength_model}
    if strength_clip is None:
        return {"class_type": "LoraLoaderModelOnly", "inputs": inputs}
    inputs.update(clip=[source, 1], strength_clip=strength_clip)
    return {"class_type": "LoraLoader", "inputs": inputs}


def monitor(source: str, clip: bool = True) -> dict:
    inputs = {"model": [source, 0]}
    if clip:
        inputs["clip"] = [source, 1]
    return {"class_type": "Monitor", "inputs": inputs}


def one_loader_prompt(strength_model=0.8, strength_clip=0.5) -> dict:
    return {
        "1": ckpt(),
        "3": loader("1", "style.safetensors", strength_model, strength_clip),
        "9": monitor("3", clip=strength_clip is not None),
    }


def patched(strength: float, seed: int = 1, times: int = 1) -> Patcher:
    """A patcher `times` loader clones away from its base, each adding rank-2 LoRAs on every weight."""
    patcher = Patcher(tiny_module())
    for i in range(times):
        patcher = patcher.clone()
        patcher.add_patches(lora_patches(2, seed + 10 * i), strength)
    return patcher


def clip_of(patcher: Patcher) -> SimpleNamespace:
    return SimpleNamespace(patcher=patcher, cond_stage_model=patcher.model, tokenizer=None)


@pytest.fixture
def lora_file(tmp_path):
    path = tmp_path / "style.safetensors"
    save_file(
        {"lora_unet_a.lora_up.weight": torch.zeros(4, 2), "lora_unet_a.lora_down.weight": torch.zeros(2, 4)},
        str(path),
    )
    return str(path)


def at(path: str):
    """The lora_path callable that finds every LoRA name at `path`."""
    return lambda name: path


def computed(n_file_keys: int, n_matched: int) -> dict:
    keys = [f"k{i}" for i in range(n_file_keys)]
    return {"computed": True, **key_coverage(keys, set(keys[:n_matched]))}


class Coverage:
    """The coverage callable: records its calls and answers with one coverage per call."""

    def __init__(self, *answers):
        self.answers, self.calls = list(answers), []

    def __call__(self, model, clip, path, index):
        self.calls.append((model, clip, path, index))
        return self.answers[len(self.calls) - 1]


# -- success and the findings that decide it ------------------------------------------------------


def test_one_loader_paired_with_its_hops_on_both_sides(lora_file):
    model, clip = patched(0.8), clip_of(patched(0.5, seed=5))
    coverage = Coverage(computed(6, 6))
    step = build_lora_step("9", one_loader_prompt(), model, clip, lora_path=at(lora_file), coverage=coverage)
    assert codes(step) == [] and step.monitor_errors == ()
    summary = step.summary
    assert summary["success"] is True
    assert (summary["n_loras"], summary["n_loras_skipped"]) == (1, 0)
    assert (summary["n_file_keys"], summary["n_matched_keys"], summary["n_unmatched_keys"]) == (6, 6, 0)
    # both paths connected: the coverage sees the MODEL and the CLIP
    ((seen_model, seen_clip, path, index),) = coverage.calls
    assert (
        seen_model is model
        and seen_clip is clip
        and path == lora_file
        and set(index)
        == {
            "lora_unet_a.lora_up.weight",
            "lora_unet_a.lora_down.weight",
        }
    )
    (row,) = step.details["loaders"]
    assert (row["on_model_path"], row["on_clip_path"]) == (True, True)
    assert (row["model_hop_index"], row["model_hop_consistent"]) == (0, True)
    assert (row["clip_hop_index"], row["clip_hop_consistent"]) == (0, True)
    assert step.details["model"]["hops"][0]["loader_node_id"] == "3"
    assert step.details["clip"]["hops"][0]["loader_node_id"] == "3"
    for kind, strength, seed in (("model", 0.8, 1), ("clip", 0.5, 5)):
        patches = lora_patches(2, seed)
        deltas = [materialised_change(patches, strength, key) for key in WEIGHTS]
        bases = [tiny_module().state_dict()[key].double() for key in WEIGHTS]
        delta = sum(float(d.pow(2).sum()) for d in deltas) ** 0.5
        base = sum(float(b.pow(2).sum()) for b in bases) ** 0.5
        assert summary[f"{kind}_delta_norm"] == pytest.approx(delta, rel=1e-5)
        assert summary[f"{kind}_relative_change_ratio"] == pytest.approx(delta / base, rel=1e-5)
        assert summary[f"{kind}_n_hops"] == 1 and summary[f"{kind}_n_patch_keys_added"] == 3
        assert summary[f"{kind}_delta_norm_partial"] is False
        assert summary[f"{kind}_n_patches_not_applied"] == 0
        assert summary[f"{kind}_patch_bytes"] == sum(
            t.numel() * 4 for key in WEIGHTS for t in patches[key].weights[:2]
        )
        assert summary[f"{kind}_n_state_dict_keys_before"] == summary[f"{kind}_n_state_dict_keys_after"] == 6


def test_model_only_loader_without_clip_succeeds_with_no_finding(lora_file):
    step = build_lora_step("9", one_loader_prompt(strength_clip=None), patched(0.8), lora_path=at(lora_file))
    assert codes(step) == [] and step.summary["success"] is True
    (row,) = step.details["loaders"]
    assert (row["on_model_path"], row["on_clip_path"], row["model_hop_index"]) == (True, False, 0)
    assert "clip" not in step.details
    for field in ("n_hops", "n_patch_keys_added", "delta_norm", "delta_norm_partial", "patch_bytes"):
        assert step.summary[f"clip_{field}"] is None
    assert step.summary["clip_n_state_dict_keys_before"] is None


def test_patches_without_a_loader_in_the_graph_are_a_success():
    step = build_lora_step("9", {}, patched(1.0))
    assert codes(step) == [] and step.summary["success"] is True and step.summary["n_loras"] == 0


def test_a_clip_side_alone_decides_success():
    step = build_lora_step("9", {}, Patcher(tiny_module()), clip_of(patched(0.5)))
    assert codes(step) == [] and step.summary["success"] is True
    assert (step.summary["model_n_hops"], step.summary["clip_n_hops"]) == (0, 1)


def test_strength_zero_patches_apply_nothing_and_strength_one_does():
    zero = build_lora_step("9", {}, patched(0.0))
    assert codes(zero) == ["lora_no_patches"] and levels(zero) == {"lora_no_patches": "warning"}
    assert zero.summary["success"] is False and zero.summary["model_delta_norm"] == 0.0
    one = build_lora_step("9", {}, patched(1.0))
    assert codes(one) == [] and one.summary["success"] is True


def test_clip_not_connected_is_said_only_for_a_clip_strength(lora_file):
    # a LoraLoader whose CLIP strength is not 0 while the monitor sees no CLIP: info, still a success
    step = build_lora_step("9", one_loader_prompt(strength_clip=0.5), patched(0.8), lora_path=at(lora_file))
    assert codes(step) == ["lora_clip_not_connected"] and levels(step)["lora_clip_not_connected"] == "info"
    assert step.summary["success"] is True
    (row,) = step.details["loaders"]
    assert (row["on_model_path"], row["on_clip_path"]) == (True, False)
    # its CLIP strength 0: nothing of the LoRA goes to the text encoder, nothing to say
    step = build_lora_step("9", one_loader_prompt(strength_clip=0.0), patched(0.8), lora_path=at(lora_file))
    assert codes(step) == [] and step.summary["success"] is True
    # the CLIP connected: no finding either
    step = build_lora_step(
        "9",
        one_loader_prompt(strength_clip=0.5),
        patched(0.8),
        clip_of(patched(0.5)),
        lora_path=at(lora_file),
    )
    assert codes(step) == []


def wide_module(n_blocks: int = 7) -> torch.nn.Module:
    root = torch.nn.Module()
    root.diffusion_model = torch.nn.Module()
    root.diffusion_model.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(n_blocks)])
    return root


def test_shape_mismatches_are_an_error_that_fails_the_step():
    base = Patcher(wide_module())
    after = base.clone()
    after.add_patches({f"diffusion_model.blocks.{i}.bias": ("diff", (torch.ones(3),)) for i in range(7)})
    after.add_patches({"diffusion_model.blocks.0.weight": ("diff", (torch.ones(4, 4),))})
    step = build_lora_step("9", {}, after)
    assert codes(step) == ["lora_shape_mismatch"] and levels(step)["lora_shape_mismatch"] == "error"
    assert step.summary["success"] is False, "an applied patch does not outweigh an error"
    assert step.summary["model_n_patches_not_applied"] == 7
    (finding,) = step.findings
    head, examples = finding.message.split(" (", 1)
    assert head.startswith("model: 7 patches do not fit the shape of the model's weights")
    # the first five mismatched rows, in key order
    assert examples.rstrip(")").split("; ") == [
        f"diffusion_model.blocks.{i}.bias: file [3], model weight is [4]" for i in range(5)
    ]


def buffers_module(n: int = 6) -> torch.nn.Module:
    root = torch.nn.Module()
    root.diffusion_model = torch.nn.Module()
    for i in range(n):
        root.diffusion_model.register_buffer(f"b{i}", torch.zeros(4))
    return root


def test_patches_comfyui_never_applies_are_a_warning_and_no_success():
    base = Patcher(buffers_module())
    after = base.clone()
    after._load_list = lambda: []  # ComfyUI's loader: only leaf modules' parameters are patched
    after.add_patches({f"diffusion_model.b{i}": ("diff", (torch.ones(4),)) for i in range(6)})
    step = build_lora_step("9", {}, after)
    assert codes(step) == ["lora_patches_not_applied", "lora_no_patches"]
    assert levels(step) == {"lora_patches_not_applied": "warning", "lora_no_patches": "warning"}
    assert step.summary["success"] is False and step.summary["model_n_patches_not_applied"] == 6
    reason = "not a parameter: ComfyUI never patches it"
    assert step.findings[0].message == (
        "model: 6 patches are queued but ComfyUI never applies them ("
        + "; ".join(f"diffusion_model.b{i}: {reason}" for i in range(5))
        + ")"
    )


def test_a_partial_norm_total_is_an_info():
    after = patched(1.0)
    key = "diffusion_model.out.weight"
    after.patches[key].append((1.0, ("diff", (torch.ones(8, 16),)), 1.0, None, torch.tanh))
    step = build_lora_step("9", {}, after)
    assert codes(step) == ["lora_norm_unavailable"] and levels(step)["lora_norm_unavailable"] == "info"
    assert step.summary["success"] is True and step.summary["model_delta_norm_partial"] is True
    assert step.findings[0].message == (
        "model: the change norm total is partial: 1 weights have no norm (1 x a function is applied to the change)"
    )


def test_an_object_without_patches_is_not_analysed():
    step = build_lora_step("9", {}, SimpleNamespace(), SimpleNamespace(patcher=SimpleNamespace()))
    assert codes(step) == ["lora_not_a_patcher", "lora_not_a_patcher", "lora_no_patches"]
    assert [f.message for f in step.findings[:2]] == [
        "model: not analysed: SimpleNamespace has no patches",
        "clip: not analysed: SimpleNamespace has no patches",
    ]
    assert step.summary["success"] is False and step.summary["model_n_hops"] is None
    assert step.details["model"]["analysed"] is False


def test_a_before_object_without_its_after_is_ignored_with_a_warning():
    step = build_lora_step("9", {}, None, None, model_before=Patcher(tiny_module()), clip_before=object())
    assert codes(step) == ["lora_before_only", "lora_before_only", "lora_no_patches"]
    assert [f.message for f in step.findings[:2]] == [
        "model_before given without model: ignored",
        "clip_before given without clip: ignored",
    ]
    assert all(f.level == "warning" for f in step.findings)
    assert "model" not in step.details and "clip" not in step.details


# -- loaders: skipped, paired, key coverage -------------------------------------------------------


def test_a_skipped_loader_is_counted_and_gets_no_coverage_or_hop(lora_file):
    prompt = {
        "1": ckpt(),
        "3": loader("1", "off.safetensors", 0.0, 0.0),
        "4": loader("3", "style.safetensors", 0.8, 0.5),
        "9": monitor("4"),
    }
    coverage = Coverage(computed(4, 3))
    model, clip = patched(0.8), clip_of(patched(0.5))
    step = build_lora_step("9", prompt, model, clip, lora_path=at(lora_file), coverage=coverage)
    assert (step.summary["n_loras"], step.summary["n_loras_skipped"]) == (2, 1)
    near, far = step.details["loaders"]
    assert (near["node_id"], far["node_id"]) == ("4", "3") and far["skipped"] is True
    assert len(coverage.calls) == 1 and far["coverage"] is None and near["coverage"]["n_file_keys"] == 4
    assert (near["model_hop_index"], near["clip_hop_index"]) == (0, 0)
    assert "model_hop_index" not in far and "clip_hop_index" not in far
    assert codes(step) == ["lora_keys_unmatched", "lora_strength_zero"]  # loaders nearest first
    assert levels(step) == {"lora_strength_zero": "warning", "lora_keys_unmatched": "warning"}
    assert step.summary["success"] is True
    assert (
        step.summary["n_file_keys"],
        step.summary["n_matched_keys"],
        step.summary["n_unmatched_keys"],
    ) == (
        4,
        3,
        1,
    )


def test_only_skipped_loaders_and_no_patch_hop_pair_trivially(lora_file):
    prompt = {"1": ckpt(), "3": loader("1", "off.safetensors", 0.0, 0.0), "9": monitor("3")}
    base = Patcher(tiny_module())
    step = build_lora_step("9", prompt, base, clip_of(Patcher(tiny_module())), lora_path=at(lora_file))
    assert codes(step) == ["lora_strength_zero"], "no attribution finding, no 'no patches' with a loader"
    assert step.summary["success"] is False and step.summary["n_loras_skipped"] == 1
    assert step.summary["model_n_hops"] == 0


def test_more_patching_hops_than_loaders_cannot_be_paired(lora_file):
    step = build_lora_step(
        "9", one_loader_prompt(strength_clip=None), patched(0.8, times=2), lora_path=at(lora_file)
    )
    assert codes(step) == ["lora_attribution"] and levels(step)["lora_attribution"] == "info"
    assert step.summary["success"] is True and step.summary["model_n_hops"] == 2
    assert all("loader_node_id" not in hop for hop in step.details["model"]["hops"])
    assert "model_hop_index" not in step.details["loaders"][0]


def test_a_hop_of_another_strength_is_paired_but_inconsistent(lora_file):
    prompt = one_loader_prompt(strength_model=1.0, strength_clip=None)
    step = build_lora_step("9", prompt, patched(0.8), lora_path=at(lora_file))
    (row,) = step.details["loaders"]
    assert (row["model_hop_index"], row["model_hop_consistent"]) == (0, False)
    assert codes(step) == []


def test_an_explicit_before_is_compared_once_and_not_paired_with_loaders(lora_file):
    after = patched(0.8)
    prompt = one_loader_prompt(strength_clip=None)
    step = build_lora_step("9", prompt, after, model_before=after.parent, lora_path=at(lora_file))
    assert step.details["model"]["mode"] == "explicit"
    (hop,) = step.details["model"]["hops"]
    assert "loader_node_id" not in hop and "model_hop_index" not in step.details["loaders"][0]
    assert codes(step) == [] and step.summary["success"] is True


def test_coverage_only_for_a_readable_file(tmp_path, lora_file):
    prompt = one_loader_prompt(strength_clip=None)
    # no file and no coverage callable: nothing to compute, nothing failed
    missing = build_lora_step("9", prompt, patched(0.8))
    assert missing.monitor_errors == () and missing.details["loaders"][0]["coverage"] is None
    assert codes(missing) == ["lora_file_missing"] and missing.summary["success"] is False
    # a corrupt header or cut data: the coverage is not asked for
    corrupt = tmp_path / "corrupt.safetensors"
    corrupt.write_bytes(b"\xff" * 64)
    truncated = tmp_path / "cut.safetensors"
    truncated.write_bytes(open(lora_file, "rb").read())
    os.truncate(truncated, os.path.getsize(truncated) - 4)
    for path in (corrupt, truncated):
        coverage = Coverage(computed(2, 2))
        step = build_lora_step("9", prompt, patched(0.8), lora_path=at(str(path)), coverage=coverage)
        assert coverage.calls == [] and step.details["loaders"][0]["coverage"] is None
        assert codes(step) == ["lora_file_corrupt"] and step.summary["success"] is False
        assert step.summary["n_file_keys"] is None and step.monitor_errors == ()
    # a coverage that could not be computed counts as unknown, not as 0 keys
    coverage = Coverage({"computed": False, "reason": "no key map"})
    step = build_lora_step("9", prompt, patched(0.8), lora_path=at(lora_file), coverage=coverage)
    assert len(coverage.calls) == 1 and coverage.calls[0][1] is None  # model-only loader: no CLIP
    assert step.summary["n_file_keys"] is None and step.summary["n_unmatched_keys"] is None


def test_coverages_of_stacked_loaders_add_up(lora_file):
    prompt = {
        "1": ckpt(),
        "3": loader("1", "a.safetensors", 0.8),
        "4": loader("3", "b.safetensors", 0.8),
        "9": monitor("4", clip=False),
    }
    coverage = Coverage(computed(10, 7), computed(5, 5))
    step = build_lora_step("9", prompt, patched(0.8, times=2), lora_path=at(lora_file), coverage=coverage)
    assert (
        step.summary["n_file_keys"],
        step.summary["n_matched_keys"],
        step.summary["n_unmatched_keys"],
    ) == (
        15,
        12,
        3,
    )
    assert [row["model_hop_index"] for row in step.details["loaders"]] == [0, 1]
    assert codes(step) == ["lora_keys_unmatched"] and step.summary["success"] is True


# -- caught exceptions ----------------------------------------------------------------------------


class Unreadable:
    """A patcher whose patches cannot be read: the side's analysis raises."""

    @property
    def patches(self):
        raise RuntimeError("patches unreadable")


def test_exceptions_are_listed_in_order_up_to_five():
    prompt = {"1": ckpt()}
    for i in range(3, 11):  # loaders 3..10 stacked, each with a CLIP
        prompt[str(i)] = loader(str(i - 1) if i > 3 else "1", f"{i}.safetensors", 0.8, 0.5)
    prompt["20"] = monitor("10")

    def broken(name):
        raise OSError(f"share offline: {name}")

    step = build_lora_step(
        "20", prompt, Unreadable(), SimpleNamespace(patcher=Unreadable()), lora_path=broken
    )
    assert step.details["n_exceptions"] == 10 and len(step.monitor_errors) == 10
    assert [e["where"] for e in step.details["exceptions"]] == [
        "model",
        "clip",
        "loader 10",
        "loader 9",
        "loader 8",
    ]
    assert step.monitor_errors[:3] == (
        "model: RuntimeError: patches unreadable",
        "clip: RuntimeError: patches unreadable",
        "loader 10: OSError: share offline: 10.safetensors",
    )
    assert "model" not in step.details and step.summary["model_n_hops"] is None
    assert step.summary["n_loras"] == 8 and step.summary["success"] is False


def test_a_traceback_at_exactly_the_limit_is_whole(monkeypatch):
    try:
        raise ValueError("bad")
    except ValueError as exc:
        caught = exc
    trace = "".join(traceback.format_exception(type(caught), caught, caught.__traceback__))
    monkeypatch.setattr(lora_step, "MAX_TRACEBACK_CHARS", len(trace))
    whole = lora_step.caught_exception("here", caught)
    assert whole["traceback"] == trace and whole["traceback_truncated"] is False
    monkeypatch.setattr(lora_step, "MAX_TRACEBACK_CHARS", len(trace) - 1)
    cut = lora_step.caught_exception("here", caught)
    assert cut["traceback"] == trace[1:] and cut["traceback_truncated"] is True


def test_analysis_time_is_measured_by_the_clock(monkeypatch):
    ticks = iter([100.0, 102.5])
    monkeypatch.setattr(
        lora_report, "time", SimpleNamespace(perf_counter=lambda: next(ticks), time=time.time)
    )
    step = build_lora_step("9", {}, patched(0.8))
    assert step.summary["analysis_s"] == pytest.approx(2.5)

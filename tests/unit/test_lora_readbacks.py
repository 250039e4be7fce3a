"""The GPU rule on a CPU (issue 25): a LoRA step reads back a constant number of times whatever its
number of keys, a repeated step with another strength reads no base weight and no LoRA factor,
and every reused figure equals a fresh computation (tests/readbacks.py counts the read-backs)."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from monitors.lora.caches import FILE_FIGURES, clear_caches
from monitors.lora.report import build_lora_step
from tests.readbacks import ReadbackCounter
from tests.unit.recorded_products import Recorded, record, shapes

from .test_lora_norms import Adapter, rand
from .test_lora_patches import Patcher


def wide_module(n_keys: int) -> torch.nn.Module:
    torch.manual_seed(n_keys)
    root = torch.nn.Module()
    root.diffusion_model = torch.nn.ModuleList([torch.nn.Linear(24, 16) for _ in range(n_keys)])
    return root


def adapters(n_keys: int, seed: int) -> dict:
    return {
        f"diffusion_model.{i}.weight": Adapter(
            "lora", (rand(16, 4, seed=seed + i), rand(4, 24, seed=seed + 500 + i), 2.0, None, None, None)
        )
        for i in range(n_keys)
    }


def prompt(files: list[str], strengths: list[float]) -> dict:
    graph = {"1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "x.safetensors"}}}
    source = "1"
    for i, (name, strength) in enumerate(zip(files, strengths, strict=True)):
        node = str(10 + i)
        graph[node] = {
            "class_type": "LoraLoaderModelOnly",
            "inputs": {"model": [source, 0], "lora_name": name, "strength_model": strength},
        }
        source = node
    graph["99"] = {"class_type": "Monitor", "inputs": {"model": [source, 0]}}
    return graph


@pytest.fixture
def lora_files(tmp_path):
    """Two files on disk: their identity (path, size, mtime) is what the figures are kept by."""
    paths = {}
    for name in ("a.safetensors", "b.safetensors"):
        paths[name] = str(tmp_path / name)
        save_file({"x": torch.zeros(1)}, paths[name])
    clear_caches()
    yield paths
    clear_caches()


def step(base: Patcher, stack: list[dict], files: list[str], strengths: list[float], paths: dict):
    """A LoRA step on `base` with one loader per (adapters, file, strength), as ComfyUI's loaders do."""
    patcher = base
    for patches, strength in zip(stack, strengths, strict=True):
        patcher = patcher.clone()
        patcher.add_patches(patches, strength)
    return build_lora_step("99", prompt(files, strengths), patcher, lora_path=paths.get)


def readbacks(base, stack, files, strengths, paths) -> tuple:
    with ReadbackCounter() as counter:
        report = step(base, stack, files, strengths, paths)
    return report, counter


@pytest.mark.parametrize("stacked", [False, True])
def test_a_step_reads_back_a_constant_number_of_times_whatever_its_keys(lora_files, stacked):
    counts = []
    for n_keys in (3, 40):
        clear_caches()
        files = ["a.safetensors", "b.safetensors"] if stacked else ["a.safetensors"]
        stack = [adapters(n_keys, seed) for seed in range(len(files))]
        report, counter = readbacks(
            Patcher(wide_module(n_keys)), stack, files, [0.8] * len(files), lora_files
        )
        assert report.summary["model_n_patch_keys_added"] == n_keys
        assert report.summary["model_relative_change_ratio"] > 0
        counts.append(counter.n_readbacks)
    assert counts[0] == counts[1]
    # patches and base norms in one transfer, the weights' totals (stacked: inner products) in another
    assert counts[0] == (2 if stacked else 1)


def test_a_new_strength_reads_no_base_weight_and_reuses_every_figure(lora_files):
    base = Patcher(wide_module(12))
    stack = [adapters(12, 0), adapters(12, 7)]
    files = ["a.safetensors", "b.safetensors"]
    first = step(base, stack, files, [0.8, 0.3], lora_files)
    assert first.details["model"]["reuse"]["n_base_norms_computed"] == 12
    report, counter = readbacks(base, stack, files, [0.5, -0.25], lora_files)
    reuse = report.details["model"]["reuse"]
    assert counter.n_readbacks == 0
    weights = [p for p in base.model.parameters()]
    factors = [t for patches in stack for a in patches.values() for t in a.weights[:2]]
    assert not any(counter.touched(t) for t in weights + factors)
    assert reuse["n_base_norms_reused"] == 12 and reuse["n_base_norms_computed"] == 0
    assert reuse["n_delta_norms_reused"] == 24 and reuse["n_delta_norms_computed"] == 0
    assert reuse["n_inner_products_reused"] == 36 and reuse["n_inner_products_computed"] == 0
    # the same figures from scratch
    clear_caches()
    fresh = step(base, stack, files, [0.5, -0.25], lora_files)
    assert fresh.details["model"]["reuse"]["n_base_norms_reused"] == 0
    for field in ("model_delta_norm", "model_relative_change_ratio"):
        assert report.summary[field] == pytest.approx(fresh.summary[field], rel=1e-12)
    reused_rows = report.details["model"]["overall"]["weights"]
    fresh_rows = fresh.details["model"]["overall"]["weights"]
    for got, want in zip(reused_rows, fresh_rows, strict=True):
        assert got["delta_norm"] == pytest.approx(want["delta_norm"], rel=1e-12)
        assert got["base_norm"] == want["base_norm"]


def test_the_stack_total_is_the_float64_norm_of_the_summed_change(lora_files):
    base = Patcher(wide_module(4))
    stack = [adapters(4, 0), adapters(4, 7)]
    files = ["a.safetensors", "b.safetensors"]
    step(base, stack, files, [0.8, 0.3], lora_files)
    report = step(base, stack, files, [0.5, -0.25], lora_files)  # rescaled from the cache
    expected = 0.0
    for key in stack[0]:
        change = sum(
            strength * (a[key].weights[2] / 4) * (a[key].weights[0].double() @ a[key].weights[1].double())
            for a, strength in zip(stack, (0.5, -0.25), strict=True)
        )
        expected += float(change.pow(2).sum())
    assert report.summary["model_delta_norm"] == pytest.approx(expected**0.5, rel=1e-6)


def test_other_tensors_under_the_same_file_are_not_given_its_figures(lora_files):
    base = Patcher(wide_module(3))
    kept = [adapters(3, 0)]  # alive, as a loader's cached file is: its figures are its tensors'
    first = step(base, kept, ["a.safetensors"], [1.0], lora_files)
    other = step(base, [adapters(3, 50)], ["a.safetensors"], [1.0], lora_files)
    assert other.details["model"]["reuse"]["n_delta_norms_reused"] == 0
    assert other.summary["model_delta_norm"] != pytest.approx(first.summary["model_delta_norm"])
    assert FILE_FIGURES.stats()["n_files"] == 1


def test_a_changed_file_is_a_new_file(lora_files):
    base = Patcher(wide_module(3))
    stack = [adapters(3, 0)]
    step(base, stack, ["a.safetensors"], [1.0], lora_files)
    save_file({"x": torch.zeros(2)}, lora_files["a.safetensors"])  # another size: another identity
    again = step(base, stack, ["a.safetensors"], [1.0], lora_files)
    assert again.details["model"]["reuse"]["n_delta_norms_reused"] == 0


def test_base_norms_go_with_their_model(lora_files):
    import gc

    from monitors.lora.caches import BASE_NORMS

    base = Patcher(wide_module(3))
    step(base, [adapters(3, 0)], ["a.safetensors"], [1.0], lora_files)
    assert BASE_NORMS.n_models() == 1
    del base
    gc.collect()
    assert BASE_NORMS.n_models() == 0


def test_the_low_rank_norms_of_a_step_are_one_batched_product_per_shape(lora_files):
    """On a GPU each small kernel costs a launch: 40 keys of one shape make one batched Gram pair
    (its trace taken once), not 40; a key of another shape is a batch of its own."""
    patches = adapters(40, seed=3)
    patches["diffusion_model.40.weight"] = Adapter(
        "lora", (rand(16, 2, seed=7), rand(2, 24, seed=8), 2.0, None, None, None)
    )
    for key, adapter in patches.items():  # factors that record the products made from them
        up, down, *rest = adapter.weights
        patches[key] = Adapter(adapter.name, (*record(up, down), *rest))
    Recorded.products = []
    module = wide_module(41)
    report = step(Patcher(module), [patches], ["a.safetensors"], [0.5], lora_files)
    # one batched Gram pair per shape: 40 of rank 4, one of rank 2
    assert sorted(shapes()) == [(1, 2, 2), (1, 2, 2), (40, 4, 4), (40, 4, 4)]
    rows = report.details["model"]["overall"]["weights"]
    assert len(rows) == 41 and all(row["delta_norm"] is not None for row in rows)
    up, down = patches["diffusion_model.7.weight"].weights[:2]
    expected = 0.5 * 2.0 / 4 * float(torch.linalg.matrix_norm(up.double() @ down.double()))
    row = next(r for r in rows if r["key"] == "diffusion_model.7.weight")
    assert row["delta_norm"] == pytest.approx(expected, rel=1e-6)


def test_steps_never_change_what_the_file_caches_serve_them(lora_files, tmp_path):
    """The file statuses and key coverage are served without a deep copy (a new top-level dict,
    the nested values shared): the step that reads them, and its report, must leave them as stored."""
    import copy
    import json

    from monitors.lora.caches import COVERAGE, FILE_STATUSES, file_identity
    from monitors.lora.coverage import key_coverage

    base = Patcher(wide_module(2))
    graph = prompt(["a.safetensors"], [0.5])
    ident = file_identity(lora_files["a.safetensors"])

    def coverage(model, clip, path, index):  # as nodes/lora_keys.py keeps it: by the loaded modules
        modules = (model.model, None)
        found = COVERAGE.get(file_identity(path), modules)
        if found is None:
            found = {**key_coverage(["a.weight", "te.b.weight"], {"a.weight"}), "computed": True}
            COVERAGE.put(file_identity(path), modules, found)
        return found

    def run(strength: float) -> dict:
        patcher = base.clone()
        patcher.add_patches(adapters(2, 0), strength)
        graph["10"]["inputs"]["strength_model"] = strength
        report = build_lora_step("99", graph, patcher, lora_path=lora_files.get, coverage=coverage)
        return json.loads(json.dumps(report.to_dict()))

    run(0.5)
    stored_status = copy.deepcopy(FILE_STATUSES.get(ident))
    stored_coverage = copy.deepcopy(COVERAGE.get(ident, (base.model, None)))
    assert stored_status is not None and stored_coverage["n_unmatched_keys"] == 1
    second = run(0.75)
    assert second["details"]["loaders"][0]["file"]["name"] == "a.safetensors"
    assert FILE_STATUSES.get(ident)[0] == stored_status[0]
    assert second["details"]["loaders"][0]["coverage"]["unmatched_keys"] == ["te.b.weight"]
    assert COVERAGE.get(ident, (base.model, None)) == stored_coverage

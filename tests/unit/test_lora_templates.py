"""Row templates (monitors/lora/templates.py, issue 35): a new strength on a loaded module and file is
a rescale of what was computed once, and every figure equals a fresh computation."""

from __future__ import annotations

import gc
import math

import pytest
import torch
from safetensors.torch import save_file

from monitors.lora.caches import clear_caches
from monitors.lora.templates import TEMPLATES
from tests.readbacks import ReadbackCounter

from .test_lora_norms import Adapter, rand
from .test_lora_patches import Patcher
from .test_lora_readbacks import adapters, step, wide_module


@pytest.fixture
def lora_files(tmp_path):
    """Two files on disk (their identity is what file figures and templates are kept by)."""
    paths = {}
    for name in ("a.safetensors", "b.safetensors"):
        paths[name] = str(tmp_path / name)
        save_file({"x": torch.zeros(1)}, paths[name])
    clear_caches()
    yield paths
    clear_caches()


def assert_same(got, want, path="") -> None:
    """Equal data, floats within 1e-12 relative."""
    if isinstance(want, float) and isinstance(got, float):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-300) or (math.isnan(got) and math.isnan(want)), (
            path
        )
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (path, set(got) ^ set(want))
        for key in want:
            assert_same(got[key], want[key], f"{path}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{path}[{i}]")
    else:
        assert got == want, (path, got, want)


def figures(report) -> dict:
    """The side's strength-dependent figures and rows (ids and reuse counts left out)."""
    side = report.details["model"]
    return {
        "overall": side["overall"],
        "hops": [{k: hop[k] for k in ("keys", "totals", "by_block")} for hop in side["hops"]],
        "summary": {k: v for k, v in report.summary.items() if not k.endswith("_s") and "object_id" not in k},
    }


def mixed_stack(n_keys: int) -> list[dict]:
    """Two files on the same weights, the second with one patch made for another model size."""
    second = adapters(n_keys, 7)
    second["diffusion_model.0.weight"] = Adapter(
        "lora", (rand(16, 4, seed=90), rand(4, 20, seed=91), 2.0, None, None, None)
    )
    return [adapters(n_keys, 0), second]


@pytest.mark.parametrize("strengths", [[0.35, -1.5], [1.25, 2.0]])
def test_a_new_strength_equals_a_fresh_computation(lora_files, strengths):
    base = Patcher(wide_module(6))
    stack = mixed_stack(6)
    files = ["a.safetensors", "b.safetensors"]
    step(base, stack, files, [0.8, 0.3], lora_files)
    assert TEMPLATES.n_templates(base.model) == 12
    with ReadbackCounter() as counter:
        again = step(base, stack, files, strengths, lora_files)
    assert counter.n_readbacks == 0
    weights = list(base.model.parameters())
    factors = [t for patches in stack for a in patches.values() for t in a.weights[:2]]
    assert not any(counter.touched(t) for t in weights + factors)
    assert again.details["model"]["reuse"]["n_delta_norms_reused"] == 12
    clear_caches()
    fresh = step(base, stack, files, strengths, lora_files)
    assert fresh.details["model"]["reuse"]["n_delta_norms_reused"] == 0
    assert_same(figures(again), figures(fresh))


def test_a_template_is_served_read_only(lora_files):
    base = Patcher(wide_module(3))
    stack = [adapters(3, 0)]
    step(base, stack, ["a.safetensors"], [1.0], lora_files)
    first = step(base, stack, ["a.safetensors"], [0.5], lora_files)
    for row in first.details["model"]["hops"][0]["keys"]:
        row["rank"], row["block"], row["applied"] = -1, "changed", False
    again = step(base, stack, ["a.safetensors"], [0.5], lora_files)
    rows = again.details["model"]["hops"][0]["keys"]
    assert {r["rank"] for r in rows} == {4} and all(r["applied"] for r in rows)
    assert {r["block"] for r in rows} == {f"diffusion_model.{i}" for i in range(3)}


def test_other_tensors_of_the_same_shapes_get_no_template(lora_files):
    base = Patcher(wide_module(3))
    kept = [adapters(3, 0)]
    first = step(base, kept, ["a.safetensors"], [1.0], lora_files)
    other = step(base, [adapters(3, 50)], ["a.safetensors"], [1.0], lora_files)
    assert other.details["model"]["reuse"]["n_delta_norms_reused"] == 0
    assert other.summary["model_delta_norm"] != pytest.approx(first.summary["model_delta_norm"])


def test_templates_go_with_their_model(lora_files):
    base = Patcher(wide_module(3))
    step(base, [adapters(3, 0)], ["a.safetensors"], [1.0], lora_files)
    assert TEMPLATES.n_templates(base.model) == 3 and TEMPLATES.n_models() == 1
    del base
    gc.collect()
    assert TEMPLATES.n_models() == 0

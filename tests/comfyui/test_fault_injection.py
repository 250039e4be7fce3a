"""Fault injection under ComfyUI's real PromptExecutor, in-process: every probe, each analyser entry
point the monitor nodes call, and the report writer made to raise in turn. Every monitor still
passes its inputs through as the very same objects, the prompt succeeds, and the report records
the failure. And an out-of-memory inside the VAE encode is reported with a snapshot of what was
loaded at the time."""

from __future__ import annotations

import logging
import uuid

import pytest
import torch
from dump_support import dumps_dir
from vae_encode_support import noise_image
from vae_encode_support import run_node as run_vae_node

from tests.comfyui.conftest import classic_executor

pytestmark = pytest.mark.comfyui

FAULT = "injected fault"
COMPARED_DUMP = "pm_fault_reference"
PRODUCED: dict = {}
RECEIVED: dict = {}
TINY: dict = {}


class PMFaultSources:
    """MODEL, CLIP, VAE (the session's tiny ones) and fresh CONDITIONING, LATENT, IMAGE."""

    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ("MODEL", "CLIP", "VAE", "CONDITIONING", "LATENT", "IMAGE")
    FUNCTION = "run"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seed": ("INT", {"default": 0, "min": 0, "max": 2**31 - 1})}}

    def run(self, seed):
        generator = torch.Generator().manual_seed(seed)
        values = {
            "model": TINY["model"],
            "clip": TINY["clip"],
            "vae": TINY["vae"],
            "conditioning": [[torch.randn(1, 77, 32, generator=generator), {"pooled_output": None}]],
            "latent": {"samples": torch.randn(1, 4, 8, 8, generator=generator)},
            "image": torch.rand(1, 64, 64, 3, generator=generator),
        }
        PRODUCED.clear()
        PRODUCED.update(values)
        return tuple(values.values())


class PMFaultSink:
    """Output node that keeps what it received, to check identity with what the sources made."""

    CATEGORY = "pipeline_monitor/testing"
    RETURN_TYPES = ()
    FUNCTION = "run"
    OUTPUT_NODE = True
    NAMES = ("model", "clip", "vae", "conditioning", "latent", "image", "encoded")
    TYPES = ("MODEL", "CLIP", "VAE", "CONDITIONING", "LATENT", "IMAGE", "LATENT")

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}, "optional": {n: (t,) for n, t in zip(cls.NAMES, cls.TYPES, strict=True)}}

    def run(self, **received):
        RECEIVED.clear()
        RECEIVED.update(received)
        return {"ui": {"received": [len(received)]}}


def fault_prompt(seed: int) -> dict:
    return {
        "1": {"class_type": "PMFaultSources", "inputs": {"seed": seed}},
        "2": {
            "class_type": "PipelineMonitorModels",
            "inputs": {"model": ["1", 0], "clip": ["1", 1], "vae": ["1", 2]},
        },
        "3": {"class_type": "PipelineMonitorLora", "inputs": {"model": ["2", 0], "clip": ["2", 1]}},
        "4": {
            "class_type": "PipelineMonitorConditioning",
            "inputs": {"positive": ["1", 3], "negative": ["1", 3], "clip": ["3", 1]},
        },
        "5": {"class_type": "PipelineMonitorLatent", "inputs": {"latent": ["1", 4]}},
        "6": {
            "class_type": "PipelineMonitorTensorDump",
            "inputs": {
                "name": "pm_fault_dump",
                "npy": False,
                "conditioning": ["4", 0],
                "latent": ["5", 0],
                "image": ["1", 5],
            },
        },
        "7": {
            "class_type": "PipelineMonitorTensorCompare",
            "inputs": {
                "dump_a": COMPARED_DUMP + ".safetensors",
                "dump_b": "(live value)",
                "rtol": 1e-5,
                "atol": 1e-8,
                "latent": ["6", 1],
            },
        },
        "8": {
            "class_type": "PipelineMonitorVAEEncode",
            "inputs": {
                "pixels": ["6", 2],
                "vae": ["2", 2],
                "strategy": "direct",
                "allow_dummy": False,
                "tile_size": 512,
                "overlap": 64,
                "temporal_size": 64,
                "temporal_overlap": 8,
            },
        },
        "9": {
            "class_type": "PMFaultSink",
            "inputs": {
                "model": ["3", 0],
                "clip": ["3", 1],
                "vae": ["2", 2],
                "conditioning": ["4", 0],
                "latent": ["6", 1],
                "image": ["6", 2],
                "encoded": ["8", 0],
            },
        },
    }


MONITOR_IDS = ("2", "3", "4", "5", "6", "7", "8")

# (module, name it imported): the analyser entry points the step builders call, the builders the
# nodes call, and the one UI text function of the node adapter.
ANALYSERS = [
    ("monitors.models.report", "describe"),
    ("monitors.models.report", "get_probes"),
    ("nodes.models_node", "build_models_step"),
    ("monitors.engine.run_reads", "upstream_node_ids"),
    ("monitors.lora.step", "analyse_side"),
    ("monitors.lora.report", "upstream_loaders"),
    ("monitors.lora.report", "merge_loaders"),
    ("monitors.conditioning.report", "analyse_conditioning"),
    ("monitors.conditioning.report", "trace_text_encoders"),
    ("monitors.latent.report", "analyse_latent"),
    ("monitors.dumps.report", "collect_tensors"),
    ("monitors.dumps.write_step", "plan_dump"),
    ("monitors.dumps.writer", "write_planned"),  # on the writer thread: the step says so
    ("monitors.dumps.report", "guess_encoder_family"),
    ("monitors.dumps.report", "compare_dump_with"),
    ("nodes.vae_encode_node", "run_chain"),
    ("monitors.vae.report", "build_step"),
    ("monitors.vae.report", "describe_vae"),
    ("nodes.node_support", "step_text"),
]


def raiser(*args, **kwargs):
    raise RuntimeError(FAULT)


@pytest.fixture
def setup(comfy, tiny, pack_runtime):
    TINY.update(model=tiny.model, clip=tiny.clip, vae=tiny.vae)
    mappings = comfy.nodes.NODE_CLASS_MAPPINGS
    added = {"PMFaultSources": PMFaultSources, "PMFaultSink": PMFaultSink}
    mappings.update(added)
    dumps = comfy.pack_module("monitors.dumps.files")
    collect = comfy.pack_module("monitors.dumps.collect")
    dumps.write_dump(
        str(dumps_dir()), COMPARED_DUMP, collect.collect_tensors(latent={"samples": torch.zeros(1, 4, 8, 8)})
    )
    executor = classic_executor(comfy)
    yield executor, pack_runtime
    for name in added:
        mappings.pop(name, None)
    TINY.clear()
    PRODUCED.clear()
    RECEIVED.clear()


def run_prompt(executor, runtime) -> dict:
    prompt_id = str(uuid.uuid4())
    prompt = fault_prompt(seed=uuid.uuid4().int % 1000)
    with torch.inference_mode():
        executor.execute(prompt, prompt_id, {}, ["9", *MONITOR_IDS])
    assert executor.success, executor.status_messages[-3:]
    report = runtime.store.get(prompt_id)
    assert report is not None and report["status"] == "success"
    return report


def assert_passthrough():
    for name in ("model", "clip", "vae", "conditioning", "latent", "image"):
        assert RECEIVED[name] is PRODUCED[name], name
    encoded = RECEIVED["encoded"]["samples"]
    assert isinstance(encoded, torch.Tensor) and list(encoded.shape) == [1, 4, 8, 8]


def all_errors(report) -> list[str]:
    return list(report["monitor_errors"]) + [e for s in report["steps"] for e in s["monitor_errors"]]


def test_no_fault_baseline(setup):
    report = run_prompt(*setup)
    assert_passthrough()
    kinds = sorted(s["kind"] for s in report["steps"])
    assert kinds == sorted(
        ["models", "lora", "conditioning", "latent", "tensor_dump", "tensor_compare", "vae_encode"]
    )
    assert all_errors(report) == []


def test_every_probe_failing(comfy, setup):
    probes_mod = comfy.pack_module("monitors.probes")
    fake = comfy.pack_module("monitors.probes.fake").fake_probes("1 GPU")
    fake.host.fail.add("*")
    fake.torch.fail.add("*")
    fake.nvml.missing = True  # the fake NVML fails by being absent
    previous = probes_mod.set_probes(fake)
    try:
        report = run_prompt(*setup)
    finally:
        probes_mod.set_probes(previous)
    assert_passthrough()
    assert any("fake failure" in e or "unavailable" in e for e in all_errors(report)), all_errors(report)


@pytest.mark.parametrize(("module", "name"), ANALYSERS, ids=[f"{m.split('.')[-1]}.{n}" for m, n in ANALYSERS])
def test_each_analyser_failing(comfy, setup, monkeypatch, module, name):
    node_module = comfy.pack_module(module)
    assert callable(getattr(node_module, name)), f"{module} no longer imports {name}"
    monkeypatch.setattr(node_module, name, raiser)
    report = run_prompt(*setup)
    assert_passthrough()
    assert any(FAULT in e for e in all_errors(report)), (module, name, all_errors(report))


def test_report_file_write_failing(comfy, setup, monkeypatch, caplog):
    store_mod = comfy.pack_module("monitors.engine.store")
    monkeypatch.setattr(store_mod, "write_json_atomic", raiser)
    executor, runtime = setup
    report = run_prompt(executor, runtime)
    assert_passthrough()
    assert any(FAULT in e and report["prompt_id"] in e for e in runtime.store.write_errors)


def test_report_store_write_raising(comfy, setup, monkeypatch, caplog):
    executor, runtime = setup
    # Kept patch of a private name: the fault is the disk write itself raising after the store took
    # the report; the store has no public seam for that write.
    monkeypatch.setattr(runtime.store, "_write", raiser)
    caplog.set_level(logging.WARNING)
    report = run_prompt(executor, runtime)  # the report is still kept in memory
    assert_passthrough()
    assert any(FAULT in r.getMessage() and report["prompt_id"] in r.getMessage() for r in caplog.records)


def test_faults_injected_count():
    # baseline excluded: the probes, each analyser, the two writer faults
    assert 1 + len(ANALYSERS) + 2 >= 20


# -- out of memory inside a monitored step --------------------------------------------------------


class OomVAEModel:
    def __init__(self, module):
        self.module = module

    def __call__(self, *args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB (simulated)")


def test_out_of_memory_reports_what_was_loaded(comfy, tiny, pack_runtime, monkeypatch):
    monkeypatch.setattr(tiny.vae.first_stage_model, "encode", OomVAEModel(tiny.vae.first_stage_model))
    error, step = run_vae_node(
        comfy, pack_runtime, pixels=noise_image(1, 64, 64, seed=3), vae=tiny.vae, strategy="direct"
    )
    assert isinstance(error, torch.cuda.OutOfMemoryError)
    attempts = step["details"]["attempts"]
    # ComfyUI's encode catches the direct attempt's out-of-memory and retries tiled by itself; that
    # retry runs out too and raises: its row holds what was loaded at that moment
    assert [(a["strategy"], a["outcome"]) for a in attempts[:2]] == [("direct", "oom"), ("tiled (ComfyUI retry)", "oom")]
    assert attempts[0]["caught_by_comfyui"] is True and attempts[0]["memory_snapshot"] is None
    snapshot = attempts[1]["memory_snapshot"]
    assert snapshot is not None and snapshot["n_models_loaded"] >= 1
    # ComfyUI loaded the VAE for the encode just before its model ran out of memory.
    vae_class = type(tiny.vae.first_stage_model).__name__
    assert vae_class in {m["model_class"] for m in snapshot["models"]}, snapshot
    row = next(m for m in snapshot["models"] if m["model_class"] == vae_class)
    assert row["total_bytes"] > 0 and row["loaded_bytes"] is not None and row["device"] == "cpu"
    assert snapshot["free_bytes"] > 0 and snapshot["allocator"] is None  # CPU: no CUDA allocator
    assert snapshot["loaded_bytes"] >= row["loaded_bytes"]
    assert step["monitor_errors"] == []

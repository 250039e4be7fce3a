"""A figure that monitoring could not read stays None and the report says why (issue 11): each
formerly silent failure path is made to fail here and its reason looked for where the report
(or the caller that builds it) carries it."""

from __future__ import annotations

import importlib
import sys
import types

import pytest
import torch

from monitors.conditioning.prompt_text import trace_text_encoders
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.models.state import describe_clip, describe_model, describe_vae
from monitors.pipeline_profiler.session import distributed_info
from monitors.probes import Probes
from monitors.probes.fake import FakeHost, FakeNvml, fake_probes
from monitors.probes.torch_alloc import TorchAllocatorBackend
from monitors.vae.chain import run_chain
from monitors.vae.geometry import TileSettings, predict
from monitors.vae.outcomes import ChainOptions
from tests.unit.test_routes import PACK, import_pack
from tests.unit.test_vae_chain import FakeVAE, pixels


def broken(*_args, **_kwargs):
    raise RuntimeError("reading exploded")


# -- VAE predictions ----------------------------------------------------------------------------


def test_prediction_says_why_free_memory_estimate_and_weights_are_unknown():
    vae = FakeVAE()
    vae.memory_used_encode = broken
    vae.model_size = None  # not callable: hasattr() holds, the call fails
    prediction = predict(vae, (1, 64, 64, 3), "direct", TileSettings(), broken)
    data = prediction.to_dict()
    assert (
        data["free_bytes"] is None and data["free_bytes_unknown_reason"] == "RuntimeError: reading exploded"
    )
    assert data["estimate_bytes"] is None
    assert data["estimate_bytes_unknown_reason"] == "memory_used_encode: RuntimeError: reading exploded"
    assert data["weights_to_load_bytes"] is None
    assert data["weights_to_load_bytes_unknown_reason"].startswith("TypeError: ")
    assert data["fits"] is None


def test_prediction_without_a_reading_or_an_estimate_method_says_so():
    plain = types.SimpleNamespace(device="cuda:0", latent_dim=2, downscale_ratio=8)
    prediction = predict(plain, (1, 64, 64, 3), "direct", TileSettings(), lambda device: None)
    assert prediction.free_bytes_unknown_reason == "no free-memory reading for cuda:0"
    assert prediction.estimate_bytes_unknown_reason == "the VAE has no memory_used_encode"
    assert prediction.weights_to_load_bytes_unknown_reason == "the VAE has no model_size"
    known = predict(FakeVAE(), (1, 64, 64, 3), "direct", TileSettings(), lambda device: 10**12)
    assert (
        known.free_bytes_unknown_reason,
        known.estimate_bytes_unknown_reason,
        known.weights_to_load_bytes_unknown_reason,
    ) == (None, None, None)


def test_a_failing_free_memory_reader_reaches_the_chain_result_and_the_predictions():
    result = run_chain(FakeVAE(), pixels(), ChainOptions(free_memory=broken, probes=fake_probes()))
    assert result.samples is not None  # advice failed, the encode did not
    assert result.free_before_bytes is None
    assert "free memory: RuntimeError: reading exploded" in result.monitor_errors
    for prediction in result.predictions.values():
        assert prediction.free_bytes_unknown_reason == "RuntimeError: reading exploded"


# -- model state ---------------------------------------------------------------------------------


class ExplodingModule(torch.nn.Linear):
    @property
    def model_loaded_weight_memory(self):
        raise RuntimeError("loaded memory unreadable")

    @property
    def model_type(self):
        raise RuntimeError("no model_type")


class PatcherLike:
    def __init__(self):
        self.model = ExplodingModule(4, 4)
        self.patches = {}
        self.patches_uuid = None
        self.load_device = "cpu"

    def model_dtype(self):
        raise RuntimeError("dtype unreadable")


def test_model_description_carries_why_each_figure_is_unknown():
    info = describe_model(PatcherLike())
    assert info["loaded_weight_bytes"] is None
    reasons = info["unknown_reasons"]
    assert reasons["loaded_weight_bytes"] == "RuntimeError: loaded memory unreadable"
    assert reasons["dtype"] == "RuntimeError: dtype unreadable"
    assert reasons["model_type"] == "RuntimeError: no model_type"
    assert info["dtype"] == "float32"  # read from the weights instead
    assert describe_model(torch.nn.Linear(2, 2))["unknown_reasons"] == {}


def test_clip_and_vae_descriptions_carry_their_unknown_reasons():
    class Tokenizerless:
        cond_stage_model = torch.nn.Linear(2, 2)

        @property
        def tokenizer(self):
            raise RuntimeError("tokenizer gone")

    clip = describe_clip(Tokenizerless())
    assert clip["tokenizer_class"] is None
    assert clip["unknown_reasons"] == {"tokenizer_class": "RuntimeError: tokenizer gone"}

    class BrokenParameters(torch.nn.Module):
        def parameters(self, recurse=True):
            raise RuntimeError("parameters unreadable")

    vae = types.SimpleNamespace(first_stage_model=BrokenParameters(), device="cpu")
    info = describe_vae(vae)
    assert info["size_bytes"] is None
    assert info["unknown_reasons"]["size_bytes"] == "RuntimeError: parameters unreadable"


# -- probes and the run report -------------------------------------------------------------------


class FakeCuda:
    """torch.cuda where memory_stats lacks the peaks and the fallback for one of them fails."""

    def memory_stats(self, index):
        return {"allocated_bytes.all.current": 10, "reserved_bytes.all.current": 20}

    def memory_allocated(self, index):
        return 10

    def memory_reserved(self, index):
        return 20

    def max_memory_allocated(self, index):
        raise RuntimeError("peak counter unsupported")

    def max_memory_reserved(self, index):
        return 30

    def device_count(self):
        return 1


class MissingPeakBackend(TorchAllocatorBackend):
    def _cuda(self):
        return FakeCuda()


def test_a_missing_allocator_counter_is_a_probe_failure_in_the_run_report(tmp_path):
    probes = Probes(host=FakeHost(), torch_alloc=MissingPeakBackend(), nvml=FakeNvml(0))
    memory = probes.torch_memory(0)
    assert memory == {
        "allocated_bytes": 10,
        "reserved_bytes": 20,
        "peak_allocated_bytes": None,
        "peak_reserved_bytes": 30,
    }
    failure = probes.failures()["torch.memory.allocated_bytes.all.peak"]
    assert failure == "not in memory_stats, max_memory_allocated: RuntimeError: peak counter unsupported"
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=probes)
    recorder.begin_run("p1", {})
    report = recorder.end_run("success")
    assert any(
        "torch.memory.allocated_bytes.all.peak" in e and "peak counter unsupported" in e
        for e in report.monitor_errors
    ), report.monitor_errors


def test_a_failing_node_lookup_is_noted_in_the_run_report(tmp_path):
    recorder = RunRecorder(RunStore(str(tmp_path)), probes=fake_probes())
    recorder.begin_run("p2", {}, node_lookup=broken)
    recorder.node_started("7")
    recorder.node_finished("7")
    report = recorder.end_run("success")
    assert report.nodes[0].class_type is None
    assert "node 7: class and title unknown: RuntimeError: reading exploded" in report.monitor_errors


# -- prompt text, profiling --------------------------------------------------------------------


def test_failing_input_types_are_a_note_of_the_text_trace():
    prompt = {
        "1": {"class_type": "PrimitiveStringMultiline", "inputs": {"value": "a cat"}},
        "2": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["4", 1], "text": ["1", 0]}},
        "3": {"class_type": "KSampler", "inputs": {"positive": ["2", 0]}},
    }
    trace = trace_text_encoders(prompt, "3", "positive", input_types=broken)
    assert trace["encoders"][0]["texts"][0]["text"] == "a cat"  # guessed from the input names
    expected = (
        "input types of CLIPTextEncode unknown (RuntimeError: reading exploded): guessed from input names"
    )
    assert expected in trace["notes"]
    entry = trace["encoders"][0]["texts"][0]
    assert "input types of PrimitiveStringMultiline unknown" in entry["note"]


def test_distributed_rank_unknown_says_why(monkeypatch):
    monkeypatch.setenv("RANK", "first")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    info = distributed_info()
    assert info["rank"] is None and info["rank_unknown_reason"] == "RANK='first' is not an integer"
    monkeypatch.delenv("RANK")
    assert distributed_info()["rank_unknown_reason"] is None  # not a distributed job: nothing unknown


# -- nodes/memory_snapshot (plain Python over comfy.model_management) ------------------------------


class Loaded:
    def __init__(self, fail: bool):
        self.model = types.SimpleNamespace(model=torch.nn.Linear(1, 1))
        self.device = "cpu"
        self.fail = fail

    def model_loaded_memory(self):
        if self.fail:
            raise RuntimeError("loaded size unreadable")
        return 8

    def model_memory(self):
        return "many"


@pytest.fixture
def fake_model_management(monkeypatch):
    mm = types.ModuleType("comfy.model_management")
    mm.current_loaded_models = [Loaded(fail=True), Loaded(fail=False)]
    mm.get_torch_device = lambda: torch.device("cpu")
    mm.get_free_memory = broken
    comfy = types.ModuleType("comfy")
    comfy.model_management = mm
    monkeypatch.setitem(sys.modules, "comfy", comfy)
    monkeypatch.setitem(sys.modules, "comfy.model_management", mm)
    return mm


def test_oom_memory_snapshot_says_why_each_figure_is_unknown(fake_model_management):
    import_pack()
    snapshot_module = importlib.import_module(f"{PACK}.nodes.memory_snapshot")
    snapshot = snapshot_module.loaded_models_snapshot()
    failing, fine = snapshot["models"]
    assert failing["loaded_bytes"] is None
    assert failing["loaded_bytes_unknown_reason"] == "RuntimeError: loaded size unreadable"
    assert fine["loaded_bytes"] == 8 and fine["loaded_bytes_unknown_reason"] is None
    assert fine["total_bytes"] is None and fine["total_bytes_unknown_reason"] == "not a number: str"
    assert snapshot["free_bytes"] is None
    assert snapshot["free_bytes_unknown_reason"] == "RuntimeError: reading exploded"
    assert (
        snapshot["allocator"] is None
        and snapshot["allocator_unknown_reason"] == "no CUDA caching allocator on cpu"
    )

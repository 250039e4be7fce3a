"""The step builders in monitors/ without ComfyUI: plain fakes for MODEL / CLIP / latents /
conditioning, a real RunRecorder for the upstream nodes' profile rows. The in-process tests in
tests/comfyui run the same builders through the nodes with ComfyUI's real objects."""

import types

import pytest

torch = pytest.importorskip("torch")

from monitors.conditioning.report import build_conditioning_step  # noqa: E402
from monitors.dumps.report import (  # noqa: E402
    LIVE_VALUE,
    NO_DUMPS,
    build_compare_step,
    build_dump_step,
    compare_inputs_problem,
    dump_name_problem,
    file_state,
)
from monitors.engine.live import WatchRequestError, watch_request  # noqa: E402
from monitors.engine.prompt_info import cached_node_ids, run_outcome, upstream_node_ids  # noqa: E402
from monitors.engine.recorder import RunRecorder  # noqa: E402
from monitors.engine.store import RunStore  # noqa: E402
from monitors.latent.report import build_latent_step  # noqa: E402
from monitors.lora.coverage import key_coverage  # noqa: E402
from monitors.lora.report import build_lora_step  # noqa: E402
from monitors.models.loaded import loaded_models_snapshot  # noqa: E402
from monitors.models.report import build_models_step  # noqa: E402
from monitors.probes.fake import fake_probes  # noqa: E402
from monitors.report import StepReport, failed_step, sum_known  # noqa: E402
from monitors.vae.errors import (  # noqa: E402
    VAEEncodeError,
    VAEEncodeInputError,
    VAEEncodeOutOfMemoryError,
    error_for,
)
from monitors.vae.outcomes import ChainResult  # noqa: E402


def codes(step: StepReport, level: str | None = None) -> list[str]:
    return [f.code for f in step.findings if level is None or f.level == level]


@pytest.fixture
def recorder():
    """A run in progress in which node "1" (a loader) ran and node "2" was served from the cache."""
    recorder = RunRecorder(RunStore(None), probes=fake_probes())
    recorder.begin_run("p1", PROMPT)
    recorder.node_started("1")
    recorder.node_finished("1")
    yield recorder
    recorder.end_run("success")


PROMPT = {
    "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "x.safetensors"}},
    "2": {"class_type": "EmptyLatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    "3": {
        "class_type": "LoraLoader",
        "inputs": {
            "model": ["1", 0],
            "clip": ["1", 1],
            "lora_name": "style.safetensors",
            "strength_model": 0.8,
            "strength_clip": 0.5,
        },
    },
    "4": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["3", 1], "text": "a photo of a cat"}},
    "9": {
        "class_type": "Monitor",
        "inputs": {
            "model": ["3", 0],
            "clip": ["3", 1],
            "vae": ["1", 2],
            "latent": ["2", 0],
            "positive": ["4", 0],
        },
    },
}


# -- shared pieces -----------------------------------------------------------------------------


def test_sum_known_keeps_unknown_apart_from_zero():
    assert sum_known([1, None, 2]) == 3
    assert sum_known([None, None]) is None and sum_known([]) is None
    assert sum_known([0, None]) == 0


def test_failed_step_keeps_the_error_and_its_traceback():
    def analyse():
        raise ValueError("bad shape")

    try:
        analyse()
    except ValueError as exc:
        step = failed_step("latent", 9, exc)
    assert step.kind == "latent" and step.node_id == "9" and step.summary == {}
    assert step.monitor_errors == ("ValueError: bad shape",)
    assert "Traceback" in step.details["traceback"] and "in analyse" in step.details["traceback"]
    assert step.created_unix_s is not None


def test_upstream_rows_come_from_the_profile_or_are_marked_cached(recorder):
    assert upstream_node_ids("9", PROMPT, ("model", "latent", "nothing")) == {"model": "3", "latent": "2"}
    assert (
        upstream_node_ids(None, PROMPT, ("model",)) == {} and upstream_node_ids("9", None, ("model",)) == {}
    )
    rows = recorder.upstream_profiles("3", PROMPT, ("model",))
    assert rows["model"]["node_id"] == "1" and rows["model"]["class_type"] == "CheckpointLoaderSimple"
    assert rows["model"]["cached"] is False and rows["model"]["duration_s"] >= 0
    cached = recorder.profile_row("2")  # produced its output, never seen running: from the cache
    assert cached == {"node_id": "2", "duration_s": None, "peak_rss_bytes": None, "cached": True}


def test_run_outcome_and_cached_nodes_from_status_messages():
    assert run_outcome([("execution_start", {}), ("execution_success", {})]) == ("success", None)
    status, error = run_outcome(
        [("execution_error", {"node_id": "5", "exception_type": "OOM", "exception_message": "x" * 3000})]
    )
    assert status == "error" and error["node_id"] == "5" and len(error["exception_message"]) == 2000
    assert run_outcome([("execution_interrupted", {"node_id": "7"})])[0] == "interrupted"
    assert run_outcome([])[1]["exception_type"] == "unknown"
    assert cached_node_ids([("execution_cached", {"nodes": [1, "2"]})]) == ["1", "2"]
    assert cached_node_ids([]) == []


# -- models ------------------------------------------------------------------------------------


def test_models_step_of_nothing_and_of_an_object_without_weights(probes_for):
    probes_for("no GPU")
    step = build_models_step("9", {})
    assert step.kind == "models" and step.summary["n_objects"] == 0
    assert step.summary["total_size_bytes"] is None and codes(step) == ["nothing_connected"]
    step = build_models_step("9", {"vae": types.SimpleNamespace()})
    assert "no_weights" in codes(step, "warning") and step.summary["vae_class"] == "SimpleNamespace"
    assert step.summary["total_size_bytes"] is None, "no object of known size: unknown, not 0"


def test_models_step_with_its_loader_profile(probes_for, recorder):
    probes_for("no GPU")
    model = types.SimpleNamespace(model=torch.nn.Linear(4, 4))
    step = build_models_step("9", {"model": model, "clip": None}, PROMPT, recorder)
    assert step.summary["n_objects"] == 1 and step.summary["model_size_bytes"] == (16 + 4) * 4
    assert set(step.details["loaders"]) == {"model", "clip", "vae"}
    assert step.details["loaders"]["vae"]["class_type"] == "CheckpointLoaderSimple"
    assert step.summary["loaders_duration_s"] is not None  # the loader's time, counted once per input
    assert step.summary["process_rss_bytes"] > 0 and step.monitor_errors == ()


# -- latent ------------------------------------------------------------------------------------


def test_latent_step_names_its_source_node(recorder):
    step = build_latent_step("9", {"samples": torch.zeros(1, 4, 8, 8)}, PROMPT, recorder)
    assert step.kind == "latent" and step.summary["source_class"] == "EmptyLatentImage"
    assert step.details["source"]["cached"] is True and step.summary["shape"] == [1, 4, 8, 8]
    alone = build_latent_step("9", {"samples": torch.zeros(1, 4, 8, 8)})
    assert "source_class" not in alone.summary


# -- LoRA --------------------------------------------------------------------------------------


def test_lora_step_without_patches_or_loaders_says_so(probes_for):
    probes_for("no GPU")
    step = build_lora_step("9", {}, types.SimpleNamespace())
    assert step.kind == "lora" and step.summary["success"] is False and step.summary["n_loras"] == 0
    assert "lora_no_patches" in codes(step, "warning")
    assert step.summary["n_file_keys"] is None  # no coverage computed: unknown, not 0


def test_lora_step_checks_each_loader_file_through_the_callables_given(probes_for, recorder, tmp_path):
    probes_for("no GPU")
    asked = []
    step = build_lora_step(
        "9", PROMPT, types.SimpleNamespace(), recorder=recorder, lora_path=lambda name: asked.append(name)
    )
    (loader,) = step.details["loaders"]
    assert asked == ["style.safetensors"] and loader["file"]["error"] == "file not found"
    assert loader["coverage"] is None and loader["profile"] is None  # the loader never ran in this run

    from safetensors.torch import save_file

    path = tmp_path / "style.safetensors"
    save_file({"lora_unet_a.lora_up.weight": torch.zeros(4, 2)}, str(path))
    coverages = [
        {"computed": True, **key_coverage([f"k{i}" for i in range(10)], {f"k{i}" for i in range(7)})}
    ]
    step = build_lora_step(
        "9",
        PROMPT,
        types.SimpleNamespace(),
        recorder=recorder,
        lora_path=lambda name: str(path),
        coverage=lambda model, clip, file_path, index: coverages[0],
    )
    (loader,) = step.details["loaders"]
    assert loader["file"]["exists"] and loader["coverage"] is coverages[0]
    assert (step.summary["n_file_keys"], step.summary["n_unmatched_keys"]) == (10, 3)


def test_a_failing_file_check_is_a_monitor_error_not_a_failed_step(probes_for):
    probes_for("no GPU")

    def broken(name):
        raise OSError("share offline")

    step = build_lora_step("9", PROMPT, types.SimpleNamespace(), lora_path=broken)
    assert any("share offline" in e for e in step.monitor_errors) and step.kind == "lora"
    (caught,) = step.details["exceptions"]
    assert (caught["where"], caught["type"], caught["message"]) == ("loader 3", "OSError", "share offline")
    assert caught["traceback"].startswith("Traceback") and "in broken" in caught["traceback"]
    assert caught["traceback_truncated"] is False and step.details["n_exceptions"] == 1


def test_lora_step_exception_tracebacks_are_bounded(probes_for, monkeypatch):
    import monitors.lora.step as lora_step

    probes_for("no GPU")
    monkeypatch.setattr(lora_step, "MAX_TRACEBACK_CHARS", 40)
    prompt = {
        str(i): {"class_type": "LoraLoader", "inputs": {"model": [str(i - 1), 0], "lora_name": f"{i}.st"}}
        for i in range(1, 9)
    }
    prompt["9"] = {"class_type": "Monitor", "inputs": {"model": ["8", 0]}}

    def broken(name):
        raise OSError("x" * 100)

    step = build_lora_step("9", prompt, types.SimpleNamespace(), lora_path=broken)
    assert step.details["n_exceptions"] == 8 and len(step.details["exceptions"]) == lora_step.MAX_EXCEPTIONS
    assert all(len(e["traceback"]) == 40 and e["traceback_truncated"] for e in step.details["exceptions"])
    assert len(step.monitor_errors) == 8


def test_lora_step_names_the_objects_it_hands_on(probes_for):
    probes_for("no GPU")
    model, clip = types.SimpleNamespace(), types.SimpleNamespace()
    returned = build_lora_step("9", {}, model, clip, returned=(model, clip)).details["returned"]
    assert returned == {
        "model_object_id": id(model),
        "clip_object_id": id(clip),
        "n_models": 2,
        "unknown_reason": None,
    }
    step = build_lora_step("9", {}, model, returned=(model, None))
    assert step.summary["n_models_returned"] == 1 and step.details["returned"]["clip_object_id"] is None
    unknown = build_lora_step("9", {}, model)
    assert unknown.summary["n_models_returned"] is None and unknown.details["returned"]["unknown_reason"]


# -- conditioning --------------------------------------------------------------------------------


def test_conditioning_step_finds_the_prompt_text_and_the_encoder_profile(recorder):
    positive = [[torch.randn(1, 77, 768), {"pooled_output": None}]]
    step = build_conditioning_step("9", PROMPT, positive, recorder=recorder)
    assert step.kind == "conditioning" and step.summary["negative_connected"] is False
    (encoder,) = step.details["positive"]["encoders"]
    assert encoder["node_id"] == "4" and encoder["profile"]["cached"] is True
    assert [t["text"] for t in encoder["texts"]] == ["a photo of a cat"]
    without = build_conditioning_step("9", None, positive)
    assert without.details["positive"]["encoders"] == []


def test_conditioning_step_uses_the_input_types_given():
    asked = []

    def input_types(class_type):
        asked.append(class_type)
        return {"clip": "CLIP", "text": "STRING"}

    positive = [[torch.randn(1, 77, 768), {}]]
    build_conditioning_step("9", PROMPT, positive, input_types=input_types)
    assert "CLIPTextEncode" in asked


# -- dumps ---------------------------------------------------------------------------------------


def test_dump_then_compare_with_the_live_value(tmp_path):
    latent = {"samples": torch.ones(1, 4, 8, 8)}
    step = build_dump_step(
        "9", PROMPT, {"latent": latent}, "pm_unit", False, directory=str(tmp_path), prompt_id="p1"
    )
    assert step.kind == "tensor_dump" and step.summary["written"] and step.monitor_errors == ()
    assert step.details["sources"] == {"latent": {"node_id": "2", "class_type": "EmptyLatentImage"}}
    assert step.details["metadata"]["prompt_id"] == "p1"
    same = build_compare_step(
        "10", "pm_unit.safetensors", LIVE_VALUE, 1e-5, 1e-8, {"latent": latent}, directory=str(tmp_path)
    )
    assert same.kind == "tensor_compare" and same.summary["status"] == "identical"
    assert file_state(str(tmp_path), "pm_unit") != file_state(str(tmp_path), "pm_other")


def test_dump_without_a_prompt_id_says_why_and_refuses_bad_names(tmp_path):
    values = {"latent": {"samples": torch.ones(1, 4, 2, 2)}}
    step = build_dump_step(
        "9", None, values, "ok", False, directory=str(tmp_path), prompt_id_unknown_reason="no active run"
    )
    assert step.summary["written"] and step.monitor_errors == ("no active run",)
    refused = build_dump_step("9", None, values, "../x", False, directory=str(tmp_path))
    assert not refused.summary["written"] and "name_refused" in codes(refused, "error")
    assert dump_name_problem("../x") and dump_name_problem("fine") is None
    assert compare_inputs_problem("fine", LIVE_VALUE, str(tmp_path)) is None
    assert "refused" in compare_inputs_problem("fine", "../y", str(tmp_path))
    assert "No dump to compare yet" in compare_inputs_problem(NO_DUMPS, LIVE_VALUE, str(tmp_path))


def test_compare_without_dumps_is_an_error_finding(tmp_path):
    step = build_compare_step("10", NO_DUMPS, LIVE_VALUE, 1e-5, 1e-8, {}, directory=str(tmp_path / "none"))
    assert step.summary["status"] == "error" and "compare_failed" in codes(step, "error")
    assert step.findings[0].message.startswith("No dump chosen")


# -- services ------------------------------------------------------------------------------------


def test_watch_request_validation():
    assert watch_request({"client_id": "tab-1", "watching": True}) == ("tab-1", True, True)
    assert watch_request({"client_id": "t", "watching": False, "backfill": False}) == ("t", False, False)
    for bad in (None, [], {"client_id": "a b", "watching": True}, {"client_id": "a", "watching": 1}):
        with pytest.raises(WatchRequestError):
            watch_request(bad)


class Loaded:
    def __init__(self, loaded_bytes):
        self.model = types.SimpleNamespace(model=torch.nn.Linear(1, 1))
        self.device = "cpu"
        self._loaded_bytes = loaded_bytes

    def model_loaded_memory(self):
        return self._loaded_bytes

    def model_memory(self):
        return 2 * self._loaded_bytes


def test_loaded_models_snapshot_from_plain_entries():
    snapshot = loaded_models_snapshot([Loaded(8), Loaded(4)], torch.device("cpu"), lambda: 1024)
    assert snapshot["n_models_loaded"] == 2 and snapshot["loaded_bytes"] == 12
    assert snapshot["models"][0]["model_class"] == "Linear" and snapshot["models"][0]["total_bytes"] == 16
    assert snapshot["free_bytes"] == 1024 and snapshot["allocator"] is None


def test_vae_errors_by_kind():
    def result(kind):
        return ChainResult(requested="auto", error="it failed", error_kind=kind)

    assert isinstance(error_for(result("bad_input"), "Node"), VAEEncodeInputError)
    oom = error_for(result("out_of_memory"), "Node")
    assert isinstance(oom, VAEEncodeOutOfMemoryError) and isinstance(oom, torch.cuda.OutOfMemoryError)
    assert str(error_for(result("error"), "Node")) == "Node: it failed"
    assert isinstance(error_for(result("error"), "Node"), VAEEncodeError)

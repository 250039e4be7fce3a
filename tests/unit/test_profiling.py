"""The profiling API: sessions, stages, steps, blocks, events, models; reports; no-ops when off."""

import asyncio
import json
import os
import threading
import time

import jsonschema
import pytest
import torch

from monitors import pipeline_profiler as pm
from monitors.pipeline_profiler import usage
from monitors.probes.fake import GiB, fake_probes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = json.load(open(os.path.join(REPO, "schemas", "run_report.schema.json")))


@pytest.fixture
def configured(tmp_path):
    """Profiling on, reports under tmp_path, fast sampling; restored to the defaults after."""
    usage.reset_usage_statistics()

    def configure(probes=None, **keys):
        keys.setdefault("report", {"output_dir": str(tmp_path), "format": "both", "trace": True})
        keys.setdefault("sampling", {"gpu_interval_s": 0.01, "cpu_interval_s": 0.01})
        return pm.configure(probes=probes, **keys)

    yield configure
    pm.configure()
    usage.reset_usage_statistics()


@pm.profile_method("text_encoding")
def encode(x):
    return x * 2


@pm.profile_diffusion_step(
    lambda args, kwargs, result: {"step_index": kwargs["i"], "timestep": 1000 - 100 * kwargs["i"]}
)
def denoise_step(x, i):
    time.sleep(0.002)
    return x + 1


@pm.profile_block_computation(
    lambda args, kwargs, result: {"block_index": args[1], "n_frames": result.shape[0]}
)
def compute_block(x, index):
    return torch.cat([x, x])


@pm.profile_method("vae_decode")
def decode(x):
    return x.sum()


def run_pipeline():
    x = encode(torch.ones(4))
    with pm.profile_method("denoise"):
        for i in range(4):
            x = denoise_step(x, i=i)
    frames = [compute_block(x, index) for index in range(3)]
    pm.record_event("latents", lambda: {"shape": list(x.shape), "mean": float(x.mean())})
    return decode(frames[-1])


def test_session_report_is_a_run_report_with_stage_rows(configured, tmp_path):
    configured(probes=fake_probes("no GPU"))  # the machine's own GPUs must not change the figures
    with pm.profile_session("t2v", tags={"model": "tiny"}) as session:
        result = run_pipeline()
    assert float(result) == pytest.approx(48.0)  # the decorated functions' results are untouched
    report = json.load(open(session.paths["json"]))
    jsonschema.validate(report, SCHEMA)
    assert report["status"] == "success" and report["prompt_id"] == session.run_id
    rows = [(n["class_type"], n["title"]) for n in report["nodes"]]
    assert rows[:2] == [("text_encoding", "text_encoding"), ("denoise", "denoise")]
    assert [t for c, t in rows if c == "inference_steps"] == ["step 0", "step 1", "step 2", "step 3"]
    assert [t for c, t in rows if c == "block_computation"] == ["block 0", "block 1", "block 2"]
    assert rows[-1] == ("vae_decode", "vae_decode")
    denoise = next(n for n in report["nodes"] if n["class_type"] == "denoise")
    steps = [n for n in report["nodes"] if n["class_type"] == "inference_steps"]
    assert all(denoise["start_offset_s"] <= s["start_offset_s"] for s in steps)  # one clock: nested
    assert denoise["duration_s"] >= sum(s["duration_s"] for s in steps)  # one clock: contains its steps
    (step,) = report["steps"]
    assert step["kind"] == "profiling"
    summary, details = step["summary"], step["details"]
    assert summary["n_steps"] == 4 and summary["steps_per_s"] == pytest.approx(4 / summary["steps_total_s"])
    assert summary["n_blocks"] == 3 and summary["n_frames"] == 24
    assert summary["frames_per_s"] == pytest.approx(8 * summary["blocks_per_s"])
    assert [s["timestep"] for s in details["diffusion_steps"]] == [1000, 900, 800, 700]
    assert details["events"][0]["name"] == "latents" and details["events"][0]["data"]["shape"] == [4]
    assert details["tags"] == {"model": "tiny"}
    phases = {p["stage"]: p for p in details["phases"]}
    assert phases["inference_steps"]["n_calls"] == 4 and phases["inference_steps"]["depth"] == 1
    assert phases["denoise"]["depth"] == 0
    assert phases["inference_steps"]["total_s"] == pytest.approx(sum(s["duration_s"] for s in steps))
    assert report["system"]["source"] == "profiling_api" and report["system"]["gpus"] == []
    assert set(session.paths) == {"json", "html", "trace"}
    html = open(session.paths["html"], encoding="utf-8").read()
    assert "vae_decode" in html and "profiling" in html


def test_disabled_profiling_records_nothing_and_writes_nothing(configured, tmp_path):
    configured(enabled=False)
    with pm.profile_session("off") as session:
        run_pipeline()
    assert session is None and pm.current_session() is None
    assert os.listdir(tmp_path) == []
    assert pm.record_event("x", lambda: pytest.fail("called while off")) is None


def test_stages_outside_a_session_are_plain_calls(configured):
    configured()
    assert float(decode(torch.ones(3))) == 3.0
    assert pm.current_session() is None


def test_stage_toggle_switches_a_stage_off(configured):
    configured(stages={"inference_steps": False})
    with pm.profile_session("toggle") as session:
        run_pipeline()
    classes = {n.class_type for n in session.report.nodes}
    assert "inference_steps" not in classes and "text_encoding" in classes
    assert session.report.steps[0].summary["n_steps"] == 0


def test_exception_in_a_stage_marks_the_row_and_the_run_and_propagates(configured):
    configured()

    @pm.profile_method("vae_decode")
    def broken():
        raise RuntimeError("decoder exploded")

    with pytest.raises(RuntimeError, match="decoder exploded"):
        with pm.profile_session("fails") as session:
            encode(torch.ones(2))
            broken()
    report = session.report
    assert report.status == "error"
    assert report.error["exception_type"] == "RuntimeError" and report.error["node_type"] == "vae_decode"
    assert [n.status for n in report.nodes] == ["executed", "error"]
    codes = [f.code for f in report.steps[0].findings]
    assert "stage_errors" in codes
    assert usage.get_usage_statistics()["n_failed_generations"] == 1


def test_extract_failure_is_recorded_not_raised(configured):
    configured()

    @pm.profile_diffusion_step(lambda args, kwargs, result: 1 / 0)
    def step(x):
        return x

    with pm.profile_session("bad-extract") as session:
        assert step(5) == 5
    assert any("ZeroDivisionError" in m for m in session.report.monitor_errors)
    assert session.report.steps[0].summary["n_steps"] == 1


def test_nested_session_becomes_a_stage(configured):
    configured()
    with pm.profile_session("outer") as outer:
        with pm.profile_session("inner") as inner:
            encode(torch.ones(1))
    assert inner is outer
    assert [n.class_type for n in outer.report.nodes] == ["inner", "text_encoding"]


def test_session_as_decorator_and_async_stage(configured):
    configured()

    @pm.profile_method("async_stage")
    async def fetch(x):
        await asyncio.sleep(0)
        return x + 1

    @pm.profile_session("decorated")
    def generate():
        assert pm.current_session() is not None
        return asyncio.run(fetch(1))

    assert generate() == 2
    assert pm.current_session() is None
    assert usage.get_usage_statistics()["generations"][-1]["name"] == "decorated"


def test_bare_profile_method_uses_the_function_name(configured):
    configured()

    @pm.profile_method
    def prepare_latents():
        return 7

    with pm.profile_session("bare") as session:
        assert prepare_latents() == 7
    assert session.report.nodes[0].class_type.endswith("prepare_latents")


def test_stages_from_several_threads(configured):
    configured()
    with pm.profile_session("threads") as session:
        workers = [
            threading.Thread(target=lambda: [encode(torch.ones(1)) for _ in range(5)], name=f"w{i}")
            for i in range(3)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert len(session.report.nodes) == 15
    assert set(session.stage_threads.values()) == {"w0", "w1", "w2"}
    ids = [int(n.node_id) for n in session.report.nodes]
    assert ids == sorted(ids) and len(set(ids)) == 15


def test_rows_are_bounded_but_phases_stay_exact(configured):
    configured(max_data_points=10)
    with pm.profile_session("bounded") as session:
        for i in range(25):
            denoise_step(torch.ones(1), i=i)
    report = session.report
    assert len(report.nodes) == 10 and len(report.steps[0].details["diffusion_steps"]) == 10
    assert report.steps[0].summary["n_steps"] == 25
    phase = next(p for p in report.steps[0].details["phases"] if p["stage"] == "inference_steps")
    assert phase["n_calls"] == 25
    assert any("more than 10 stage calls" in m for m in report.monitor_errors)


def test_model_parameters_recorded_before_and_inside_sessions(configured):
    configured()

    @pm.profile_model_parameters()
    def build():
        model = torch.nn.Linear(8, 4).to(torch.float16)
        model.bias.requires_grad_(False)
        return model

    build()
    with pm.profile_session("with-model") as session:
        pass
    stats = pm.get_usage_statistics()
    (model,) = stats["models"]
    assert model["n_parameters"] == 36 and model["n_trainable_parameters"] == 32
    assert model["parameter_bytes"] == 72 and model["dtypes"] == {"float16": 36}
    assert stats["model_init_s"] > 0
    summary = session.report.steps[0].summary
    assert summary["n_model_parameters"] == 36 and summary["model_init_s"] == stats["model_init_s"]


def test_gpu_session_with_fake_probes(configured):
    probes = fake_probes("1 GPU")
    probes.nvml.devices[0]["utilization_pct"] = 15.0
    configured(probes=probes)

    @pm.profile_method("vae_decode")
    def decode_on_gpu():
        probes.torch.allocate(0, 23 * GiB)  # close to the fake device's 24 GiB
        probes.nvml.devices[0]["utilization_pct"] = 95.0

    with pm.profile_session("gpu") as session:
        decode_on_gpu()
    report = session.report
    (row,) = report.nodes
    assert row.gpu_peaks[0].device == "cuda:0" and row.gpu_peaks[0].peak_allocated_bytes == 23 * GiB
    summary = report.steps[0].summary
    assert summary["peak_gpu_allocated_bytes"] == 23 * GiB and summary["device_name"] == "Fake GPU 0"
    details = report.steps[0].details
    assert details["gpu_utilization_before_pct"] == [15.0] and details["gpu_utilization_after_pct"] == [95.0]
    codes = {f.code for f in report.steps[0].findings}
    assert {"gpu_memory_near_limit", "vae_decode_gpu_memory"} <= codes
    generation = pm.get_usage_statistics()["generations"][-1]
    assert generation["gpu_utilization_before_pct"] == [15.0]
    assert generation["gpu_utilization_after_pct"] == [95.0]


def wait_until(predicate, what: str, watchdog_s: float = 60.0):
    """Polls `predicate`; the watchdog only catches a hang, it never asks for speed."""
    deadline = time.monotonic() + watchdog_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"hang: {what} after {watchdog_s:.0f} s")
        time.sleep(0.01)


def test_samples_follow_the_metric_choices(configured):
    probes = fake_probes("1 GPU")
    limit = 10
    configured(
        probes=probes,
        metrics={"gpu_temperature": False, "cpu": False},
        sampling={"gpu_interval_s": 0.01, "cpu_interval_s": 0.01},
        max_data_points=limit,
    )
    with pm.profile_session("samples") as session:
        # Many more ticks than the session keeps, however slowly the machine runs them.
        wait_until(lambda: session.sampler.tick_count >= 3 * limit, "sampler ticks")
    samples = session.report.steps[0].details["samples"]
    assert 2 <= len(samples["t_s"]) <= limit  # taken, and bounded by max_data_points
    assert "cuda:0.allocated_bytes" in samples and "cuda:0.utilization_pct" in samples
    assert "cuda:0.temperature_c" not in samples and "cpu_pct" not in samples
    assert all(len(v) == len(samples["t_s"]) for v in samples.values())


def test_realtime_display_logs_lines(configured, caplog):
    caplog.set_level("INFO", logger="monitors.pipeline_profiler.session")
    configured(display={"realtime": True, "interval_s": 0.01})

    def live_lines():
        return [r.getMessage() for r in caplog.records if "pipeline monitor [live]" in r.getMessage()]

    with pm.profile_session("live"):
        with pm.profile_method("denoise"):
            wait_until(lambda: any("stage denoise" in line for line in live_lines()), "live line")
    lines = live_lines()
    assert lines and any("stage denoise" in line for line in lines)


def test_json_only_format(configured, tmp_path):
    configured(report={"output_dir": str(tmp_path / "out"), "format": "json", "trace": False})
    with pm.profile_session("json-only") as session:
        encode(torch.ones(1))
    assert set(session.paths) == {"json"}
    assert sorted(os.listdir(tmp_path / "out")) == [session.run_id + ".json"]


def test_unwritable_output_dir_is_logged_not_raised(configured, tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    configured(report={"output_dir": str(blocker / "sub"), "format": "both", "trace": True})
    with pm.profile_session("unwritable") as session:
        encode(torch.ones(1))
    assert session.paths == {} and session.report.status == "success"
    assert "could not write" in caplog.text


def test_rank_from_the_environment(configured, monkeypatch):
    configured()
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pm.profile_session("ranked") as session:
        pass
    assert session.run_id.endswith("-rank3")
    assert session.report.system["rank"] == 3 and session.report.system["world_size"] == 4


def test_disabled_decorators_call_through_once_and_record_nothing(configured, tmp_path):
    """Disabled, every decorator calls the function exactly once with its arguments and returns its
    result, and nothing is recorded. What that costs per call: bench/profiling_overhead.py."""
    from bench.profiling_overhead import decorated_variants

    configured(enabled=False)
    calls = []

    def spy(x):
        calls.append(x)
        return x

    for name, fn in decorated_variants(spy).items():
        calls.clear()
        assert fn(41) == 41, name
        assert calls == [41], name
    assert pm.current_session() is None and os.listdir(tmp_path) == []
    stats = pm.get_usage_statistics()
    assert stats["n_generations"] == 0 and stats["models"] == []

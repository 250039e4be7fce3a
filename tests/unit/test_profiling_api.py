"""monitors.pipeline_profiler.api: configure's checks, session statuses and errors, stage decorators and
`with` blocks (on and off), step and block titles, events, and model parameters."""

import asyncio
import dataclasses
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from monitors import pipeline_profiler as pm
from monitors.pipeline_profiler import api, usage
from monitors.pipeline_profiler import session as session_module
from monitors.pipeline_profiler.config import ProfilingConfig
from monitors.probes.fake import fake_probes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def on(tmp_path):
    usage.reset_usage_statistics()
    pm.configure(
        probes=fake_probes("no GPU"),
        report={"output_dir": str(tmp_path), "format": "json", "trace": False},
        sampling={"gpu_interval_s": 10.0, "cpu_interval_s": 10.0},
    )
    yield
    pm.configure()
    usage.reset_usage_statistics()


def own(**fields):
    """The configured settings (reports under the test's folder) with `fields` changed."""
    return dataclasses.replace(pm.get_config(), **fields)


def rows(session):
    return [(n.class_type, n.title, n.status) for n in session.report.nodes]


def test_configure_checks_a_given_config_and_keeps_it():
    try:
        with pytest.raises(TypeError, match="config must be a ProfilingConfig, got dict"):
            pm.configure(config={"enabled": True})
        off = ProfilingConfig(enabled=False)
        assert pm.configure(config=off) is off and pm.get_config() is off and pm.is_enabled() is False
        assert pm.configure(enabled=True).enabled and pm.is_enabled() is True
    finally:
        pm.configure()


def test_a_session_needs_both_its_config_and_the_process_enabled(on):
    with pm.profile_session("x", config=ProfilingConfig(enabled=False)) as session:
        assert session is None and pm.current_session() is None
    with pytest.raises(ValueError):  # off, the user's exception still propagates
        with pm.profile_session("x", config=ProfilingConfig(enabled=False)):
            raise ValueError
    pm.configure(enabled=False)
    with pm.profile_session("y", config=ProfilingConfig()) as session:
        assert session is None


def test_a_session_with_its_own_config_and_tags(on, tmp_path):
    config = own(tags={"a": 1})
    with pm.profile_session("tagged", tags={"b": 2}, config=config) as session:
        assert session.config is config
    assert session.tags == {"a": 1, "b": 2}
    assert session.report.status == "success" and session.report.error is None
    assert [step.kind for step in session.report.steps] == ["profiling"] and session.deep is None  # not deep


def test_a_nested_session_is_a_stage_with_its_status(on):
    with pm.profile_session("outer") as outer:
        with pytest.raises(ValueError):
            with pm.profile_session("inner"):
                raise ValueError("x")
        with pm.profile_session("again") as again:
            assert again is outer
        assert pm.current_session() is outer
    assert rows(outer) == [("inner", "inner", "error"), ("again", "again", "executed")]
    assert outer.report.status == "success"


def test_error_names_the_failed_stage_and_truncates_the_message(on):
    @pm.profile_method("decode")
    def decode():
        raise RuntimeError("m" * 3000)

    with pytest.raises(RuntimeError):
        with pm.profile_session("fails") as session:
            with pm.profile_method("outer"):
                decode()
    error = session.report.error
    decode_row = next(n for n in session.report.nodes if n.class_type == "decode")
    assert error == {
        "node_id": decode_row.node_id,
        "node_type": "decode",
        "exception_type": "RuntimeError",
        "exception_message": "m" * 2000,
    }
    assert session.report.status == "error" and pm.current_session() is None


def test_an_error_outside_any_stage_names_no_node(on):
    with pytest.raises(KeyError):
        with pm.profile_session("fails") as session:
            raise KeyError("k")
    assert session.report.error == {
        "node_id": None,
        "node_type": None,
        "exception_type": "KeyError",
        "exception_message": "'k'",
    }


def test_keyboard_interrupt_is_an_interrupted_run(on):
    with pytest.raises(KeyboardInterrupt):
        with pm.profile_session("stopped") as session:
            raise KeyboardInterrupt
    assert session.report.status == "interrupted"
    assert usage.get_usage_statistics()["n_failed_generations"] == 1


def test_a_failing_report_never_fails_the_run(on, monkeypatch, caplog):
    def broken(*args):
        raise OSError("disk")

    monkeypatch.setattr(session_module, "build_report", broken)  # after the session's span stopped
    with pm.profile_session("quiet"):
        pass
    assert "session quiet report failed: OSError: disk" in caplog.text
    assert pm.current_session() is None


def test_session_decorator_passes_the_result(on):
    @pm.profile_session("decorated")
    def generate(x, y=1):
        return pm.current_session().name, x + y

    assert generate(1, y=2) == ("decorated", 3)
    assert pm.current_session() is None


def test_stage_decorators_on_and_off(on):
    calls = []

    @pm.profile_method("vae_decode")
    def decode(x):
        calls.append(x)
        return x * 2

    @pm.profile_method("vae_decode")
    async def decode_async(x):
        return x * 3

    @pm.profile_method("fails")
    async def fails_async():
        raise ValueError("async")

    assert decode(1) == 2 and asyncio.run(decode_async(1)) == 3  # outside a session: plain calls
    with pm.profile_session("s", config=own(stages={"vae_decode": False})) as off:
        assert decode(2) == 4 and asyncio.run(decode_async(2)) == 6
    assert off.report.nodes == ()
    with pm.profile_session("s") as session:
        assert decode(3) == 6 and asyncio.run(decode_async(3)) == 9
        with pytest.raises(ValueError, match="async"):
            asyncio.run(fails_async())
    assert rows(session) == [
        ("vae_decode", "vae_decode", "executed"),
        ("vae_decode", "vae_decode", "executed"),
        ("fails", "fails", "error"),
    ]
    assert calls == [1, 2, 3]


def test_with_blocks_record_their_stage_and_status(on):
    block = pm.profile_method("load")
    step = pm.profile_diffusion_step()
    with block as entered:  # outside a session: nothing
        assert entered is block
    with pm.profile_session("s") as session:
        with block:
            with block:
                pass
        with pytest.raises(ValueError):
            with block:
                raise ValueError
        with step:
            pass
        with pytest.raises(ValueError):
            with step:
                raise ValueError
        with step:
            pass
        with pm.profile_method(None):  # no stage name: nothing to record
            pass
    assert rows(session) == [
        ("load", "load", "executed"),
        ("load", "load", "executed"),
        ("load", "load", "error"),
        ("inference_steps", "inference_steps", "executed"),
        ("inference_steps", "inference_steps", "error"),
        ("inference_steps", "inference_steps", "executed"),
    ]
    assert session.report.steps[0].summary["n_steps"] == 2  # only the steps that finished


def test_with_block_of_a_disabled_stage_records_nothing(on):
    with pm.profile_session("s", config=own(stages={"x": False})) as session:
        with pm.profile_method("x"):
            pass
    assert session.report.nodes == ()


def test_step_and_block_titles_from_their_info(on):
    @pm.profile_diffusion_step(lambda args, kwargs, result: {"step": args[0]})
    def inferix_step(i):
        return i

    @pm.profile_diffusion_step(lambda args, kwargs, result: {"step": 9, "step_index": args[0]})
    def both_names(i):
        return i

    @pm.profile_diffusion_step()
    def no_info():
        return None

    @pm.profile_block_computation(lambda args, kwargs, result: {"block_index": args[0], "n_frames": 4})
    def block(i):
        return i

    @pm.profile_block_computation()
    def bare_block():
        return None

    with pm.profile_session("s") as session:
        inferix_step(3)
        both_names(5)
        no_info()
        block(7)
        bare_block()
    assert [(c, t) for c, t, _ in rows(session)] == [
        ("inference_steps", "step 3"),
        ("inference_steps", "step 5"),
        ("inference_steps", "inference_steps"),
        ("block_computation", "block 7"),
        ("block_computation", "block_computation"),
    ]
    details = session.report.steps[0].details
    assert [s.get("step_index") for s in details["diffusion_steps"]] == [3, 5, None]
    assert details["diffusion_steps"][0]["step"] == 3
    assert [b.get("block_index") for b in details["blocks"]] == [7, None]
    assert session.report.steps[0].summary["n_frames"] == 4


def test_stage_names_default_to_the_function(on):
    @pm.profile_method()
    def prepare():
        return 1

    with pm.profile_session("s") as session:
        prepare()
    assert session.report.nodes[0].class_type.endswith("prepare")


def test_record_event_returns_the_data(on):
    assert pm.record_event("outside", {"a": 1}) is None
    with pm.profile_session("s") as session:
        assert pm.record_event("plain", {"a": 1}) == {"a": 1}
        assert pm.record_event(7, lambda: [1]) == [1]

        def broken():
            raise ValueError("no data")

        assert pm.record_event("bad", broken) is None
    events = session.report.steps[0].details["events"]
    assert [(e["name"], e["data"]) for e in events] == [("plain", {"a": 1}), ("7", [1])]
    assert "event bad: ValueError: no data" in session.report.monitor_errors


def test_model_parameters_from_a_mapping_inside_a_session(on):
    @pm.profile_model_parameters(lambda args, kwargs, result: {"parameters_count": 12, "kind": args[0]})
    def build(kind):
        return kind

    @pm.profile_model_parameters(lambda args, kwargs, result: {"parameters_count": True}, name="flag")
    def odd():
        return None

    with pm.profile_session("s") as session:
        assert build("unet") == "unet"
        odd()
    assert [(c, t, s) for c, t, s in rows(session)] == [
        ("model_init", build.__wrapped__.__qualname__, "executed"),
        ("model_init", "flag", "executed"),
    ]
    first, second = usage.tracker.models()
    assert first["parameters_count"] == 12 and first["n_parameters"] == 12 and first["kind"] == "unet"
    assert second["name"] == "flag" and "n_parameters" not in second


def test_model_parameters_when_building_or_reading_fails(on, caplog):
    @pm.profile_model_parameters(name="broken")
    def build():
        raise MemoryError("too big")

    @pm.profile_model_parameters(lambda args, kwargs, result: 1 / 0, name="unreadable")
    def unreadable():
        return "model"

    with pm.profile_session("s") as session:
        with pytest.raises(MemoryError):
            build()
        assert unreadable() == "model"
    assert rows(session) == [("model_init", "broken", "error"), ("model_init", "unreadable", "executed")]
    (model,) = usage.tracker.models()
    assert model["name"] == "unreadable" and set(model) == {"name", "init_s"}
    assert "model parameters of unreadable: ZeroDivisionError" in caplog.text


def test_model_parameters_outside_a_session_and_when_disabled(on, monkeypatch):
    clock = iter([10.0, 10.25])
    monkeypatch.setattr(api, "time", SimpleNamespace(perf_counter=lambda: next(clock)))

    @pm.profile_model_parameters(name="m")
    def build():
        return "model"

    assert build() == "model"
    assert [(m["name"], m["init_s"]) for m in usage.tracker.models()] == [("m", 0.25)]
    pm.configure(enabled=False)
    assert build() == "model"
    assert len(usage.tracker.models()) == 1


def test_profiling_is_on_in_a_fresh_process():
    code = (
        "from monitors import pipeline_profiler as pm\n"
        "from monitors.pipeline_profiler.config import ProfilingConfig\n"
        "print(pm.is_enabled(), pm.get_config() == ProfilingConfig(), pm.current_session())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "True", "None"], done.stderr


def test_the_public_names():
    assert "record_event" in pm.__all__ and "add_profiling_event" in pm.__all__
    assert api.get_usage_statistics is usage.get_usage_statistics

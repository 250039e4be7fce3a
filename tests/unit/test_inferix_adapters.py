"""monitors.pipeline_profiler.inferix: Inferix's extractor forms, the event decorator's argument passing,
metadata events, model figure defaults and the command-line flags."""

import argparse
import asyncio

import pytest

from monitors import pipeline_profiler as pm
from monitors.pipeline_profiler import inferix, usage
from monitors.probes.fake import fake_probes


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


def events(session):
    return [(e["name"], e["data"]) for e in session.report.steps[0].details["events"]]


def test_args_kwargs_extract_forms():
    assert inferix._args_kwargs_extract(None, True) is None
    two = inferix._args_kwargs_extract(lambda args, kwargs: (args, kwargs), method=True)
    assert two(("self", 1), {"k": 2}, "result") == ((1,), {"k": 2})
    three = inferix._args_kwargs_extract(lambda args, kwargs, result: (args, result), method=False)
    assert three((1, 2), {}, "r") == ((1, 2), "r")
    four = inferix._args_kwargs_extract(lambda args, kwargs, result, extra=None: result, method=False)
    assert four((), {}, "r") == "r"
    star = inferix._args_kwargs_extract(lambda *a: a, method=False)
    assert star((1,), {"k": 1}, "r") == ((1,), {"k": 1})  # any number: Inferix's two


def test_caller_passes_only_what_the_function_accepts():
    call = inferix._caller(lambda result, **kwargs: (result, kwargs))
    assert call("r", 1, 2, a=3) == ("r", {"a": 3})
    call = inferix._caller(lambda _, path, **kwargs: (path, kwargs))
    assert call("r", "p", "q", path_given=1) == ("p", {"path_given": 1})
    call = inferix._caller(lambda result, path, *, mode="x": (result, path, mode))
    assert call("r", "p", mode="y", other=1) == ("r", "p", "y")  # unknown keywords left out
    call = inferix._caller(lambda result, path=None: (result, path))
    assert call("r", "p", path="again") == ("r", "p")  # bound by position: not passed twice
    call = inferix._caller(lambda *args, **kwargs: (args, kwargs))
    assert call("r", 1, 2, k=3) == (("r", 1, 2), {"k": 3})
    assert inferix._caller(type) is type  # no signature to read: called as is


def test_profile_method_metadata_is_an_event_per_call_in_a_session(on):
    @inferix.profile_method(metadata={"encoder": "t5"})
    def encode(x):
        return x

    @inferix.profile_method
    def plain(x):
        return x

    @inferix.profile_method("named")
    def other(x):
        return x

    assert encode(1) == 1  # outside a session: no event, no row
    with pm.profile_session("s") as session:
        assert encode(2) == 2 and plain(3) == 3 and other(4) == 4
    assert events(session) == [("encode.metadata", {"encoder": "t5"})]
    assert [n.class_type for n in session.report.nodes] == ["encode", "plain", "named"]


def test_add_profiling_event_sync_and_async(on):
    class Pipe:
        @inferix.add_profiling_event("saved", lambda result, path, **kwargs: {"path": path, "n": result})
        def save(self, path, quality=1):
            return 3

        @inferix.add_profiling_event("fetched", lambda result: result)
        async def fetch(self):
            return "data"

        @inferix.add_profiling_event("broken", lambda result: 1 / 0)
        def broken(self):
            return "ok"

    pipe = Pipe()
    assert pipe.save("outside") == 3
    with pm.profile_session("s") as session:
        assert pipe.save("a.png", quality=2) == 3
        assert asyncio.run(pipe.fetch()) == "data"
        assert pipe.broken() == "ok"
    assert events(session) == [("saved", {"path": "a.png", "n": 3}), ("fetched", "data"), ("broken", None)]
    assert (
        "event broken: data function failed: ZeroDivisionError: division by zero"
        in session.report.monitor_errors
    )


def test_add_profiling_event_of_a_plain_function_keeps_every_argument(on):
    @inferix.add_profiling_event("called", lambda result, a, b: [result, a, b])
    def f(a, b):
        return a + b

    with pm.profile_session("s") as session:
        f(1, 2)
    assert events(session) == [("called", [3, 1, 2])]


def test_diffusion_step_index_from_inferixs_step(on):
    class Model:
        @inferix.profile_diffusion_step(lambda args, kwargs: {"step": args[0]})
        def step(self, i):
            return i

        @inferix.profile_diffusion_step(lambda args, kwargs: {"step": 1, "step_index": 8})
        def both(self):
            return None

        @inferix.profile_diffusion_step(lambda args, kwargs: None)
        def nothing(self):
            return None

        @inferix.profile_diffusion_step(lambda args, kwargs: {"timestep": 5})
        def no_step(self):
            return None

        @inferix.profile_diffusion_step()
        def bare(self):
            return None

    m = Model()
    with pm.profile_session("s") as session:
        m.step(4)
        m.both()
        m.nothing()
        m.bare()
        m.no_step()
    steps = session.report.steps[0].details["diffusion_steps"]
    assert [s.get("step_index") for s in steps] == [4, 8, None, None, None]
    assert steps[4]["timestep"] == 5 and session.report.monitor_errors == ()
    assert [n.title for n in session.report.nodes] == ["step 4", "step 8"] + ["inference_steps"] * 3


def test_block_info_without_self(on):
    class Model:
        @inferix.profile_block_computation(
            lambda args, kwargs: {"block_index": args[0], "n_frames": kwargs["n"]}
        )
        def block(self, index, n):
            return None

    with pm.profile_session("s") as session:
        Model().block(2, n=5)
    assert session.report.steps[0].details["blocks"][0]["block_index"] == 2
    assert session.report.steps[0].summary["n_frames"] == 5


def test_model_figures_and_their_defaults(on):
    class Loader:
        @inferix.profile_model_parameters(lambda args, kwargs: {"model_name": args[0], "parameters_count": 7})
        def load(self, name):
            return name

        @inferix.profile_model_parameters(lambda args, kwargs: {"parameters_count": True})
        def odd(self):
            return None

    @inferix.profile_model_parameters()
    def bare():
        return None

    @inferix.profile_model_parameters(lambda args, kwargs: None)
    def empty():
        return None

    Loader().load("wan")
    Loader().odd()
    bare()
    empty()
    first, odd, default, none = usage.tracker.models()
    assert first["name"] == "load" and first["model_name"] == "wan" and first["n_parameters"] == 7
    assert (first["parameters_count"], first["model_type"]) == (7, "unknown")
    assert odd["parameters_count"] is True and "n_parameters" not in odd
    for model in (default, none):
        assert (
            model["model_name"],
            model["parameters_count"],
            model["model_type"],
            model["n_parameters"],
        ) == (
            "unknown_model",
            0,
            "unknown",
            0,
        )
    assert default["name"] == "bare"


def test_flags_and_their_defaults():
    parser = argparse.ArgumentParser()
    group = inferix.add_profiling_arguments(parser)
    assert group.title == "profiling"
    args = parser.parse_args([])
    assert (args.enable_profiling, args.profiling_config) == (False, None)
    on = argparse.ArgumentParser()
    inferix.add_profiling_arguments(on, enabled_by_default=True)
    assert on.parse_args([]).enable_profiling is True

    def help_of(p):
        return next(a.help for a in p._actions if a.dest == "enable_profiling")

    assert help_of(on).startswith("profile this run (default: on)")
    assert help_of(parser).startswith("profile this run (default: off)")


def test_configure_from_args(tmp_path):
    try:
        off = inferix.configure_from_args(argparse.Namespace())
        assert off.enabled is False and pm.is_enabled() is False
        path = tmp_path / "p.yaml"
        path.write_text("profiling:\n  max_data_points: 9\n")
        args = argparse.Namespace(enable_profiling=True, profiling_config=str(path))
        config = inferix.configure_from_args(args, preset="production", tags={"t": 1})
        assert config.enabled and config.max_data_points == 9 and config.tags["t"] == 1
        assert config.tags["preset"] == "production"
        assert inferix.configure_from_args(argparse.Namespace(enable_profiling=True)).max_data_points == 2000
    finally:
        pm.configure()

"""monitors.pipeline_profiler.session.ProfileSession driven directly, with fake probes: notes, stage
nesting and closing, the bounds, steps, blocks, events, and which sampled metrics are kept."""

import threading
from types import SimpleNamespace

import pytest

from monitors.pipeline_profiler import session as session_module
from monitors.pipeline_profiler.config_files import load_config
from monitors.pipeline_profiler.session import MAX_EVENTS, MAX_MONITOR_ERRORS, ProfileSession
from monitors.probes.fake import GiB, fake_probes
from monitors.probes.readings import GpuReading, Snapshot

NO_MEMORY = {"system_memory": False, "gpu_memory": False}


def make(tmp_path=None, probes=None, **keys):
    keys.setdefault("report", {"output_dir": str(tmp_path or "unused"), "format": "json", "trace": False})
    return ProfileSession("s", None, load_config(**keys), probes=probes or fake_probes())


def test_the_bounds():
    assert (MAX_MONITOR_ERRORS, MAX_EVENTS) == (50, 1000)


def test_notes_are_kept_once_and_bounded():
    session = make()
    session.note("a")
    session.note("a")
    assert session.monitor_errors == ["a"]
    for i in range(60):
        session.note(f"n{i}")
    assert len(session.monitor_errors) == 50 and session.monitor_errors[-1] == "n48"


def test_time_only_stages_nest_and_close_once(monkeypatch):
    session = make(metrics=NO_MEMORY)
    session._perf_origin = 0.5
    clock = iter([1.0, 2.0, 3.5, 6.0, 6.5, 7.0, 7.5])  # the stages' own reads, in order
    monkeypatch.setattr(session_module.time, "perf_counter", lambda: next(clock))
    outer = session.open_stage("outer")  # starts at 1.0
    inner = session.open_stage("inner")  # starts at 2.0
    assert session.current_stage == "inner" and (outer.depth, inner.depth) == (0, 1)
    assert (outer.node_id, inner.node_id) == ("1", "2")
    assert session.close_stage(inner, "error") == 1.5  # ends at 3.5
    assert session.current_stage == "outer" and session.failed_stage == (inner.node_id, "inner")
    assert session.close_stage(outer) == 5.0  # ends at 6.0
    assert session.current_stage is None
    assert session.close_stage(outer) == 5.0  # closed already (read at 6.5): its duration, not again
    again = session.open_stage("inner")  # starts at 7.0, ends at 7.5
    assert session.close_stage(again, "error", title="second") == 0.5
    assert session.failed_stage == (inner.node_id, "inner")  # the first error stays the one named
    session._build_timed_rows()
    assert [(r.class_type, r.title, r.status, r.start_offset_s, r.duration_s) for r in session.rows] == [
        ("inner", "inner", "error", 1.5, 1.5),
        ("outer", "outer", "executed", 0.5, 5.0),
        ("inner", "second", "error", 6.5, 0.5),
    ]
    assert [r.cached for r in session.rows] == [False, False, False]
    phases = {p["stage"]: p for p in session.phases.rows()}
    inner_phase = phases["inner"]
    assert (inner_phase["n_calls"], inner_phase["n_errors"], inner_phase["total_s"]) == (2, 2, 2.0)
    assert (inner_phase["min_s"], inner_phase["max_s"], inner_phase["depth"]) == (0.5, 1.5, 0)
    assert (phases["outer"]["n_calls"], phases["outer"]["n_errors"]) == (1, 0)


@pytest.mark.parametrize("metrics", [NO_MEMORY, {}], ids=["time-only", "measured"])
def test_stages_closed_out_of_order_and_the_current_stage(metrics):
    session = make(metrics=metrics)
    a, b, c = session.open_stage("a"), session.open_stage("b"), session.open_stage("c")
    session.close_stage(c)  # executed: no failed stage
    assert session.current_stage == "b" and session.failed_stage is None
    session.close_stage(a, "error")  # not the innermost: b stays open and current
    assert session.current_stage == "b" and session.failed_stage == (a.node_id, "a")
    d = session.open_stage("d")
    assert d.depth == 1  # under b, the one left open
    session.close_stage(d)
    session.close_stage(b)
    assert session.current_stage is None
    session._build_timed_rows()
    assert [r.class_type for r in session.rows] == ["c", "a", "d", "b"]


def test_time_only_rows_are_bounded_with_one_note():
    session = make(metrics=NO_MEMORY, max_data_points=2)
    for _ in range(4):
        session.close_stage(session.open_stage("x"))
    session._build_timed_rows()
    assert [r.node_id for r in session.rows] == ["1", "2"]  # the first calls are kept
    assert session.monitor_errors == ["more than 2 stage calls: later rows not kept (phases stay exact)"]
    assert session.phases.rows()[0]["n_calls"] == 4


def test_measured_stages_nest_close_once_and_are_bounded():
    session = make(max_data_points=2)
    outer = session.open_stage("outer")
    inner = session.open_stage("inner")
    assert session.current_stage == "inner" and inner.depth == 1
    inner_s = session.close_stage(inner, "error", title="t")
    assert session.current_stage == "outer" and session.failed_stage == (inner.node_id, "inner")
    outer_s = session.close_stage(outer)
    assert session.current_stage is None
    assert session.close_stage(outer) == outer_s  # closed already: its duration again
    for _ in range(2):
        extra = session.open_stage("extra")
        session.close_stage(extra)
    assert [(r.class_type, r.title, r.status) for r in session.rows] == [
        ("inner", "t", "error"),
        ("outer", "outer", "executed"),
    ]
    assert session.rows[0].duration_s == inner_s
    assert session.monitor_errors == ["more than 2 stage calls: later rows not kept (phases stay exact)"]
    phases = {p["stage"]: p for p in session.phases.rows()}
    assert (
        phases["inner"]["n_errors"] == 1 and phases["inner"]["depth"] == 1 and phases["extra"]["n_calls"] == 2
    )
    assert session.close_stage(None) is None


def test_a_full_list_of_notes_takes_no_more():
    session = make(metrics=NO_MEMORY, max_data_points=1)
    for i in range(50):
        session.note(f"n{i}")
    for _ in range(3):
        session.close_stage(session.open_stage("x"))
    assert len(session.monitor_errors) == 50 and "more than 1 stage calls" not in " ".join(
        session.monitor_errors
    )


def test_measured_stage_gpu_peak_goes_into_its_phase():
    probes = fake_probes("2 GPUs")
    session = make(probes=probes)
    record = session.open_stage("decode")
    probes.torch.allocate(0, GiB)
    probes.torch.allocate(1, 3 * GiB)
    session.close_stage(record)
    (phase,) = session.phases.rows()
    assert phase["peak_gpu_allocated_bytes"] == 3 * GiB


def test_a_stage_whose_span_cannot_start_or_stop_is_a_note(monkeypatch):
    session = make()

    def refuse(self):
        raise RuntimeError("no span")

    record = session.open_stage("ok")
    monkeypatch.setattr(session_module.Span, "stop", refuse)
    assert session.close_stage(record) is None
    assert session.monitor_errors == ["stage ok: span failed to stop: RuntimeError: no span"]
    monkeypatch.undo()
    record.span.stop()  # the stand-in refused: close it for real
    monkeypatch.setattr(session_module.Span, "start", refuse)
    assert session.open_stage("late") is None
    assert session.monitor_errors[-1] == "stage late: span failed to start: RuntimeError: no span"
    assert session.rows == []


def test_stages_of_other_threads_are_named(tmp_path):
    for metrics in (NO_MEMORY, {}):
        session = make(metrics=metrics)

        def work(session):
            session.close_stage(session.open_stage("w"))

        session.close_stage(session.open_stage("main"))
        thread = threading.Thread(target=work, args=(session,), name="worker-1")
        thread.start()
        thread.join()
        session._build_timed_rows()
        ids = {r.class_type: r.node_id for r in session.rows}
        assert session.stage_threads == {ids["w"]: "worker-1"}


def test_finish_closes_open_stages_as_interrupted(tmp_path):
    for metrics in (NO_MEMORY, {}):
        session = make(tmp_path, metrics=metrics).start()
        session.open_stage("left_open")
        started = session._started_monotonic
        real_time = session_module.time
        session_module.time = SimpleNamespace(
            monotonic=lambda started=started: started + 3.0,
            perf_counter=real_time.perf_counter,
            time=real_time.time,
        )
        try:
            report = session.finish("success")
        finally:
            session_module.time = real_time
        assert report.duration_s == pytest.approx(3.0) and [step.kind for step in report.steps] == ["profiling"]
        assert report.profile_enabled is True and report.status == "success"
        assert [(n.class_type, n.status) for n in report.nodes] == [("left_open", "interrupted")]
        assert session.paths == {"json": str(tmp_path / f"{session.run_id}.json")}


def test_steps_and_blocks_count_past_the_bound(tmp_path):
    session = make(max_data_points=2)
    session.add_diffusion_step(0.5, {"step_index": 0})
    session.add_diffusion_step(None, {})
    session.add_diffusion_step(1.5, {})
    assert session.totals["n_steps"] == 3 and session.totals["steps_s"] == 2.0
    assert session.diffusion_steps == [
        {"n": 1, "duration_s": 0.5, "step_index": 0},
        {"n": 2, "duration_s": None},
    ]
    session.add_block(2.0, {"n_frames": 4})
    session.add_block(None, {"n_frames": True})
    session.add_block(1.0, {"n_frames": 2.5})
    assert (session.totals["n_blocks"], session.totals["blocks_s"], session.totals["n_frames"]) == (
        3,
        3.0,
        6.5,
    )
    assert session.blocks == [
        {"n": 1, "duration_s": 2.0, "n_frames": 4},
        {"n": 2, "duration_s": None, "n_frames": True},
    ]


def test_events_are_bounded(monkeypatch):
    session = make(max_data_points=3)
    for i in range(5):
        session.add_event("e", {"i": i, "t": (1, 2)})
    assert [e["data"] for e in session.events] == [
        {"i": 0, "t": [1, 2]},
        {"i": 1, "t": [1, 2]},
        {"i": 2, "t": [1, 2]},
    ]
    assert session.events[0]["thread"] == threading.current_thread().name
    monkeypatch.setattr(session_module, "MAX_EVENTS", 2)
    capped = make(max_data_points=10)
    for i in range(5):
        capped.add_event("e", i)
    assert len(capped.events) == 2


def test_sampling_is_due_at_95_pct_of_its_interval():
    session = make()
    assert session._due("cpu", 0.0, 4.0)
    assert not session._due("cpu", 3.79, 4.0)
    assert session._due("cpu", 3.8, 4.0)
    assert not session._due("cpu", 3.8 + 3.79, 4.0)  # from the last due time
    assert session._due("gpu", 0.0, 4.0)  # each kind has its own clock


def snapshot(t, **host):
    gpus = (
        GpuReading(
            0,
            allocated_bytes=1,
            reserved_bytes=2,
            nvml_used_bytes=3,
            utilization_pct=4.0,
            temperature_c=5.0,
            power_w=6.0,
        ),
    )
    return Snapshot(monotonic_s=t, unix_time_s=100.0 + t, gpus=gpus if host.pop("gpu", True) else (), **host)


def test_samples_keep_the_configured_metrics_in_columns():
    session = make(
        metrics={"gpu_memory": False, "gpu_power": True, "cpu": False},
        sampling={"cpu_interval_s": 1.0, "gpu_interval_s": 2.0},
    )
    session.started_unix_s = 100.0
    session._on_sample(snapshot(0.0, process_rss_bytes=10, ram_used_bytes=20, cpu_pct=1.0))
    session._on_sample(snapshot(1.0, process_rss_bytes=11, ram_used_bytes=21))  # the GPU not due yet
    session._on_sample(snapshot(1.5, gpu=False))  # nothing due
    session._on_sample(snapshot(2.0, gpu=False, process_rss_bytes=12, ram_used_bytes=22))
    session._on_sample(snapshot(3.0, process_rss_bytes=13, ram_used_bytes=23))  # the GPU due again
    samples = {k: list(v) for k, v in session.samples.items()}
    assert samples == {
        "t_s": [0.0, 1.0, 2.0, 3.0],
        "process_rss_bytes": [10, 11, 12, 13],
        "ram_used_bytes": [20, 21, 22, 23],
        "cuda:0.utilization_pct": [4.0, None, None, 4.0],
        "cuda:0.power_w": [6.0, None, None, 6.0],
    }


def test_a_column_that_appears_later_is_padded_before():
    session = make(
        metrics={"system_memory": False, "cpu": False},
        sampling={"cpu_interval_s": 1.0, "gpu_interval_s": 1.0},
    )
    session.started_unix_s = 100.0
    session._on_sample(snapshot(0.0, gpu=False))  # nothing configured on the host: no row
    session.config = load_config(
        metrics={"system_memory": False, "cpu": True, "gpu_memory": True, "gpu_temperature": True},
        report={"output_dir": "unused"},
    )
    session._on_sample(snapshot(1.0, gpu=False, cpu_pct=50.0))
    session._on_sample(snapshot(2.0, cpu_pct=60.0))
    samples = {k: list(v) for k, v in session.samples.items()}
    assert samples["t_s"] == [1.0, 2.0] and samples["cpu_pct"] == [50.0, 60.0]
    assert samples["cuda:0.allocated_bytes"] == [None, 1] and samples["cuda:0.reserved_bytes"] == [None, 2]
    assert samples["cuda:0.nvml_used_bytes"] == [None, 3] and samples["cuda:0.temperature_c"] == [None, 5.0]
    assert "cuda:0.utilization_pct" in samples and "cuda:0.power_w" not in samples


def test_the_live_line_at_its_interval(caplog):
    caplog.set_level("INFO", logger="monitors.pipeline_profiler.session")
    session = make(
        display={"realtime": True, "interval_s": 2.0}, sampling={"cpu_interval_s": 1.0, "gpu_interval_s": 1.0}
    )
    session.started_unix_s = 100.0
    for t in (1.0, 2.0, 3.0, 4.0):
        session._on_sample(snapshot(t, gpu=False))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pipeline monitor [s]")]
    assert [line.split(" s:")[0] for line in lines] == [
        "pipeline monitor [s] 2.0",
        "pipeline monitor [s] 4.0",
    ]
    quiet = make(sampling={"cpu_interval_s": 1.0, "gpu_interval_s": 1.0})  # realtime off: no line
    quiet.started_unix_s = 100.0
    caplog.clear()
    for t in (1.0, 6.0, 12.0):
        quiet._on_sample(snapshot(t, gpu=False))
    assert not [r for r in caplog.records if r.getMessage().startswith("pipeline monitor [s]")]


def test_sampler_interval_follows_the_gpu(monkeypatch):
    seen = []

    class Sampler:
        def __init__(self, interval_s, max_points, probes):
            seen.append((interval_s, max_points))

        def add_sink(self, sink):
            pass

        def stop(self):
            pass

    monkeypatch.setattr(session_module, "Sampler", Sampler)
    sampling = {"gpu_interval_s": 0.25, "cpu_interval_s": 2.0}
    for scenario in ("1 GPU", "no GPU"):
        session = make(probes=fake_probes(scenario), sampling=sampling, max_data_points=7).start()
        session.span.stop()
    assert seen == [(0.25, 7), (2.0, 7)]


def test_start_and_finish_failures_are_notes(tmp_path, monkeypatch):
    class Broken:
        def __init__(self, **kwargs):
            raise RuntimeError("no thread")

    monkeypatch.setattr(session_module, "Sampler", Broken)
    session = make(tmp_path).start()
    assert session.sampler is None
    assert session.monitor_errors == ["sampler failed to start: RuntimeError: no thread"]

    class Stuck:
        def stop(self):
            raise RuntimeError("stuck")

    session.sampler = Stuck()
    session.finish("success")
    assert "sampler failed to stop: RuntimeError: stuck" in session.report.monitor_errors


@pytest.mark.parametrize("where", ["start", "stop"])
def test_session_span_failures_are_notes(tmp_path, monkeypatch, where):
    def refuse(self):
        raise OSError("span")

    if where == "start":
        monkeypatch.setattr(session_module.Span, "start", refuse)
        session = make(tmp_path).start()
        assert session.span is None
    else:
        session = make(tmp_path).start()
        real_stop = session.span.stop
        session.span.stop = lambda: (real_stop(), refuse(None))
    report = session.finish("success")
    assert f"session span failed to {where}: OSError: span" in report.monitor_errors
    assert report.span is None


def test_host_name_and_offsets_from_the_start(monkeypatch):
    session = make()
    monkeypatch.setattr(session_module.socket, "gethostname", lambda: "box")
    assert session.host_name() == "box"
    started = session._started_monotonic
    monkeypatch.setattr(session_module, "time", SimpleNamespace(monotonic=lambda: started + 2.5))
    assert session.offset_s() == 2.5
    session.add_event("e", None)
    assert session.events[0]["t_s"] == 2.5


def test_a_failing_suggestion_rule_loses_only_the_findings(tmp_path, monkeypatch):
    from monitors.pipeline_profiler import report as report_module

    def broken(*args):
        raise KeyError("rule")

    monkeypatch.setattr(report_module, "suggest", broken)
    session = make(tmp_path).start()
    report = session.finish("success")
    assert report.steps[0].findings == ()
    assert "suggestions failed: KeyError: 'rule'" in report.monitor_errors


def test_a_system_block_that_cannot_be_read_is_said_in_the_report(tmp_path):
    probes = fake_probes()

    def broken():
        raise OSError("no host")

    probes.system_info = broken
    report = make(tmp_path, probes=probes).start().finish("success")
    assert "system info unavailable: OSError: no host" in report.monitor_errors


def test_a_time_only_stages_shortest_call_is_its_minimum_whatever_the_order(monkeypatch):
    session = make(metrics=NO_MEMORY)
    clock = iter([0.0, 1.0, 1.0, 4.0, 4.0, 6.0])  # calls of 1 s, 3 s and 2 s
    monkeypatch.setattr(session_module.time, "perf_counter", lambda: next(clock))
    for _ in range(3):
        session.close_stage(session.open_stage("step"))
    session._build_timed_rows()
    [phase] = [p for p in session.phases.rows() if p["stage"] == "step"]
    assert (phase["n_calls"], phase["total_s"], phase["min_s"], phase["max_s"]) == (3, 6.0, 1.0, 3.0)


def test_a_measured_stage_closed_twice_counts_once():
    session = make(metrics={})
    stage = session.open_stage("measured")
    first = session.close_stage(stage)
    assert session.close_stage(stage, "error") == first  # closed already: its duration, not again
    assert session.failed_stage is None and session.current_stage is None
    session._build_timed_rows()
    assert [(r.class_type, r.status) for r in session.rows] == [("measured", "executed")]

"""Deep profile on demand (monitors/deep_profile): per-node figures from profiler events (fake
CUDA events and a real CPU profile), the one-shot switch, the step on a recorder's run, failures
that never fail the prompt, and the ops nested under node spans in the trace."""

from __future__ import annotations

import json
import time
import types

import pytest
import torch

from monitors.deep_profile import analysis, trace_ops
from monitors.deep_profile.control import DeepProfileController, DeepProfileSwitch, last_plain_run
from monitors.deep_profile.session import DeepProfiler, build_step, range_name
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import RunStore
from monitors.exporters.trace import report_to_trace
from monitors.probes.fake import fake_probes

# -- fake profiler events (torch's FunctionEvent shape) --------------------------------------------


def ev(name, start, end, parent=None, device="CPU", eid=0, linked=0):
    event = types.SimpleNamespace(
        name=name,
        time_range=types.SimpleNamespace(start=start, end=end),
        device_type=device,
        cpu_parent=parent,
        id=eid,
        linked_correlation_id=linked,
        thread=1,
    )
    return event


def cuda_prompt():
    """Node 3 (KSampler) launches two matmul kernels (60 and 40 us) and waits once; node 8 only
    sleeps; one op runs outside any node."""
    r3 = ev(range_name("3", "KSampler"), 0, 200, eid=10)
    mm = ev("aten::mm", 10, 30, r3, eid=11)
    mm2 = ev("aten::mm", 40, 50, r3, eid=12)
    launch = ev("cudaLaunchKernel", 12, 14, mm, eid=13, linked=11)
    add = ev("aten::add", 60, 70, r3, eid=14)
    sync = ev("cudaDeviceSynchronize", 80, 190, r3, eid=15)
    r8 = ev(range_name("8", "Sleep"), 300, 500)
    outside = ev("aten::zeros", 600, 610, None, eid=16)
    k1 = ev("gemm_kernel", 20, 80, None, device="CUDA", linked=11)
    k2 = ev("gemm_kernel", 100, 140, None, device="CUDA", linked=12)
    k3 = ev("add_kernel", 150, 155, None, device="CUDA", linked=14)
    stray = ev("other_kernel", 700, 800, None, device="CUDA", linked=16)
    direct = ev("direct_kernel", 160, 170, None, device="CUDA", linked=10)  # linked to the range
    events = [r3, mm, launch, mm2, add, sync, r8, outside, k1, k2, k3, stray, direct]
    ranges = {r3.name: ("3", "KSampler"), r8.name: ("8", "Sleep")}
    return events, ranges


def test_fake_cuda_events_give_device_time_busy_share_top_ops_and_syncs():
    events, ranges = cuda_prompt()
    rows = analysis.node_rows(analysis.attribute(events, ranges), cuda=True)
    assert [r["node_id"] for r in rows] == ["3", "8"]
    sampler, sleeper = rows
    assert sampler["wall_s"] == pytest.approx(200e-6)
    # 60 + 40 + 5 + 10 (launched outside ops, linked to the range), the stray kernel not
    assert sampler["device_time_s"] == pytest.approx(115e-6)
    assert sampler["gpu_busy_pct"] == pytest.approx(100 * 115 / 200)
    assert sampler["n_syncs"] == 1
    # host: the ops directly under the range, children included once
    assert sampler["host_op_time_s"] == pytest.approx((20 + 10 + 10 + 110) * 1e-6)
    top = sampler["top_ops"]
    assert sampler["top_ops_by"] == "device"
    assert [(o["name"], o["n_calls"]) for o in top[:3]] == [
        ("aten::mm", 2),
        (analysis.OUTSIDE_OPS, 0),
        ("aten::add", 1),
    ]
    assert top[0]["total_s"] == pytest.approx(100e-6)
    assert top[0]["share_pct"] == pytest.approx(100 * 100 / 115)
    assert sleeper["device_time_s"] == 0 and sleeper["gpu_busy_pct"] == 0 and sleeper["top_ops"] == []
    totals = analysis.totals(rows, cuda=True)
    assert totals["device_time_s"] == pytest.approx(115e-6) and totals["n_syncs"] == 1
    assert totals["slowest_node"] == "#3 KSampler"


def test_without_cuda_device_figures_are_none_with_a_reason_and_ops_rank_by_host_time():
    events, ranges = cuda_prompt()
    row = analysis.node_rows(analysis.attribute(events, ranges), cuda=False)[0]
    assert row["device_time_s"] is None and row["gpu_busy_pct"] is None and row["n_syncs"] is None
    assert row["device_time_unknown_reason"] == analysis.NO_CUDA_REASON
    assert row["top_ops_by"] == "host"
    assert row["top_ops"][0]["name"] == "cudaDeviceSynchronize"  # 110 us of host time


def test_busy_share_counts_overlapping_kernels_once_and_only_inside_the_window():
    assert analysis.busy_us([(0, 10), (5, 15), (30, 40)], [(0, 35)]) == 20


# -- a real CPU profile ----------------------------------------------------------------------------


def profiled_prompt(tmp_path=None, baseline=None):
    profiler = DeepProfiler("p1", cuda=False).start()
    profiler.node_started("3", "KSampler")
    conv = torch.nn.Conv2d(4, 8, 3)
    x = torch.randn(1, 4, 16, 16)
    for _ in range(3):
        y = conv(x)
        torch.nn.functional.linear(y.flatten(1), torch.randn(4, y.flatten(1).shape[1]))
    profiler.node_finished("3")
    profiler.node_started("8", "VAEDecode")
    time.sleep(0.01)
    profiler.node_finished("8")
    return profiler, build_step(
        profiler, profiler.stop(), baseline, None if tmp_path is None else str(tmp_path)
    )


def test_a_real_cpu_profile_attributes_convolutions_to_the_node_that_ran_them(tmp_path):
    profiler, step = profiled_prompt(tmp_path, {"prompt_id": "p0", "duration_s": 0.001})
    rows = {r["node_id"]: r for r in step.details["nodes"]}
    names = [o["name"] for o in rows["3"]["top_ops"]]
    assert "aten::conv2d" in names and "aten::linear" in names
    assert rows["3"]["host_op_time_s"] > 0
    assert rows["3"]["wall_s"] >= rows["3"]["host_op_time_s"]  # one clock: the ops run inside the range
    assert rows["8"]["n_ops"] == 0 and rows["8"]["wall_s"] > 0
    assert rows["3"]["device_time_s"] is None and step.details["activities"] == ["cpu"]
    assert step.summary["overhead_ratio"] == pytest.approx(step.summary["prompt_wall_s"] / 0.001)
    assert step.details["baseline_prompt_id"] == "p0"
    assert step.findings and "overhead" in step.findings[0].message
    assert step.details["trace"]["file"] == "p1.ops.json"
    assert step.summary["n_trace_events"] > 0 and step.summary["n_trace_events_dropped"] == 0
    assert len(json.dumps(step.to_dict())) < 20_000
    assert step.details["profiler_start_s"] >= 0 and step.details["analysis_s"] >= 0


def test_a_profiler_that_fails_to_start_or_stop_leaves_a_reason_not_an_exception():
    def broken(cuda):
        raise RuntimeError("no kineto here")

    profiler = DeepProfiler("p1", cuda=False, profiler_factory=broken).start()
    profiler.node_started("3", "KSampler")
    profiler.node_finished("3")
    step = build_step(profiler, profiler.stop())
    assert "no kineto here" in step.details["unknown_reasons"]["nodes"]
    assert step.details["nodes"] == [] and step.monitor_errors

    class StopFails:
        def start(self):
            pass

        def stop(self):
            raise RuntimeError("stop failed")

    profiler = DeepProfiler(
        "p2", cuda=False, profiler_factory=lambda cuda: StopFails(), range_factory=lambda n: None
    )
    profiler.start()
    assert build_step(profiler, profiler.stop()).monitor_errors[0].endswith("stop failed")


# -- asking for it ---------------------------------------------------------------------------------


def test_arming_preloads_what_the_profilers_first_start_imports(monkeypatch):
    from monitors.deep_profile import control

    started = []
    monkeypatch.setattr(control, "preload_profiler", lambda: started.append(True))
    controller = DeepProfileController(DeepProfileSwitch(environ={}))
    controller.arm(False)
    assert started == [] and not controller.switch.armed
    controller.arm(True)
    assert started == [True] and controller.switch.armed


def test_the_switch_profiles_exactly_one_prompt_and_the_environment_arms_the_first():
    switch = DeepProfileSwitch(environ={})
    assert not switch.take()
    switch.set(True)
    assert switch.take() and not switch.take() and not switch.armed
    assert DeepProfileSwitch(environ={"PIPELINE_MONITOR_DEEP_PROFILE": "1"}).armed
    assert not DeepProfileSwitch(environ={"PIPELINE_MONITOR_DEEP_PROFILE": "0"}).armed


def run_prompt(recorder, controller, prompt_id, workflow="demo"):
    recorder.begin_run(prompt_id, {"1": {"class_type": "KSampler", "inputs": {}}})
    controller.prompt_started(prompt_id, cuda=False, node_lookup=lambda node_id: ("KSampler", None))
    matrix = torch.ones(128, 128)
    recorder.node_started("1")
    controller.node_started("1")
    for _ in range(5):
        matrix @ matrix
    controller.node_finished("1")
    recorder.node_finished("1")
    controller.prompt_finished(recorder, workflow)
    return recorder.end_run("success", workflow={"name": workflow, "id": None})


def test_a_deep_profiled_prompt_gets_the_step_and_the_next_one_is_plain(tmp_path):
    store = RunStore(str(tmp_path))
    recorder = RunRecorder(store, probes=fake_probes())
    controller = DeepProfileController(DeepProfileSwitch(environ={}))
    plain = run_prompt(recorder, controller, "plain-1")
    controller.switch.set(True)
    deep = run_prompt(recorder, controller, "deep-1")
    after = run_prompt(recorder, controller, "plain-2")
    assert [s.kind for s in plain.steps] == [] and [s.kind for s in after.steps] == []
    (step,) = deep.steps
    assert step.kind == "deep_profile" and step.details["nodes"][0]["class_type"] == "KSampler"
    assert step.details["nodes"][0]["top_ops"][0]["name"] == "aten::matmul"
    assert step.details["baseline_prompt_id"] == "plain-1"
    assert "deep_profile" in store.summary("deep-1")["step_kinds"]
    assert controller.state() == {"armed": False, "active_prompt_id": None, "last_prompt_id": "deep-1"}
    # the deep run is never the baseline of a later deep run
    assert last_plain_run(store, "demo", "x")["prompt_id"] == "plain-2"


# -- the trace -------------------------------------------------------------------------------------


def test_the_trace_nests_every_op_inside_its_node_span_and_has_counter_tracks(tmp_path):
    store = RunStore(str(tmp_path))
    recorder = RunRecorder(store, probes=fake_probes("1 GPU"))
    controller = DeepProfileController(DeepProfileSwitch(environ={}))
    controller.switch.set(True)  # (arm() would also preload torch._dynamo on a thread)
    report = run_prompt(recorder, controller, "deep-1").to_dict()
    ops = trace_ops.read_ops(str(tmp_path / "deep-1.json"), "deep-1")
    assert ops and ops["host"]
    trace = json.loads(json.dumps(report_to_trace(report, deep_ops=ops)))
    events = trace["traceEvents"]
    spans = [
        e
        for e in events
        if e.get("ph") == "X" and e.get("args", {}).get("node_id") == "1" and e["cat"] != "op"
    ]
    op_events = [e for e in events if e.get("cat") == "op"]
    assert op_events and len(spans) == 1
    (span,) = spans
    for op in op_events:
        assert op["tid"] == span["tid"] and op["pid"] == span["pid"]
        assert span["ts"] <= op["ts"] and op["ts"] + op["dur"] <= span["ts"] + span["dur"] + 1e-3
    counters = {e["name"] for e in events if e.get("ph") == "C"}
    assert {"process_rss_bytes", "cuda:0.allocated_bytes", "cuda:0.reserved_bytes"} <= counters


def test_the_trace_keeps_the_longest_events_under_its_cap():
    host = [["1", f"op{i}", i, i, 1] for i in range(10)]
    device = [["1", "k", 0, 100, 7]]
    kept_host, kept_device, dropped = trace_ops.capped(host, device, max_events=3)
    assert dropped == 8 and kept_device == device
    assert [r[1] for r in kept_host] == ["op8", "op9"]


def test_kernels_go_under_a_node_span_on_their_stream_lane():
    ops = {"host": [], "device": [["3", "gemm", 5.0, 10.0, 7], ["3", "add", 20.0, 2.0, 7]]}
    events = trace_ops.trace_events(ops, {"3": (1, 1000.0, 1100.0, "KSampler")}, pid=1)
    spans = [e for e in events if e.get("cat") == "node_kernels"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(spans) == 1 and spans[0]["ts"] == 1005.0 and spans[0]["dur"] == 17.0
    assert all(k["tid"] == spans[0]["tid"] for k in kernels)


# -- the HTML report -------------------------------------------------------------------------------


def test_the_html_report_shows_the_per_node_table_with_top_ops_escaped(tmp_path):
    from monitors.exporters.html import render_html

    store = RunStore(str(tmp_path))
    recorder = RunRecorder(store, probes=fake_probes())
    controller = DeepProfileController(DeepProfileSwitch(environ={}))
    controller.switch.set(True)  # (arm() would also preload torch._dynamo on a thread)
    report = run_prompt(recorder, controller, "deep-1").to_dict()
    report["steps"][0]["details"]["nodes"][0]["class_type"] = "<b>KSampler</b>"
    page = render_html(report)
    assert 'data-kind="deep_profile"' in page and "Deep profile" in page
    assert '<table class="dnodes">' in page and "aten::matmul" in page
    assert "&lt;b&gt;KSampler&lt;/b&gt;" in page and "<b>KSampler</b>" not in page
    assert "no CUDA activity was profiled" in page  # the reason beside the missing device time


# -- the profiling library -------------------------------------------------------------------------


def test_profile_session_deep_gives_the_per_stage_breakdown_and_nests_ops_in_its_trace(tmp_path):
    from monitors import pipeline_profiler as pm

    pm.configure(probes=fake_probes(), report={"output_dir": str(tmp_path), "format": "json", "trace": True})
    try:
        conv, x = torch.nn.Conv2d(4, 8, 3), torch.randn(1, 4, 32, 32)
        with pm.profile_session("gen", deep=True) as session:
            with pm.profile_method("denoise"):
                for _ in range(3):
                    conv(x)
            with pm.profile_method("decode"):
                torch.ones(64, 64) @ torch.ones(64, 64)
    finally:
        pm.configure()
    report = session.report.to_dict()
    step = next(s for s in report["steps"] if s["kind"] == "deep_profile")
    rows = {r["class_type"]: r for r in step["details"]["nodes"]}
    assert rows["denoise"]["top_ops"][0]["name"] == "aten::conv2d"
    assert rows["decode"]["top_ops"][0]["name"] == "aten::matmul"
    with open(session.paths["trace"], encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    stages = {
        e["args"]["node_id"]: e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("denoise", "decode")
    }
    ops = [e for e in events if e.get("cat") == "op"]
    assert {op["args"]["node_id"] for op in ops} == set(stages)
    for op in ops:
        span = stages[op["args"]["node_id"]]
        assert (
            op["tid"] == span["tid"]
            and span["ts"] <= op["ts"] <= op["ts"] + op["dur"] <= span["ts"] + span["dur"] + 1e-3
        )


def test_the_cli_compare_says_when_only_one_run_was_deep_profiled(tmp_path, capsys):
    from monitors.cli.commands import main
    from tests.unit.test_cli import report, write

    plain = report("a", 2.0, stages=(("denoise", 1.0),))
    deep = report("b", 2.6, stages=(("denoise", 1.5),))
    deep["steps"].append(
        {
            "kind": "deep_profile",
            "node_id": None,
            "summary": {},
            "details": {},
            "findings": [],
            "monitor_errors": [],
            "created_unix_s": 1.0,
            "cached": False,
        }
    )
    a, b = write(tmp_path, "a.json", plain), write(tmp_path, "b.json", deep)
    out = tmp_path / "cmp.json"
    main(["compare", a, b, "-o", str(out)])
    assert "only B was deep-profiled" in capsys.readouterr().out
    assert json.loads(out.read_text())["deep_profiled"] == {"a": False, "b": True}
    main(["compare", a, a])
    assert "deep-profiled" not in capsys.readouterr().out

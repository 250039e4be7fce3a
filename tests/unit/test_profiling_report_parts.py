"""monitors.pipeline_profiler.report piece by piece, on stand-in sessions: the step's summary figures,
the system block, the device name and the files written as configured."""

import json
import os
import sys
import threading
from types import SimpleNamespace

import pytest

from monitors.pipeline_profiler import report as pr
from monitors.pipeline_profiler.config_files import load_config
from monitors.probes.readings import GpuReading, Snapshot


class Session:
    """What build_report's parts read from a ProfileSession."""

    def __init__(self, tmp_path=None, report_format="both", trace=True, probes=None):
        self.name = "gen"
        self.run_id = "gen-1"
        self.distributed = {"rank": 2, "world_size": 4, "local_rank": 0, "rank_unknown_reason": None}
        self.totals = {"n_steps": 0, "steps_s": 0.0, "n_blocks": 0, "blocks_s": 0.0, "n_frames": 0}
        self.notes = []
        self.probes = probes
        self._lock = threading.Lock()
        out = str(tmp_path) if tmp_path is not None else "unused"
        self.config = load_config(report={"format": report_format, "output_dir": out, "trace": trace})

    def note(self, message):
        self.notes.append(message)

    def host_name(self):
        return "host-a"


def test_rate_and_known_sum():
    assert pr._rate(3, 1.5) == 2.0
    assert pr._rate(0, 1.5) is None and pr._rate(3, 0.0) is None and pr._rate(None, 1.0) is None
    assert pr._known_sum([1, None, 2, True, 2.5]) == 3
    assert pr._known_sum([None, False]) is None and pr._known_sum([]) is None


def test_gpu_utilisation_of_a_snapshot():
    assert pr._gpu_utilisation(None) is None
    assert pr._gpu_utilisation(Snapshot(monotonic_s=0.0, unix_time_s=0.0)) is None
    snap = Snapshot(0.0, 0.0, gpus=(GpuReading(0, utilization_pct=10.0), GpuReading(1)))
    assert pr._gpu_utilisation(snap) == [10.0, None]


def test_max_gpu_peak_over_allocated_figures_only():
    def peak(value):
        return SimpleNamespace(value=value)

    span = SimpleNamespace(
        peaks={
            "cuda:0.allocated_bytes": peak(5.0),
            "cuda:1.allocated_bytes": peak(7.9),
            "cuda:2.allocated_bytes": peak(None),
            "cuda:0.reserved_bytes": peak(100),
            "process_rss_bytes": peak(1000),
        }
    )
    assert pr._max_gpu_peak(span) == 7 and isinstance(pr._max_gpu_peak(span), int)
    assert pr._max_gpu_peak(None) is None
    assert pr._max_gpu_peak(SimpleNamespace(peaks={"cuda:0.allocated_bytes": peak(None)})) is None


def test_device_name_from_the_gpus_else_the_cpu():
    gpus = [{"device": "cuda:0", "name": "H100"}, {"device": "cuda:1", "name": None}]
    assert pr.device_name({"gpus": gpus}) == "H100, cuda:1"
    assert pr.device_name({"gpus": [], "cpu_count": 8}) == "CPU (8 logical cores)"
    assert pr.device_name({"cpu_count": None}) == "CPU (? logical cores)"


class Probes:
    def __init__(self, fail=False):
        self.fail = fail

    def system_info(self):
        if self.fail:
            raise RuntimeError("no host")
        return {"cpu_count": 4, "gpus": []}


def test_system_block_of_the_profiling_api(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(get_num_threads=lambda: 3.0))  # a stand-in
    session = Session(probes=Probes())
    system = pr._system(session)
    assert system == {
        "cpu_count": 4,
        "gpus": [],
        "torch_num_threads": 3,
        "rank": 2,
        "world_size": 4,
        "local_rank": 0,
        "rank_unknown_reason": None,
        "host": "host-a",
        "pid": os.getpid(),
        "source": "profiling_api",
    }
    assert type(system["torch_num_threads"]) is int
    assert session.notes == []


def test_system_block_says_what_it_could_not_read(monkeypatch):
    def broken():
        raise RuntimeError("threads?")

    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(get_num_threads=broken))
    session = Session(probes=Probes(fail=True))
    system = pr._system(session)
    assert (
        system["torch_num_threads"] is None
        and system["source"] == "profiling_api"
        and "cpu_count" not in system
    )
    assert session.notes == [
        "system info unavailable: RuntimeError: no host",
        "torch thread count unavailable: RuntimeError: threads?",
    ]
    monkeypatch.delitem(sys.modules, "torch")  # torch never imported: no thread count
    assert pr._system(Session(probes=Probes()))["torch_num_threads"] is None


def test_summary_figures():
    session = Session()
    session.totals = {"n_steps": 4, "steps_s": 2.0, "n_blocks": 2, "blocks_s": 4.0, "n_frames": 16}
    phases = [
        {"stage": "inner", "n_calls": 4, "depth": 1},
        {"stage": "outer", "n_calls": 1, "depth": 0},
        {"stage": "late", "n_calls": 2, "depth": 0},
    ]
    models = [
        {"init_s": 0.5, "n_parameters": 10, "parameter_bytes": 40},
        {"init_s": 0.25, "n_parameters": None},
    ]
    span = SimpleNamespace(peak_rss_bytes=123, peaks={"cuda:0.allocated_bytes": SimpleNamespace(value=9)})
    summary = pr._summary(session, phases, models, 3, span, {"gpus": [{"name": "G"}]}).to_dict()
    assert summary == {
        "session": "gen",
        "rank": 2,
        "world_size": 4,
        "n_stage_calls": 7,
        "n_stages": 3,
        "slowest_stage": "outer",
        "n_steps": 4,
        "steps_total_s": 2.0,
        "steps_per_s": 2.0,
        "n_blocks": 2,
        "blocks_per_s": 0.5,
        "n_frames": 16,
        "frames_per_s": 4.0,
        "n_events": 3,
        "n_models": 2,
        "model_init_s": 0.75,
        "n_model_parameters": 10,
        "model_parameter_bytes": 40,
        "peak_rss_bytes": 123,
        "peak_gpu_allocated_bytes": 9,
        "device_name": "G",
    }


def test_summary_of_a_session_that_recorded_nothing():
    summary = pr._summary(
        Session(), [{"stage": "x", "n_calls": 1, "depth": 1}], [], 0, None, {"cpu_count": 2}
    ).to_dict()
    assert summary["slowest_stage"] is None
    assert (summary["steps_total_s"], summary["steps_per_s"], summary["blocks_per_s"]) == (None, None, None)
    assert (summary["n_frames"], summary["frames_per_s"]) == (None, None)
    assert (summary["model_init_s"], summary["n_model_parameters"], summary["model_parameter_bytes"]) == (
        None,
        None,
        None,
    )
    assert summary["peak_rss_bytes"] is None and summary["peak_gpu_allocated_bytes"] is None
    assert summary["device_name"] == "CPU (2 logical cores)"


def fake_report(run_id="gen-1"):
    return SimpleNamespace(prompt_id=run_id, to_dict=lambda: {"prompt_id": run_id, "nodes": [], "steps": []})


@pytest.mark.parametrize(
    ("report_format", "trace", "kinds"),
    [("json", False, ["json"]), ("html", True, ["html", "trace"]), ("both", True, ["json", "html", "trace"])],
)
def test_report_files_as_configured(tmp_path, monkeypatch, report_format, trace, kinds):
    monkeypatch.setattr(pr, "render_html", lambda data: f"<html>{data['prompt_id']}</html>")
    monkeypatch.setattr(
        pr, "reports_to_trace", lambda reports, deep_ops: {"traceEvents": [], "ops": deep_ops}
    )
    paths = pr.write_report_files(Session(tmp_path, report_format, trace), fake_report())
    names = {"json": "gen-1.json", "html": "gen-1.html", "trace": "gen-1.trace.json"}
    assert paths == {kind: os.path.join(str(tmp_path), names[kind]) for kind in kinds}
    assert sorted(os.listdir(tmp_path)) == sorted(names[k] for k in kinds)  # no temporary file left
    if "json" in kinds:
        assert json.loads(open(paths["json"]).read()) == {"prompt_id": "gen-1", "nodes": [], "steps": []}
    if "html" in kinds:
        assert open(paths["html"], encoding="utf-8").read() == "<html>gen-1</html>"
    if "trace" in kinds:
        assert json.loads(open(paths["trace"]).read()) == {"traceEvents": [], "ops": {"gen-1": None}}


def test_a_failed_write_is_left_out_of_the_paths(tmp_path, monkeypatch, caplog):
    def broken(data):
        raise RuntimeError("template")

    monkeypatch.setattr(pr, "render_html", broken)
    paths = pr.write_report_files(Session(tmp_path, "both", False), fake_report())
    assert list(paths) == ["json"]
    assert "could not write the html report" in caplog.text
    assert pr.write_report_files(Session(tmp_path, "html", False), fake_report()) == {}


def test_write_text_creates_the_folder(tmp_path):
    path = tmp_path / "a" / "b" / "r.html"
    pr._write_text(str(path), "text")
    assert path.read_text() == "text" and os.listdir(path.parent) == ["r.html"]

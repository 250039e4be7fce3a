"""The deep profile's per-node tables in the HTML report (monitors/exporters/deep_profile_html.py, formerly deep_profile/html_section.py)
and its start and finish in the profiling library (library.py), each on its own with fakes."""

from __future__ import annotations

import dataclasses
import types

from monitors.exporters.deep_profile_html import deep_profile_html, esc
from monitors.pipeline_profiler import deep_session as library


def step(rows, reasons=None):
    return {"kind": "deep_profile", "details": {"nodes": rows, "unknown_reasons": reasons or {}}}


def node(node_id="3", wall_s=0.5, device_time_s=None, **extra):
    return {
        "node_id": node_id,
        "class_type": "KSampler",
        "wall_s": wall_s,
        "device_time_s": device_time_s,
        **extra,
    }


def test_only_a_deep_profile_step_has_tables():
    assert deep_profile_html({"kind": "vae", "details": {"nodes": [node()]}}) == ""


def test_without_rows_it_says_so_with_the_reasons_escaped():
    text = deep_profile_html(step([], {"nodes": "the profiler failed <here>"}))
    assert "No node was profiled." in text
    assert "<li>nodes: the profiler failed &lt;here&gt;</li>" in text
    assert '<ul class="muted">' not in deep_profile_html(step([]))


def widths(text):
    return [part.split("%")[0] for part in text.split("width:")[1:]]


def test_bars_are_wall_and_device_time_against_the_longest():
    rows = [node("1", wall_s=2.0, device_time_s=1.0), node("2", wall_s=0.001), node("3", wall_s=0.5)]
    assert widths(deep_profile_html(step(rows))) == ["100.0", "50.0", "0.5", "25.0"]
    # the longest may be a device time; a missing one counts as nothing
    assert widths(deep_profile_html(step([node("1", wall_s=0.0, device_time_s=0.25)]))) == ["0.5", "100.0"]
    assert widths(deep_profile_html(step([node("1", wall_s=0.5)]))) == ["100.0"]


def test_no_bars_when_no_row_has_a_wall_time():
    text = deep_profile_html(step([node("1", wall_s=None, device_time_s=0.2)]))
    assert "width:" not in text and "#1 KSampler" in text


def test_cells_name_why_a_figure_is_missing_only_when_it_is():
    rows = [
        node("1", device_time_s=None, device_time_unknown_reason='no "CUDA"'),
        node("2", device_time_s=0.25, device_time_unknown_reason="stale"),
    ]
    text = deep_profile_html(step(rows))
    assert '<td class="num" title="no &quot;CUDA&quot;">' in text
    assert "stale" not in text


def test_top_ops_and_what_ranks_them():
    op = {"name": "aten::mm<x>", "n_calls": 3, "total_s": 0.25, "share_pct": 50.0}
    text = deep_profile_html(step([node("1", top_ops=[op, "not an op"], top_ops_by="device")]))
    assert '<td class="mono">aten::mm&lt;x&gt;</td>' in text and "50.0 %" in text
    assert "Top ops (by device time)" in text and "no ops" not in text
    plain = deep_profile_html(step([node("1", class_type=None)]))
    assert "no ops" in plain and "Top ops (by host time)" in plain
    assert "#1 <" in plain and "None" not in plain


def test_esc():
    assert esc(None) == "" and esc('a"b<') == "a&quot;b&lt;" and esc(1.5) == "1.5"


class FakeDeepProfiler:
    made: list = []

    def __init__(self, run_id, cuda):
        self.run_id, self.cuda = run_id, cuda
        FakeDeepProfiler.made.append(self)

    def start(self):
        return self

    def stop(self):
        return ["event"]


def session(n_devices=0, writes_json=True, deep=None):
    notes = []
    return types.SimpleNamespace(
        run_id="run-1",
        name="demo",
        probes=types.SimpleNamespace(torch_device_count=lambda: n_devices),
        note=notes.append,
        notes=notes,
        deep=deep,
        config=types.SimpleNamespace(report=types.SimpleNamespace(output_dir="out"), writes_json=writes_json),
    )


def test_start_profiles_cuda_only_with_a_device(monkeypatch):
    monkeypatch.setattr(library, "DeepProfiler", FakeDeepProfiler)
    FakeDeepProfiler.made = []
    assert library.start(session(0)).cuda is False
    assert library.start(session(1)).cuda is True
    assert library.start(session(2)).cuda is True

    def broken():
        raise RuntimeError("no probes")

    failing = session()
    failing.probes.torch_device_count = broken
    assert library.start(failing) is None
    assert failing.notes == ["deep profile not started: RuntimeError: no probes"]


@dataclasses.dataclass(frozen=True)
class Report:
    steps: tuple = ()


def test_finish_adds_the_step_or_leaves_the_report_as_it_was(monkeypatch):
    built = []
    monkeypatch.setattr(
        library, "build_step", lambda deep, events, base, out: built.append((events, out)) or "step"
    )
    report = Report(("first",))
    plain = session()
    assert library.finish(plain, report) is report
    assert library.finish(session(deep=FakeDeepProfiler("r", False)), None) is None
    running = session(deep=FakeDeepProfiler("r", False))
    assert library.finish(running, report) == Report(("first", "step")) and running.deep is None
    no_json = session(writes_json=False, deep=FakeDeepProfiler("r", False))
    library.finish(no_json, report)
    assert built == [(["event"], "out"), (["event"], None)]

    def broken(*args):
        raise RuntimeError("no events")

    monkeypatch.setattr(library, "build_step", broken)
    assert library.finish(session(deep=FakeDeepProfiler("r", False)), report) is report

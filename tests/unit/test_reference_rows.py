"""The hand-written rows of docs/metrics-reference.md and the rows of a step's memory picture
(monitors/vocabulary/reference_*.py): a row says "GPU only" exactly where its path is a GPU
figure (the rule the declared rows follow), each part of a picture has its unit, and a scope is
said on every row it covers."""

from __future__ import annotations

import dataclasses

import pytest

from monitors.vocabulary.reference_figure import SPECS, Figure, picture_figures
from monitors.vocabulary.reference_rows import RUN_FIGURES
from monitors.vocabulary.reference_session_rows import SESSION_AND_USAGE_FIGURES


def test_rows_are_frozen_and_not_gpu_only_unless_said():
    row = Figure("f", "VAE", "a.b", "s", "how")
    assert row.gpu_only is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.figure = "other"


@pytest.mark.parametrize("rows", [RUN_FIGURES, SESSION_AND_USAGE_FIGURES], ids=["run", "session and usage"])
def test_hand_written_rows_are_gpu_only_exactly_at_gpu_paths(rows):
    assert [r.path for r in rows if r.gpu_only] == [r.path for r in rows if "gpu" in r.path.lower()]
    assert all(r.spec in SPECS for r in rows)


def test_a_memory_picture_rows_units_and_gpu_only():
    rows = {r.path.removeprefix("steps[kind=k].details.memory."): r for r in picture_figures("k", "VAE", "p ")}
    assert len(rows) == 3 * 5 + 5 + 4 * 5
    assert [(p, r.unit) for p, r in rows.items() if p.startswith("process_rss_bytes.")] == [
        ("process_rss_bytes.baseline", "bytes"),
        ("process_rss_bytes.end", "bytes"),
        ("process_rss_bytes.change", "bytes"),
        ("process_rss_bytes.peak", "bytes"),
        ("process_rss_bytes.peak_at_s", "s"),
    ]
    assert rows["system_ram.used_pct.peak"].unit == "pct" and rows["system_ram.used_pct.peak_at_s"].unit == "s"
    assert rows["system_ram.available_bytes.low"].unit == "bytes"
    assert rows["system_ram.available_bytes.low_at_s"].unit == "s"
    assert rows["gpus[].utilization_pct.peak"].unit == "pct"
    assert rows["gpus[].utilization_pct.peak_at_s"].unit == "s"
    assert rows["gpus[].reserved_bytes.change"].unit == "bytes"
    assert [p for p, r in rows.items() if r.gpu_only] == [p for p in rows if p.startswith("gpus[].")]
    assert all(r.spec == "VAE" and r.figure.startswith("p ") for r in rows.values())


def test_a_memory_picture_rows_say_how_and_their_scope():
    plain = {r.path: r for r in picture_figures("k", "PROF", "")}
    base = "steps[kind=k].details.memory"
    assert plain[f"{base}.process_rss_bytes.peak"].figure == "process RSS: peak"
    assert plain[f"{base}.process_rss_bytes.peak"].how == (
        "highest seen during the step; full span readings (psutil, VmHWM for the RSS peak), sampler ticks in between"
    )
    assert plain[f"{base}.system_ram.available_bytes.low"].how == (
        "lowest seen during the step (psutil available memory; its low point is what matters)"
    )
    assert plain[f"{base}.gpus[].allocated_bytes.end"].how == (
        f"per GPU ({base}.gpus[].device); torch.cuda memory_allocated; peak from max_memory_allocated"
    )
    scoped = picture_figures("k", "PROF", "", scope="over two nodes")
    assert all(r.how.endswith("; over two nodes") for r in scoped)
    assert scoped[0].how == (
        "at the step's start; full span readings (psutil, VmHWM for the RSS peak), sampler ticks in between; "
        "over two nodes"
    )

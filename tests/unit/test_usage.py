"""Usage statistics across generations, and the log summary."""

import logging

import pytest
import torch

from monitors import pipeline_profiler as pm
from monitors.pipeline_profiler import usage
from monitors.probes.fake import GiB, fake_probes
from tests.unit.fake_clock import FakeClock, install


@pytest.fixture
def fresh(tmp_path):
    usage.reset_usage_statistics()
    yield lambda **keys: pm.configure(
        report={"output_dir": str(tmp_path), "format": "json", "trace": False}, **keys
    )
    pm.configure()
    usage.reset_usage_statistics()


def test_no_generation_yet():
    usage.reset_usage_statistics()
    stats = pm.get_usage_statistics()
    assert (
        stats["n_generations"] == 0 and stats["mean_generation_s"] is None and stats["model_init_s"] is None
    )


def test_generations_model_init_totals_and_means_on_cpu(fresh, monkeypatch):
    fresh(probes=fake_probes("no GPU"))  # a CPU machine whatever this one has
    clock = install(FakeClock(), monkeypatch)

    @pm.profile_model_parameters(name="tiny-unet")
    def load():
        clock.advance(0.02)
        return torch.nn.Conv2d(4, 4, 3)

    load()
    for pause in (0.01, 0.03):
        with pm.profile_session("gen"):
            clock.advance(pause)
    stats = pm.get_usage_statistics()
    assert stats["n_models_initialised"] == 1 and stats["model_init_s"] == pytest.approx(0.02)
    assert stats["models"][0]["name"] == "tiny-unet" and stats["models"][0]["n_parameters"] == 148
    assert stats["n_generations"] == 2 and stats["n_failed_generations"] == 0
    durations = [g["duration_s"] for g in stats["generations"]]
    assert durations == [pytest.approx(0.01), pytest.approx(0.03)]
    assert stats["total_generation_s"] == pytest.approx(sum(durations))
    assert stats["mean_generation_s"] == pytest.approx(sum(durations) / 2)
    assert stats["peak_rss_bytes"] > 0
    assert stats["device_name"].startswith("CPU (")
    assert stats["generations"][0]["gpu_utilization_before_pct"] is None  # no GPU: unknown, not 0


def test_gpu_utilisation_before_and_after_each_generation(fresh):
    probes = fake_probes("2 GPUs")
    fresh(probes=probes)
    for before, after in ((10.0, 80.0), (5.0, 60.0)):
        for dev in probes.nvml.devices:
            dev["utilization_pct"] = before
        with pm.profile_session("gpu-gen"):
            probes.torch.allocate(1, 2 * GiB)
            for dev in probes.nvml.devices:
                dev["utilization_pct"] = after
    stats = pm.get_usage_statistics()
    assert [g["gpu_utilization_before_pct"] for g in stats["generations"]] == [[10.0, 10.0], [5.0, 5.0]]
    assert [g["gpu_utilization_after_pct"] for g in stats["generations"]] == [[80.0, 80.0], [60.0, 60.0]]
    assert stats["peak_gpu_allocated_bytes"] == 4 * GiB
    assert stats["device_name"] == "Fake GPU 0, Fake GPU 1"


def test_log_summary(fresh, caplog):
    fresh()
    with pm.profile_session("logged"):
        pass
    logger = logging.getLogger("usage-test")
    caplog.set_level(logging.INFO, logger="usage-test")
    caplog.clear()  # the session's own INFO lines, captured where the root logger shows INFO
    stats = pm.log_usage_summary(logger)
    text = caplog.text
    assert stats["n_generations"] == 1
    assert "generations: 1 (0 failed)" in text and "#1 logged success" in text and "peak RSS" in text
    assert all(r.name == "usage-test" for r in caplog.records)


def test_kept_rows_are_bounded_but_totals_exact(monkeypatch):
    usage.reset_usage_statistics()
    monkeypatch.setattr(usage, "MAX_KEPT_GENERATIONS", 3)
    tracker = usage.UsageTracker()
    for i in range(5):
        tracker.record_generation("g", f"r{i}", 1.0, "success", None, None, None, None, None)
    stats = tracker.statistics()
    assert (
        stats["n_generations"] == 5 and stats["total_generation_s"] == 5.0 and len(stats["generations"]) == 3
    )


def test_current_allocated_and_reserved_per_gpu_and_in_total():
    usage.reset_usage_statistics()
    probes = fake_probes("2 GPUs")
    probes.torch.allocate(0, 1 * GiB)
    probes.torch.allocate(1, 2 * GiB)
    stats = pm.get_usage_statistics(probes)
    assert [d["device"] for d in stats["current_gpu_memory"]] == ["cuda:0", "cuda:1"]
    assert stats["current_gpu_memory"][1]["allocated_bytes"] == 2 * GiB
    assert stats["current_gpu_allocated_bytes"] == 3 * GiB
    assert stats["current_gpu_reserved_bytes"] >= 3 * GiB
    assert stats["current_gpu_unknown_reason"] is None
    assert stats["current_process_rss_bytes"] == probes.host.rss_bytes


def test_no_gpu_current_memory_is_none_with_a_reason():
    stats = pm.get_usage_statistics(fake_probes())
    assert stats["current_gpu_allocated_bytes"] is None and stats["current_gpu_memory"] == []
    assert stats["current_gpu_unknown_reason"] == "no GPU seen by torch"


def test_log_file_beside_the_console_log(fresh, tmp_path, caplog):
    fresh()
    with pm.profile_session("filed"):
        pass
    logger = logging.getLogger("usage-file-test")
    logger.setLevel(logging.WARNING)  # the console would not show INFO: the file still gets it
    log_file = tmp_path / "usage.log"
    pm.log_usage_summary(logger, log_file=log_file, probes=fake_probes("1 GPU"))
    pm.log_usage_summary(logger, log_file=log_file, probes=fake_probes("1 GPU"))
    text = log_file.read_text()
    assert text.count("generations: 1 (0 failed)") == 2  # appended, not overwritten
    assert " - INFO - " in text and "now: RSS" in text and "GPU allocated" in text
    assert logger.level == logging.WARNING and not logger.handlers  # left as found


def test_usage_statistics_export_as_json_and_csv(fresh, tmp_path):
    import csv

    probes = fake_probes("2 GPUs")
    fresh(probes=probes)
    for before in (15.0, 25.0):
        for dev in probes.nvml.devices:
            dev["utilization_pct"] = before
        with pm.profile_session("exported"):
            probes.nvml.devices[1]["utilization_pct"] = 90.0
    written = usage.export_usage_statistics(tmp_path / "usage.csv", probes=fake_probes("1 GPU"))
    assert [p.rsplit("/", 1)[-1] for p in written] == ["usage.csv", "usage.totals.csv"]
    rows = list(csv.DictReader(open(written[0])))
    assert [r["index"] for r in rows] == ["1", "2"] and rows[0]["name"] == "exported"
    assert float(rows[0]["duration_s"]) >= 0 and "gpu_utilization_before_pct" not in rows[0]
    # one number per GPU and cell, never a list's text
    assert [float(r["cuda:0.gpu_utilization_before_pct"]) for r in rows] == [15.0, 25.0]
    assert [float(r["cuda:1.gpu_utilization_after_pct"]) for r in rows] == [90.0, 90.0]
    assert [float(r["cuda:0.gpu_utilization_after_pct"]) for r in rows] == [15.0, 25.0]
    totals = {r["name"]: r["value"] for r in csv.DictReader(open(written[1]))}
    assert totals["n_generations"] == "2"
    assert totals["current_cuda:0.allocated_bytes"] == "0"
    assert totals["current_gpu_unknown_reason"] == ""  # unknown is an empty cell
    (json_path,) = usage.export_usage_statistics(tmp_path / "usage.json")
    import json

    assert json.load(open(json_path))["n_generations"] == 2

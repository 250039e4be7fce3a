"""monitors.pipeline_profiler.usage on a tracker of its own: exact totals, peaks, the summary lines word
for word, the memory in use now with a device of unknown figures, and the export's formats."""

import logging
import os

import pytest

from monitors.pipeline_profiler import usage
from monitors.probes.fake import GiB, fake_probes


def generation(
    tracker, run_id, seconds, status="success", rss=None, gpu=None, before=None, after=None, device=None
):
    tracker.record_generation("gen", run_id, seconds, status, rss, gpu, before, after, device)


def test_totals_peaks_and_rows():
    tracker = usage.UsageTracker()
    tracker.record_model_init("unet", 0.5, {"n_parameters": 10})
    tracker.record_model_init("vae", 0.25)
    generation(tracker, "r1", 2.0, rss=100, gpu=None, device="GPU A")
    generation(tracker, "r2", 1.0, status="error", rss=300, gpu=50, device=None)
    generation(tracker, "r3", 6.0, status="interrupted", rss=200, gpu=20, before=[1.0], after=[2.0])
    stats = tracker.statistics(fake_probes())
    assert stats["n_models_initialised"] == 2 and stats["model_init_s"] == 0.75
    assert stats["models"] == [
        {"name": "unet", "init_s": 0.5, "n_parameters": 10},
        {"name": "vae", "init_s": 0.25},
    ]
    assert (stats["n_generations"], stats["n_failed_generations"]) == (3, 2)
    assert (stats["total_generation_s"], stats["mean_generation_s"]) == (9.0, 3.0)
    assert (stats["min_generation_s"], stats["max_generation_s"]) == (1.0, 6.0)
    assert (stats["peak_rss_bytes"], stats["peak_gpu_allocated_bytes"]) == (300, 50)
    assert stats["device_name"] == "GPU A"  # a later run without a name keeps the known one
    assert stats["generations"][2] == {
        "index": 3,
        "name": "gen",
        "run_id": "r3",
        "status": "interrupted",
        "duration_s": 6.0,
        "peak_rss_bytes": 200,
        "peak_gpu_allocated_bytes": 20,
        "gpu_utilization_before_pct": [1.0],
        "gpu_utilization_after_pct": [2.0],
    }
    assert [g["index"] for g in stats["generations"]] == [1, 2, 3]


def test_an_empty_tracker_knows_nothing():
    stats = usage.UsageTracker().statistics(fake_probes())
    assert stats["n_models_initialised"] == 0 and stats["model_init_s"] is None and stats["models"] == []
    assert stats["total_generation_s"] is None and stats["mean_generation_s"] is None
    assert stats["min_generation_s"] is None and stats["max_generation_s"] is None
    assert stats["peak_rss_bytes"] is None and stats["device_name"] is None


def test_models_are_copies_and_bounded(monkeypatch):
    monkeypatch.setattr(usage, "MAX_KEPT_MODELS", 2)
    tracker = usage.UsageTracker()
    for i in range(3):
        tracker.record_model_init(f"m{i}", 1.0)
    models = tracker.models()
    assert [m["name"] for m in models] == ["m1", "m2"]
    models[0]["name"] = "changed"
    assert tracker.models()[0]["name"] == "m1"
    assert tracker.statistics(fake_probes())["model_init_s"] == 3.0


def test_the_kept_bounds():
    assert (usage.MAX_KEPT_GENERATIONS, usage.MAX_KEPT_MODELS) == (1000, 100)


def test_reset_forgets_everything():
    tracker = usage.UsageTracker()
    generation(tracker, "r1", 1.0, rss=5)
    tracker.record_model_init("m", 1.0)
    tracker.reset()
    stats = tracker.statistics(fake_probes())
    assert (
        stats["n_generations"] == 0 and stats["n_models_initialised"] == 0 and stats["peak_rss_bytes"] is None
    )


def test_current_memory_of_a_device_with_unknown_figures():
    probes = fake_probes("2 GPUs")
    probes.torch.allocate(0, GiB)
    probes.torch.fail.add("memory")  # neither device can be read: their figures are unknown
    now = usage.current_memory(probes)
    assert now["current_gpu_allocated_bytes"] is None and now["current_gpu_reserved_bytes"] is None
    assert [d["allocated_bytes"] for d in now["current_gpu_memory"]] == [None, None]
    assert now["current_gpu_unknown_reason"] is None  # torch sees the GPUs


def test_summary_lines_word_for_word():
    stats = {
        "device_name": None,
        "n_models_initialised": 1,
        "model_init_s": 0.5,
        "n_generations": 2,
        "n_failed_generations": 1,
        "total_generation_s": 3.0,
        "mean_generation_s": 1.5,
        "peak_rss_bytes": GiB,
        "peak_gpu_allocated_bytes": None,
        "current_process_rss_bytes": 2 * GiB,
        "generations": [
            {
                "index": i,
                "name": "g",
                "status": "success",
                "duration_s": 1.0,
                "gpu_utilization_before_pct": [10.4, None] if i == 21 else None,
                "gpu_utilization_after_pct": [] if i == 21 else [90.0],
            }
            for i in range(1, 22)
        ],
    }
    lines = usage.format_usage_summary(stats)
    assert lines[:5] == [
        "Pipeline Monitor usage on unknown device:",
        "  models initialised: 1 in 0.500 s",
        "  generations: 2 (1 failed), total 3.000 s, mean 1.500 s",
        "  peak RSS 1.0 GiB, peak GPU allocated unknown",
        "  now: RSS 2.0 GiB, GPU allocated unknown, reserved unknown",
    ]
    assert len(lines) == 25  # the last 20 generations
    assert lines[5] == "  #2 g success 1.000 s, GPU utilisation before n/a after 90 %"
    assert lines[-1] == "  #21 g success 1.000 s, GPU utilisation before 10 %, n/a after n/a"
    stats["model_init_s"] = None
    assert usage.format_usage_summary(stats)[1] == "  models initialised: 1 in n/a"


def test_log_summary_at_a_level_and_into_a_file_only_when_asked(tmp_path, caplog):
    logger = logging.getLogger("usage-tracker-test")
    caplog.set_level(logging.DEBUG, logger="usage-tracker-test")
    usage.log_usage_summary(logger, level=logging.DEBUG, probes=fake_probes())
    assert caplog.records and {r.levelno for r in caplog.records} == {logging.DEBUG}
    assert not logger.handlers
    logger.setLevel(logging.ERROR)
    log_file = tmp_path / "u.log"
    usage.log_usage_summary(logger, level=logging.INFO, log_file=log_file, probes=fake_probes())
    assert "Pipeline Monitor usage on" in log_file.read_text() and logger.level == logging.ERROR
    caplog.clear()
    usage.log_usage_summary(logger, level=logging.INFO, probes=fake_probes())  # no file: the level rules
    assert logger.level == logging.ERROR and not [r for r in caplog.records if r.name == logger.name]
    logger.setLevel(logging.NOTSET)


def test_export_formats(tmp_path):
    usage.reset_usage_statistics()
    json_path = tmp_path / "u.data"
    assert usage.export_usage_statistics(json_path, probes=fake_probes()) == [str(json_path)]
    csv_path = str(tmp_path / "u")
    assert usage.export_usage_statistics(csv_path, fmt="csv", probes=fake_probes()) == [
        csv_path,
        csv_path + ".totals.csv",
    ]
    upper = str(tmp_path / "U.CSV")
    assert usage.export_usage_statistics(upper, probes=fake_probes()) == [
        upper,
        str(tmp_path / "U.totals.csv"),
    ]
    assert sorted(os.listdir(tmp_path)) == ["U.CSV", "U.totals.csv", "u", "u.data", "u.totals.csv"]
    with pytest.raises(ValueError, match="format 'xml': json or csv"):
        usage.export_usage_statistics(tmp_path / "u.xml", fmt="xml", probes=fake_probes())

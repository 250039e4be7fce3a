"""Code written for Inferix's profiling module runs unchanged but for its import line (issue 16):
its decorators with their extractor forms, its YAML file read as is (warnings, never errors), its
--enable_profiling/--profiling_config flags, the real-time line, and its aggregation over a folder
of rank reports from a real torch.distributed job."""

import argparse
import importlib.util
import json
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from monitors import pipeline_profiler as pm
from monitors.cli.commands import EXIT_OK, main
from monitors.pipeline_profiler import usage
from monitors.pipeline_profiler.config import ConfigError
from monitors.pipeline_profiler.config_files import load_config
from monitors.pipeline_profiler.display import display_line
from monitors.pipeline_profiler.inferix import (
    add_profiling_arguments,
    add_profiling_event,
    configure_from_args,
    profile_diffusion_step,
    profile_method,
    profile_session,
)
from monitors.probes import GpuReading, Snapshot
from monitors.probes.fake import fake_probes

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The guide's three files ("Basic Configuration File", "Development Mode", "Production Mode"), verbatim.
BASIC_YAML = """\
profiling:
  enabled: true                    # Enable profiling system
  real_time_display: true         # Display real-time metrics
  display_interval: 3.0           # Update display every 3 seconds

  # GPU monitoring
  gpu_monitor_interval: 0.5       # Sample GPU metrics every 0.5 seconds
  monitor_gpu_memory: true        # Monitor GPU memory usage
  monitor_gpu_utilization: true   # Monitor GPU utilization
  monitor_gpu_temperature: true   # Monitor GPU temperature
  monitor_gpu_power: true         # Monitor GPU power consumption

  # CPU monitoring
  cpu_monitor_interval: 1.0       # Sample CPU metrics every 1 second
  monitor_cpu_usage: true         # Monitor CPU usage
  monitor_system_memory: true     # Monitor system memory

  # Report generation
  generate_final_report: true     # Generate final report
  report_format: "both"           # Generate both HTML and JSON formats
  output_dir: "./example/self_forcing/profiling_reports"  # Report output directory

  # Advanced options
  max_data_points: 10000          # Limit memory usage
  profile_inference_steps: true   # Analyze each inference step
  profile_vae_decode: true        # Analyze VAE decoding
  profile_text_encoding: true     # Analyze text encoding

  # Session metadata
  session_tags:
    model: "self_forcing"
    experiment: "performance_analysis"
"""
DEVELOPMENT_YAML = """\
profiling:
  enabled: true
  real_time_display: true
  display_interval: 1.0          # More frequent updates

  # High-frequency monitoring
  gpu_monitor_interval: 0.1      # Higher frequency sampling
  cpu_monitor_interval: 0.5

  # Save all data
  generate_final_report: true
  report_format: "both"
  save_raw_data: true            # Save raw monitoring data
  output_dir: "./debug_profiling"

  # Analyze everything
  profile_inference_steps: true
  profile_vae_decode: true
  profile_text_encoding: true

  session_tags:
    mode: "debug"
    detailed_analysis: true
"""
PRODUCTION_YAML = """\
profiling:
  enabled: true
  real_time_display: false       # Disable real-time display to reduce overhead

  # Reduce monitoring frequency
  gpu_monitor_interval: 1.0
  cpu_monitor_interval: 2.0

  # Monitor only key metrics
  monitor_gpu_memory: true
  monitor_gpu_utilization: true
  monitor_gpu_temperature: false
  monitor_gpu_power: false
  monitor_cpu_usage: false
  monitor_system_memory: true

  # Generate only final report
  generate_final_report: true
  report_format: "json"          # Only JSON format for automated processing
  save_raw_data: false
  output_dir: "./production_profiling"

  # Reduce data points to save memory
  max_data_points: 5000

  # Analyze only major phases
  profile_inference_steps: true
  profile_vae_decode: true
  profile_text_encoding: false

  session_tags:
    mode: "production"
    minimal_overhead: true
"""


@pytest.fixture
def clean_profiling():
    usage.reset_usage_statistics()
    yield
    pm.configure()
    usage.reset_usage_statistics()


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_documented_yaml_is_read_as_is(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    c = load_config(write(tmp_path, "basic.yaml", BASIC_YAML))
    assert c.enabled is True
    assert (c.display.realtime, c.display.interval_s) == (True, 3.0)
    assert (c.sampling.gpu_interval_s, c.sampling.cpu_interval_s) == (0.5, 1.0)
    m = c.metrics
    assert (m.gpu_memory, m.gpu_utilization, m.gpu_temperature, m.gpu_power, m.cpu, m.system_memory) == (
        True,
        True,
        True,
        True,
        True,
        True,
    )
    assert (c.report.format, c.report.output_dir) == ("both", "./example/self_forcing/profiling_reports")
    assert c.max_data_points == 10000
    assert {k: c.stages[k] for k in ("inference_steps", "vae_decode", "text_encoding")} == dict.fromkeys(
        ("inference_steps", "vae_decode", "text_encoding"), True
    )
    assert dict(c.tags) == {"model": "self_forcing", "experiment": "performance_analysis"}
    assert warnings_of(caplog) == []  # every key of the guide's file is followed


def test_development_and_production_files(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    dev = load_config(write(tmp_path, "dev.yaml", DEVELOPMENT_YAML))
    assert (dev.display.interval_s, dev.sampling.gpu_interval_s, dev.sampling.cpu_interval_s) == (
        1.0,
        0.1,
        0.5,
    )
    assert dev.report.output_dir == "./debug_profiling" and dict(dev.tags) == {
        "mode": "debug",
        "detailed_analysis": True,
    }
    assert warnings_of(caplog) == []  # save_raw_data: true is what the report does anyway
    prod = load_config(write(tmp_path, "prod.yaml", PRODUCTION_YAML))
    assert prod.display.realtime is False and prod.report.format == "json" and prod.max_data_points == 5000
    assert (prod.metrics.gpu_temperature, prod.metrics.gpu_power, prod.metrics.cpu) == (False, False, False)
    assert prod.stage_enabled("text_encoding") is False and prod.stage_enabled("vae_decode") is True
    # save_raw_data: false cannot be followed (samples stay in the report): said, not refused
    assert [w for w in warnings_of(caplog) if "profiling.save_raw_data" in w]


def test_inferix_file_is_never_rejected_and_names_what_it_cannot_follow(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    text = (
        "other_tool: {a: 1}\n"
        "profiling:\n"
        "  enabled: true\n"
        "  report_format: pdf\n"
        "  display_interval: soon\n"
        "  generate_final_report: false\n"
        "  monitor_disk: true\n"
        "  max_data_points: 300\n"
        "  session_tags: {model: wan, sizes: [480, 832]}\n"
    )
    c = load_config(write(tmp_path, "odd.yaml", text))
    assert c.max_data_points == 300 and c.report.format == "both" and c.display.interval_s == 5.0
    assert dict(c.tags) == {"model": "wan", "sizes": "[480, 832]"}
    found = warnings_of(caplog)
    for key in (
        "other_tool",
        "profiling.report_format",
        "profiling.display_interval",
        "profiling.generate_final_report",
        "profiling.monitor_disk",
    ):
        assert [w for w in found if key in w], (key, found)
    # This pack's own format stays strict
    with pytest.raises(ConfigError, match="monitor_disk: unknown key"):
        load_config(write(tmp_path, "own.yaml", "monitor_disk: true\n"))


class Pipe:
    @profile_session("gen", {"mode": "t2v"})
    @add_profiling_event("done", lambda result, **kwargs: {"shape": list(result), "kw": sorted(kwargs)})
    @add_profiling_event("done_positional", lambda _, prompts, **kwargs: {"prompts": prompts})
    @add_profiling_event("no_data")
    @add_profiling_event("broken", lambda result, **kwargs: 1 / 0)
    def run(self, prompts, **kwargs):
        for i, t in enumerate((900, 100)):
            self.step(i, t, block_size=2)
        self.step_own_form(5)
        encode("x")
        return [2, 3]

    @profile_diffusion_step(
        lambda args, kwargs: {"step": args[0], "timestep": args[1], "block_size": kwargs["block_size"]}
    )
    def step(self, step, timestep, block_size):
        pass

    @profile_diffusion_step(lambda args, kwargs, result: {"step_index": args[0], "result": result})
    def step_own_form(self, index):
        return "ok"


@profile_method(metadata={"encoder": "t5"})
def encode(prompt):
    return prompt


def test_decorators_accept_both_extractor_forms(tmp_path, clean_profiling):
    pm.configure(report={"output_dir": str(tmp_path), "format": "json", "trace": False}, probes=fake_probes())
    assert Pipe().run(["a fox"], seed=3) == [2, 3]
    (path,) = tmp_path.glob("gen-*.json")
    report = json.loads(path.read_text())
    details = report["steps"][0]["details"]
    events = {e["name"]: e["data"] for e in details["events"]}
    assert events["done"] == {"shape": [2, 3], "kw": ["seed"]}
    assert events["done_positional"] == {"prompts": ["a fox"]}
    assert events["no_data"] is None and events["broken"] is None
    assert events["encode.metadata"] == {"encoder": "t5"}
    assert any("event broken" in e and "ZeroDivisionError" in e for e in report["monitor_errors"])
    steps = details["diffusion_steps"]
    assert [(s["step"], s["timestep"], s["block_size"]) for s in steps[:2]] == [(0, 900, 2), (1, 100, 2)]
    assert steps[2]["step_index"] == 5 and steps[2]["result"] == "ok"
    titles = [n["title"] for n in report["nodes"]]
    assert titles[:3] == ["step 0", "step 1", "step 5"] and "encode" in titles
    assert details["tags"]["mode"] == "t2v"
    # outside a session nothing is recorded and nothing fails
    assert Pipe().step(0, 1, block_size=1) is None


def test_flags_helper(tmp_path, clean_profiling):
    config = write(
        tmp_path, "p.yaml", BASIC_YAML.replace("./example/self_forcing/profiling_reports", str(tmp_path))
    )
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompt")
    add_profiling_arguments(parser)
    assert (
        configure_from_args(parser.parse_args(["--prompt", "x", "--profiling_config", config])).enabled
        is False
    )
    assert pm.is_enabled() is False
    c = configure_from_args(parser.parse_args(["--enable_profiling", "--profiling_config", config]))
    assert pm.is_enabled() and c.report.output_dir == str(tmp_path) and c.display.interval_s == 3.0
    on = argparse.ArgumentParser()
    add_profiling_arguments(on, enabled_by_default=True)
    assert configure_from_args(on.parse_args([])).enabled is True
    assert configure_from_args(on.parse_args(["--no-enable_profiling"])).enabled is False


def test_display_line_has_memory_used_of_total_and_percent():
    gib = 1024**3
    snapshot = Snapshot(
        monotonic_s=0.0,
        unix_time_s=0.0,
        process_rss_bytes=gib,
        ram_used_bytes=12 * gib,
        ram_total_bytes=32 * gib,
        ram_used_pct=37.5,
        cpu_pct=45.3,
        gpus=(
            GpuReading(
                index=0,
                allocated_bytes=6 * gib,
                nvml_used_bytes=8 * gib,
                nvml_total_bytes=24 * gib,
                utilization_pct=85.2,
                temperature_c=72.1,
                power_w=210.0,
            ),
        ),
    )
    line = display_line("t2v", 12.0, "denoise", snapshot)
    assert "stage denoise" in line and "CPU 45 %" in line
    assert "RAM 12.0 GiB / 32.0 GiB (37.5 %)" in line
    assert "cuda:0 8.0 GiB / 24.0 GiB (33.3 %) util 85 % 72 °C 210 W" in line
    # Unknown totals are left out, never guessed
    bare = display_line("t2v", 1.0, None, Snapshot(monotonic_s=0.0, unix_time_s=0.0))
    assert "RAM n/a" in bare and "CPU n/a" in bare


def test_realtime_line_is_logged_during_a_session(tmp_path, clean_profiling, caplog):
    caplog.set_level(logging.INFO, logger="monitors.pipeline_profiler.session")
    pm.configure(
        display={"realtime": True, "interval_s": 0.01},
        sampling={"cpu_interval_s": 0.01, "gpu_interval_s": 0.01},
        report={"output_dir": str(tmp_path), "format": "json", "trace": False},
        probes=fake_probes(),
    )
    with pm.profile_session("live"):
        for _ in range(500):  # until the sampler has ticked (bounded; no timing is asserted)
            if any(" RAM " in r.getMessage() for r in caplog.records):
                break
            time.sleep(0.01)
    lines = [r.getMessage() for r in caplog.records if "pipeline monitor [live]" in r.getMessage()]
    assert lines and " / " in lines[0] and "%)" in lines[0]


def test_two_rank_job_runs_the_guide_example_and_aggregates_the_folder(tmp_path):
    """The guide's class, YAML file (unchanged, relative output_dir included), flags and
    aggregation command, on a real 2-process gloo job."""
    (tmp_path / "profiling_config.yaml").write_text(BASIC_YAML)
    job = (
        "import sys, torch.multiprocessing as mp\n"
        "from tests.unit.inferix_example import rank_worker\n"
        "mp.spawn(rank_worker, args=(2, sys.argv[1], sys.argv[2]), nprocs=2, join=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": REPO}
    ran = subprocess.run(
        [sys.executable, "-c", job, str(tmp_path / "init"), "profiling_config.yaml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Inferix profiling config" not in ran.stderr  # nothing in the guide's file is refused or ignored
    out_dir = tmp_path / "example" / "self_forcing" / "profiling_reports"
    reports = sorted(p for p in out_dir.glob("*.json") if not p.name.endswith(".trace.json"))
    assert [p.name.rsplit("-", 1)[1] for p in reports] == ["rank0.json", "rank1.json"]
    for rank, path in enumerate(reports):
        assert path.with_suffix(".html").is_file()  # report_format: both
        check_documented_figures(json.loads(path.read_text()), rank)

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitors",
            "aggregate",
            "--reports_dir",
            "./example/self_forcing/profiling_reports",
            "--output",
            "./aggregated_report.json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    assert "2 report(s) aggregated, 0 skipped" in done.stdout and "ranks: 2" in done.stdout
    result = json.loads((tmp_path / "aggregated_report.json").read_text())
    check_aggregate(result)

    # Inferix's own layout: one rank_<n>/ folder per rank
    for rank, path in enumerate(reports):
        (tmp_path / "by_rank" / f"rank_{rank}").mkdir(parents=True)
        shutil.copy(path, tmp_path / "by_rank" / f"rank_{rank}" / path.name)
    out = tmp_path / "by_rank.json"
    assert main(["aggregate", "--reports_dir", str(tmp_path / "by_rank"), "--output", str(out)]) == EXIT_OK
    check_aggregate(json.loads(out.read_text()))


def check_documented_figures(report: dict, rank: int | None, world_size: int | None = 2) -> None:
    """Every figure the guide names, where the report keeps it (docs/profiling.md, Coming from Inferix)."""
    step = report["steps"][0]
    summary, details = step["summary"], step["details"]
    assert report["status"] == "success" and report["monitor_errors"] == []
    assert summary["session"] == "video_generation" and summary["rank"] == rank
    assert summary["world_size"] == world_size
    # stages (profile_method, defaults by name) and the phase time breakdown
    stages = {n["class_type"] for n in report["nodes"]}
    assert {
        "model_initialization",
        "checkpoint_loading",
        "model_init",
        "inference_steps",
        "block_computation",
    } <= stages
    phases = {p["stage"]: p for p in details["phases"]}
    for stage in ("model_initialization", "checkpoint_loading", "inference_steps", "block_computation"):
        assert phases[stage]["n_calls"] >= 1 and phases[stage]["total_s"] > 0 and "share_pct" in phases[stage]
    # diffusion steps, blocks, model parameters, events as the extractors gave them
    assert [(s["step"], s["timestep"], s["block_size"]) for s in details["diffusion_steps"]] == [
        (0, 1000, 2),
        (1, 750, 2),
        (2, 500, 2),
        (3, 250, 2),
    ]
    assert all(s["duration_s"] > 0 for s in details["diffusion_steps"])
    assert summary["n_steps"] == 4 and summary["steps_per_s"] > 0
    assert [
        (b["block_index"], b["block_size"], b["computation_time_ms"], b["memory_usage_mb"])
        for b in details["blocks"]
    ] == [(0, 2, 1.5, 10.0), (1, 2, 3.0, 20.0), (2, 2, 4.5, 30.0)]
    assert summary["n_blocks"] == 3 and summary["blocks_per_s"] > 0
    (model,) = details["models"]
    assert (model["model_name"], model["parameters_count"], model["model_type"]) == (
        "tiny_dit",
        1234,
        "diffusion",
    )
    assert summary["n_model_parameters"] == 1234
    assert summary["model_parameter_bytes"] is None  # the guide's figures have no bytes: unknown, not 0
    events = {e["name"]: e["data"] for e in details["events"]}
    assert events == {
        "checkpoint_loaded": {"checkpoint_path": "weights/ckpt.pt"},
        "generation_completed": {"output_shape": [6, 4, 8, 8]},
    }
    # session tags: the decorator's and the file's
    assert details["tags"] == {"mode": "t2v", "model": "self_forcing", "experiment": "performance_analysis"}
    # the metrics timeline (CPU usage, system memory) and the memory used / total / percent
    samples = details["samples"]
    assert {"process_rss_bytes", "ram_used_bytes", "cpu_pct"} <= set(samples)
    assert samples["t_s"], "the timeline has no sample"
    for snapshot in (report["span"]["baseline"], report["span"]["end"]):
        assert snapshot["ram_used_bytes"] > 0 and snapshot["ram_total_bytes"] > 0
        assert 0 < snapshot["ram_used_pct"] <= 100 and snapshot["cpu_pct"] is not None
    assert summary["peak_rss_bytes"] > 0 and summary["device_name"]
    # the file's settings, as the session ran with them
    config = details["config"]
    assert config["display"] == {"realtime": True, "interval_s": 3.0}
    assert config["sampling"] == {"gpu_interval_s": 0.5, "cpu_interval_s": 1.0}
    assert config["report"]["format"] == "both" and config["max_data_points"] == 10000
    # suggestions and system information
    assert isinstance(step["findings"], list)
    assert (
        report["system"]["cpu_count"] and report["system"]["ram_total_bytes"] and report["system"]["platform"]
    )


def test_guide_example_runs_with_the_pack_entry_as_its_only_import(tmp_path, clean_profiling, monkeypatch):
    """The guide's class with `from monitors.pipeline_profiler import ...` in place of Inferix's import:
    the pack's own entry takes Inferix's extractor forms and its add_profiling_event decorator."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    source = (pathlib.Path(REPO) / "tests" / "unit" / "inferix_example.py").read_text()
    guide_import = "from monitors.pipeline_profiler.decorators import ("
    assert source.count(guide_import) == 1
    # a file of its own, imported as any module is (the registry's pack check rejects exec)
    example = tmp_path / "inferix_example_pack_entry.py"
    example.write_text(source.replace(guide_import, "from monitors.pipeline_profiler import ("))
    spec = importlib.util.spec_from_file_location("inferix_example_pack_entry", example)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.add_profiling_event is pm.add_profiling_event
    assert module.profile_diffusion_step is pm.profile_diffusion_step  # the pack's own, not an adapter
    config = write(
        tmp_path, "p.yaml", BASIC_YAML.replace("./example/self_forcing/profiling_reports", str(tmp_path))
    )
    module.run_pipeline(["--prompt", "a lighthouse", "--enable_profiling", "--profiling_config", config])
    (path,) = [p for p in tmp_path.glob("video_generation-*.json") if not p.name.endswith(".trace.json")]
    check_documented_figures(json.loads(path.read_text()), None, None)


def test_record_event_is_the_instant_event_and_add_profiling_event_the_decorator(tmp_path, clean_profiling):
    pm.configure(report={"output_dir": str(tmp_path), "format": "json", "trace": False}, probes=fake_probes())

    @pm.add_profiling_event("after", lambda result, **kwargs: {"result": result})
    def work(x):
        return x * 2

    with pm.profile_session("events"):
        assert pm.record_event("now", {"a": 1}) == {"a": 1}
        assert pm.record_event("lazy", lambda: {"b": 2}) == {"b": 2}
        assert work(4) == 8
    assert pm.record_event("outside", lambda: pytest.fail("called outside a session")) is None
    (path,) = tmp_path.glob("events-*.json")
    events = json.loads(path.read_text())["steps"][0]["details"]["events"]
    assert [(e["name"], e["data"]) for e in events] == [
        ("now", {"a": 1}),
        ("lazy", {"b": 2}),
        ("after", {"result": 8}),
    ]


def check_aggregate(result: dict) -> None:
    assert result["n_reports"] == 2 and result["skipped"] == []
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    for key in ("duration_s", "peak_rss_bytes", "steps_per_s", "blocks_per_s"):
        figures = result["metrics"][key]
        assert figures["n"] == 2 and figures["min"] <= figures["mean"] <= figures["max"]
    assert result["stages"]["inference_steps"]["n_ranks"] == 2
    assert result["slowest_rank"]["rank"] in (0, 1)


def test_plain_pipeline_takes_the_flags_and_an_inferix_file(tmp_path, clean_profiling):
    from tests.unit.test_profiling_example import load_example

    config = write(
        tmp_path,
        "inferix.yaml",
        PRODUCTION_YAML.replace("./production_profiling", str(tmp_path / "reports")),
    )
    example = load_example()
    (session,) = example.run(["--profiling_config", config, "--steps", "2"])
    assert set(session.paths) == {"json", "trace"}  # report_format: json
    assert session.config.max_data_points == 5000 and session.tags["mode"] == "production"
    assert example.run(["--no-enable_profiling", "--steps", "2"]) == [None]

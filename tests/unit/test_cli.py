"""`python -m monitors aggregate|compare|trace`: figures, skipped inputs, exit codes, a real 2-rank job."""

import copy
import json
import os
import subprocess
import sys

import pytest

from monitors.cli.commands import EXIT_NO_INPUT, EXIT_OK, EXIT_REGRESSION, EXIT_SKIPPED, EXIT_USAGE, main
from monitors.report import SCHEMA_VERSION

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def report(
    run_id, duration, rank=None, stages=(("denoise", 1.0), ("decode", 0.5)), rss=1000, steps_per_s=None
):
    nodes, t = [], 0.0
    for i, (stage, seconds) in enumerate(stages, 1):
        nodes.append(
            {
                "node_id": str(i),
                "class_type": stage,
                "title": stage,
                "status": "executed",
                "cached": False,
                "start_offset_s": t,
                "duration_s": seconds,
                "peak_rss_bytes": rss,
                "peak_rss_method": "kernel_hwm",
                "rss_change_bytes": 0,
                "gpu_peaks": [],
            }
        )
        t += seconds
    steps = []
    if steps_per_s is not None:
        steps.append(
            {
                "kind": "profiling",
                "node_id": None,
                "summary": {"steps_per_s": steps_per_s},
                "details": {},
                "findings": [],
                "monitor_errors": [],
                "created_unix_s": 1.0,
                "cached": False,
            }
        )
    return {
        "schema_version": 1,
        "prompt_id": run_id,
        "status": "success",
        "started_unix_s": 100.0,
        "finished_unix_s": 100.0 + duration,
        "duration_s": duration,
        "nodes": nodes,
        "steps": steps,
        "span": {"peak_rss_bytes": rss},
        "system": {} if rank is None else {"rank": rank},
        "error": None,
        "monitor_errors": [],
        "profile_enabled": True,
    }


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_aggregate_figures(tmp_path, capsys):
    paths = [
        write(
            tmp_path,
            "r0.json",
            report("a", 2.0, rank=0, stages=(("denoise", 1.0), ("decode", 0.5)), rss=100, steps_per_s=10.0),
        ),
        write(
            tmp_path,
            "r1.json",
            report("b", 4.0, rank=1, stages=(("denoise", 3.0), ("decode", 0.5)), rss=300, steps_per_s=5.0),
        ),
    ]
    out = tmp_path / "agg.json"
    assert main(["aggregate", *paths, "-o", str(out)]) == EXIT_OK
    result = json.loads(out.read_text())
    d = result["metrics"]["duration_s"]
    assert (d["n"], d["min"], d["max"], d["mean"], d["std"]) == (2, 2.0, 4.0, 3.0, 1.0)
    assert d["min_rank"] == 0 and d["max_rank"] == 1
    assert result["metrics"]["peak_rss_bytes"]["mean"] == 200
    assert result["metrics"]["steps_per_s"]["min"] == 5.0
    assert result["stages"]["denoise"]["slowest_rank"] == 1 and result["stages"]["denoise"]["max_s"] == 3.0
    assert result["stages"]["denoise"]["imbalance_pct"] == pytest.approx(100.0)
    assert result["slowest_rank"]["rank"] == 1 and result["slowest_rank"][
        "duration_vs_mean_pct"
    ] == pytest.approx(100 / 3)
    assert result["slowest_stage"] == {"stage": "denoise", "rank": 1, "total_s": 3.0}
    assert [r["slowest_stage"] for r in result["ranks"]] == ["denoise", "denoise"]
    text = capsys.readouterr().out
    assert "slowest rank: 1" in text and "slowest stage: denoise on rank 1" in text


def test_aggregate_names_and_skips_bad_inputs(tmp_path, capsys):
    good = write(tmp_path, "good.json", report("a", 1.0))
    newer = report("n", 1.0)
    newer["schema_version"] = SCHEMA_VERSION + 1
    missing = report("m", 1.0)
    del missing["nodes"]
    bad = {
        "newer.json": newer,
        "corrupt.json": '{"schema_version": 1, "prompt_id": ',
        "list.json": "[1, 2]",
        "other.json": {"traceEvents": []},
        "missing.json": missing,
    }
    paths = [write(tmp_path, name, data) for name, data in bad.items()]
    out = tmp_path / "agg.json"
    assert main(["aggregate", good, *paths, str(tmp_path / "absent.json"), "-o", str(out)]) == EXIT_SKIPPED
    result = json.loads(out.read_text())
    assert result["n_reports"] == 1 and len(result["skipped"]) == 6
    reasons = {os.path.basename(s["path"]): s["reason"] for s in result["skipped"]}
    assert reasons["newer.json"] == f"schema_version {SCHEMA_VERSION + 1}; this tool reads 1, 2, 3 and 4"
    assert reasons["corrupt.json"].startswith("not valid JSON")
    assert reasons["list.json"] == "not a run report: the top level is a list"
    assert reasons["other.json"] == "not a run report: no schema_version"
    assert "'nodes' missing" in reasons["missing.json"] and reasons["absent.json"].startswith("cannot read")
    err = capsys.readouterr().err
    assert all(f"skipped {p}" in err for p in paths)
    assert main(["aggregate", *paths]) == EXIT_NO_INPUT


def test_compare_flags_regressions_beyond_threshold(tmp_path, capsys):
    a = write(
        tmp_path, "a.json", report("a", 2.0, stages=(("denoise", 1.0), ("decode", 0.5)), steps_per_s=10.0)
    )
    slower = report("b", 2.3, stages=(("denoise", 1.3), ("decode", 0.52), ("upscale", 0.1)), steps_per_s=8.0)
    b = write(tmp_path, "b.json", slower)
    out = tmp_path / "cmp.json"
    assert main(["compare", a, b, "--threshold-pct", "10", "-o", str(out)]) == EXIT_REGRESSION
    result = json.loads(out.read_text())
    stages = {s["stage"]: s for s in result["stages"]}
    assert stages["denoise"]["total_s"]["regression"] and stages["denoise"]["total_s"][
        "delta_pct"
    ] == pytest.approx(30.0)
    assert not stages["decode"]["total_s"]["regression"]  # +4 %: below the threshold
    assert stages["upscale"]["only_in"] == "b"
    nodes = {n["node_id"]: n for n in result["nodes"]}
    assert nodes["1"]["duration_s"]["regression"] and not nodes["2"]["duration_s"]["regression"]
    assert result["run"]["steps_per_s"]["regression"] and result["run"]["duration_s"]["regression"]
    assert "stage denoise total_s" in result["regressions"]
    assert "REGRESSION" in capsys.readouterr().out
    assert main(["compare", a, b, "--threshold-pct", "50"]) == EXIT_OK


def test_compare_small_absolute_changes_are_not_regressions(tmp_path):
    a = write(tmp_path, "a.json", report("a", 0.010, stages=(("tiny", 0.010),)))
    b = write(tmp_path, "b.json", report("b", 0.020, stages=(("tiny", 0.020),)))
    assert main(["compare", a, b]) == EXIT_OK  # +100 % but only 10 ms: under --min-seconds


def test_compare_refuses_other_schema(tmp_path, capsys):
    a = write(tmp_path, "a.json", report("a", 1.0))
    other = copy.deepcopy(report("b", 1.0))
    other["schema_version"] = 0
    b = write(tmp_path, "b.json", other)
    assert main(["compare", a, b]) == EXIT_NO_INPUT
    assert "schema_version 0" in capsys.readouterr().err


def test_bad_command_line_exits_2():
    with pytest.raises(SystemExit) as info:
        main(["aggregate"])
    assert info.value.code == EXIT_USAGE
    with pytest.raises(SystemExit) as info:
        main(["compare", "a.json", "b.json", "--threshold-pct", "x"])
    assert info.value.code == EXIT_USAGE


def test_trace_command_merges_reports(tmp_path):
    a = write(tmp_path, "a.json", report("a", 1.0, rank=0))
    b = write(tmp_path, "b.json", report("b", 1.0, rank=1))
    out = tmp_path / "job.trace.json"
    assert main(["trace", a, b, "-o", str(out)]) == EXIT_OK
    pids = {e["pid"] for e in json.loads(out.read_text())["traceEvents"]}
    assert pids == {1, 2}


def test_two_rank_torch_distributed_job_aggregated(tmp_path):
    """A real 2-process torch.distributed job on CPU (gloo): each rank writes its report, then
    `python -m monitors aggregate` merges them and names rank 1 (slower steps) as the slowest."""
    out_dir = tmp_path / "reports"
    # A job of its own, as torchrun would start it: a fresh interpreter whose path holds only the
    # repository (the test process may have ComfyUI's folders first on sys.path).
    job = (
        "import sys, torch.multiprocessing as mp\n"
        "from tests.unit.distributed_support import rank_worker\n"
        "mp.spawn(rank_worker, args=(2, sys.argv[1], sys.argv[2]), nprocs=2, join=True)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(REPO)}
    ran = subprocess.run(
        [sys.executable, "-c", job, str(tmp_path / "init"), str(out_dir)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    reports = sorted(str(p) for p in out_dir.glob("*.json") if not p.name.endswith(".trace.json"))
    assert len(reports) == 2 and reports[0].endswith("-rank0.json") and reports[1].endswith("-rank1.json")
    for rank, path in enumerate(reports):
        data = json.loads(open(path).read())
        assert data["system"]["rank"] == rank and data["system"]["world_size"] == 2
        assert {n["class_type"] for n in data["nodes"]} == {
            "text_encoding",
            "denoise",
            "inference_steps",
            "all_reduce",
            "vae_decode",
        }
    out = tmp_path / "job.json"
    done = subprocess.run(
        [sys.executable, "-m", "monitors", "aggregate", *reports, "-o", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT_OK, done.stdout + done.stderr
    result = json.loads(out.read_text())
    assert result["n_reports"] == 2 and result["skipped"] == []
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert result["slowest_rank"]["rank"] == 1
    top = {name: s for name, s in result["stages"].items() if s["top_level"]}
    slowest = max(top, key=lambda name: top[name]["max_s"])
    assert result["slowest_stage"] == {
        "stage": slowest,
        "rank": top[slowest]["slowest_rank"],
        "total_s": top[slowest]["max_s"],
    }
    assert "inference_steps" not in top  # nested in denoise: not a candidate for the slowest stage
    assert result["stages"]["vae_decode"]["slowest_rank"] == 1
    assert result["stages"]["all_reduce"]["slowest_rank"] == 0  # rank 0 waits there for rank 1
    steps = result["stages"]["inference_steps"]
    # Exact: the job's ranks read fake clocks (distributed_support.py), a microsecond per read.
    assert steps["n_ranks"] == 2 and steps["slowest_rank"] == 1
    assert steps["min_s"] == pytest.approx(0.03, abs=1e-3) and steps["max_s"] == pytest.approx(0.18, abs=1e-3)
    assert result["stages"]["all_reduce"]["max_s"] == pytest.approx(0.15, abs=1e-3)
    assert result["metrics"]["steps_per_s"]["max_rank"] == 0
    assert "slowest rank: 1" in done.stdout


# A loader's times on a busy 2-core machine, recorded from six runs of one unchanged workflow
# (seconds): the noise the regression rule must not call a regression.
NOISY_LOADER_S = (0.101, 0.164, 0.098, 0.187, 0.122, 0.143)


def noisy_run(run_id, loader_s, started):
    data = report(run_id, 1.0 + loader_s, stages=(("CheckpointLoaderSimple", loader_s), ("KSampler", 1.0)))
    data["started_unix_s"] = started
    data["workflow"] = {"id": "wf-noisy", "name": "noisy.json"}
    return data


def test_compare_judges_a_node_against_the_spread_of_its_history(tmp_path, capsys):
    folder = tmp_path / "history"
    folder.mkdir()
    for i, seconds in enumerate(NOISY_LOADER_S):
        write(folder, f"h{i}.json", noisy_run(f"h{i}", seconds, 100.0 + i))
    write(folder, "other.json", {**noisy_run("other", 0.01, 50.0), "workflow": {"id": "wf-other"}})
    a = write(tmp_path, "a.json", noisy_run("a", 0.100, 110.0))
    b = write(tmp_path, "b.json", noisy_run("b", 0.195, 111.0))
    # two runs alone: +95 % and 95 ms, a regression by the plain threshold, resting on one run
    assert main(["compare", a, b]) == EXIT_REGRESSION
    assert "1 earlier run" in capsys.readouterr().out
    # with the recorded history, 0.195 s is within the loader's spread (0.098-0.187 s)
    out = tmp_path / "cmp.json"
    assert main(["compare", a, b, "--history", str(folder), "-o", str(out)]) == EXIT_OK
    result = json.loads(out.read_text())
    loader = next(n for n in result["nodes"] if n["class_type"] == "CheckpointLoaderSimple")
    assert loader["duration_s"]["n_runs"] == 7 and not loader["duration_s"]["regression"]
    assert loader["duration_s"]["limit"] == pytest.approx(0.187 + (0.187 - 0.098))
    assert result["n_history_runs"] == 7, "A and the six earlier runs; the other workflow is left out"
    assert "the spread of 7 earlier runs" in capsys.readouterr().out
    # a real slowdown is still flagged: beyond the highest earlier time by more than the spread
    c = write(tmp_path, "c.json", noisy_run("c", 0.40, 112.0))
    assert main(["compare", a, c, "--history", str(folder)]) == EXIT_REGRESSION
    assert "node #1 CheckpointLoaderSimple duration_s" in capsys.readouterr().out


def test_history_limit_rule():
    from monitors.cli.aggregate import history_limit

    assert history_limit([], 10, 0.05)["limit"] is None
    one = history_limit([1.0], 10, 0.05)
    assert one["limit"] == pytest.approx(1.1) and one["n_runs"] == 1
    assert history_limit([1.0, 1.4, 1.2], 10, 0.05)["limit"] == pytest.approx(1.8)

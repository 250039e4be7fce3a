"""`python -m monitors` commands on small report files: what each prints, writes and exits with."""

import json
import os

import pytest

from monitors.cli import commands
from monitors.cli.commands import EXIT_NO_INPUT, EXIT_OK, EXIT_REGRESSION, EXIT_SKIPPED, EXIT_USAGE, main


def report(run_id, duration, nodes=(("1", "Load", 1.0),), rank=None, started=100.0, workflow=None, **extra):
    data = {
        "schema_version": 1,  # planted: the session's check of written reports reads current ones only
        "prompt_id": run_id,
        "status": "success",
        "started_unix_s": started,
        "duration_s": duration,
        "nodes": [
            {
                "node_id": i,
                "class_type": c,
                "title": None,
                "status": "executed",
                "cached": False,
                "duration_s": s,
            }
            for i, c, s in nodes
        ],
        "steps": [],
        "span": {"peak_rss_bytes": 2 * 1024**2},
        "system": {} if rank is None else {"rank": rank},
        **extra,
    }
    if workflow is not None:
        data["workflow"] = workflow
    return data


def write(folder, name, data):
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_compare_prints_each_figure_by_the_unit_in_its_name(tmp_path, capsys):
    def rows(a_s, b_s):
        steps = [{"kind": "profiling", "node_id": None, "summary": {"steps_per_s": 12.345}, "details": {}}]
        a = write(tmp_path, "a.json", report("a", a_s, steps=steps))
        b = write(tmp_path, "b.json", report("b", b_s, steps=steps))
        main(["compare", a, b])
        return {line.split()[0]: line.split(maxsplit=1)[1].split() for line in capsys.readouterr().out.splitlines()[2:8]}

    printed = rows(1.23456, 1.296288)  # 5.0 % slower
    assert printed["duration_s"] == ["1.235", "s", "1.296", "s", "+5.0", "%"]
    assert printed["peak_rss_bytes"] == ["2.0", "MiB", "2.0", "MiB", "+0.0", "%"]
    assert printed["peak_gpu_allocated_bytes"] == ["-", "-", "-"]  # unknown
    assert printed["steps_per_s"][:2] == ["12.3/s", "12.3/s"]
    assert rows(1.0, 0.9494)["duration_s"][-2:] == ["-5.1", "%"]


def test_reports_in_walks_sorted_without_traces_and_hidden_files(tmp_path):
    for name in (
        "b.json",
        "a.json",
        "a.trace.json",
        ".tmp-a.json",
        "notes.txt",
        "rank_1/r.json",
        "rank_0/r.json",
    ):
        write(tmp_path, name, "{}")
    write(tmp_path, ".hidden/r.json", "{}")
    found = [os.path.relpath(p, tmp_path) for p in commands.reports_in(str(tmp_path))]
    assert found == ["a.json", "b.json", os.path.join("rank_0", "r.json"), os.path.join("rank_1", "r.json")]
    with pytest.raises(NotADirectoryError, match="not a folder"):
        commands.reports_in(str(tmp_path / "a.json"))


def test_aggregate_prints_its_table(tmp_path, capsys):
    paths = [
        write(tmp_path, "r0.json", report("a", 2.0, rank=0)),
        write(tmp_path, "r1.json", report("b", 4.0, rank=1)),
    ]
    out = tmp_path / "agg.json"
    assert main(["aggregate", *paths, "-o", str(out)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "2 report(s) aggregated, 0 skipped"
    assert lines[1] == "ranks: 2"
    assert lines[2] == f"{'metric':<28}{'min':>14}{'max':>14}{'mean':>14}{'std':>14}"
    assert lines[3] == f"{'duration_s':<28}{'2.000 s':>14}{'4.000 s':>14}{'3.000 s':>14}{'1.000 s':>14}"
    rank0 = f"{'0':<6}{'2.000 s':>12}{'-33.3 %':>10}{'2.0 MiB':>12}  Load 1.000 s"
    assert rank0 in lines
    assert lines[-3:] == [
        "slowest rank: 1 (4.000 s)",
        "slowest stage: Load on rank 0 (1.000 s)",
        f"written: {out}",
    ]
    assert json.loads(out.read_text())["n_reports"] == 2


def test_aggregate_of_a_folder_without_reports(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["aggregate", "--reports_dir", str(tmp_path / "empty")]) == EXIT_NO_INPUT
    assert capsys.readouterr().err == f"no report file in {tmp_path / 'empty'}\n"
    assert main(["aggregate", "--reports-dir", str(tmp_path / "missing")]) == EXIT_NO_INPUT
    assert "not a folder" in capsys.readouterr().err


def test_aggregate_of_unusable_files_only(tmp_path, capsys):
    bad = write(tmp_path, "bad.json", "[]")
    assert main(["aggregate", bad]) == EXIT_NO_INPUT
    assert capsys.readouterr().err.splitlines() == [
        f"skipped {bad}: not a run report: the top level is a list",
        "no usable report",
    ]


def test_aggregate_without_a_timed_run_prints_no_slowest(tmp_path, capsys):
    path = write(tmp_path, "r.json", report("a", None, nodes=()))
    assert main(["aggregate", path]) == EXIT_OK
    text = capsys.readouterr().out
    assert not [line for line in text.splitlines() if line.startswith(("slowest", "written"))]
    assert f"{'0':<6}{'-':>12}{'-':>10}{'2.0 MiB':>12}  -" in text.splitlines()


def test_compare_prints_rows_and_notes(tmp_path, capsys):
    a = write(tmp_path, "a.json", report("a", 1.0, nodes=(("1", "Load", 1.0), ("2", "Gone", 0.5))))
    deep = report("b", 1.0, nodes=(("1", "Load", 1.0),))
    deep["steps"] = [{"kind": "deep_profile", "node_id": None, "summary": {}, "details": {}, "findings": []}]
    b = write(tmp_path, "b.json", deep)
    out = tmp_path / "cmp.json"
    assert main(["compare", a, b, "-o", str(out)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "A a (success)  vs  B b (success)"
    assert lines[1].startswith("note: only B was deep-profiled: its timings include the profiler's overhead")
    assert f"{'  #2 Gone':<34}{'0.500 s':>12}{'-':>12}{'-':>10}  (only in A)" in lines
    assert f"{'duration_s':<34}{'1.000 s':>12}{'1.000 s':>12}{'+0.0 %':>10}" in lines
    assert lines[-1] == "no regression beyond 10 % and 1 earlier run (no spread known: --history adds runs)"
    assert json.loads(out.read_text())["deep_profiled"] == {"a": False, "b": True}
    assert main(["compare", b, a]) == EXIT_OK
    assert "note: only A was deep-profiled" in capsys.readouterr().out
    assert main(["compare", b, b]) == EXIT_OK
    assert "note:" not in capsys.readouterr().out


def test_compare_prints_each_regression(tmp_path, capsys):
    a = write(tmp_path, "a.json", report("a", 1.0))
    b = write(tmp_path, "b.json", report("b", 3.0, nodes=(("1", "Load", 3.0),)))
    assert main(["compare", a, b, "--threshold-pct", "12.5", "--min-seconds", "0.1"]) == EXIT_REGRESSION
    lines = capsys.readouterr().out.splitlines()
    assert lines[-4:] == [
        "3 regression(s) beyond 12.5 % and 1 earlier run (no spread known: --history adds runs):",
        "  run duration_s",
        "  stage Load total_s",
        "  node #1 Load duration_s",
    ]
    assert f"{'  #1 Load':<34}{'1.000 s':>12}{'3.000 s':>12}{'+200.0 %':>10}  REGRESSION" in lines


def test_compare_with_an_unusable_report(tmp_path, capsys):
    a = write(tmp_path, "a.json", report("a", 1.0))
    assert main(["compare", a, str(tmp_path / "none.json")]) == EXIT_NO_INPUT
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"skipped {tmp_path / 'none.json'}: cannot read")
    assert err[1] == "compare needs two usable reports"


def test_history_keeps_successful_earlier_runs_of_the_same_workflow(tmp_path, capsys):
    wf = {"id": "w1"}
    a = report("a", 1.0, workflow=wf)
    b = report("b", 1.0, started=200.0, workflow=wf)
    folder = tmp_path / "h"
    write(folder, "same.json", report("h1", 1.0, started=150.0, workflow=wf))
    write(folder, "at_b.json", report("h2", 1.0, started=200.0, workflow=wf))  # started with B: kept
    write(folder, "later.json", report("h3", 1.0, started=201.0, workflow=wf))
    write(folder, "other.json", report("h4", 1.0, started=150.0, workflow={"id": "w2"}))
    write(folder, "failed.json", report("h5", 1.0, started=150.0, workflow=wf, status="error"))
    bad = write(folder, "bad.json", "{")
    single = write(tmp_path, "single.json", report("h6", 1.0, started=10.0, workflow=wf))
    history = commands._history([str(folder), single], a, b)
    assert [h["prompt_id"] for h in history] == ["h2", "h1", "h6"]  # files in sorted order
    assert capsys.readouterr().err.startswith(f"history: skipped {bad}: not valid JSON")


def test_history_matches_a_workflow_by_name_without_an_id(tmp_path):
    named = {"name": "flow.json"}
    a, b = report("a", 1.0, workflow=named), report("b", 1.0, workflow=named)
    h = write(tmp_path, "h.json", report("h", 1.0, workflow={"name": "flow.json"}))
    other = write(tmp_path, "o.json", report("o", 1.0, workflow={"name": "other.json"}))
    assert [r["prompt_id"] for r in commands._history([h, other], a, b)] == ["h"]
    none_a = report("a", 1.0)
    plain = write(tmp_path, "p.json", report("p", 1.0))
    assert [r["prompt_id"] for r in commands._history([plain, h], none_a, b)] == ["p"]


def test_history_counts_in_the_printed_basis(tmp_path, capsys):
    wf = {"id": "w"}
    a = write(tmp_path, "a.json", report("a", 1.0, workflow=wf))  # started at 100
    # B another workflow, later: the history is A's workflow, up to B's start
    b = write(tmp_path, "b.json", report("b", 1.0, started=300.0, workflow={"id": "w-next"}))
    h = write(tmp_path, "h.json", report("h", 1.0, started=200.0, workflow=wf))
    assert main(["compare", a, b, "--history", h]) == EXIT_OK
    assert (
        capsys.readouterr().out.splitlines()[-1]
        == "no regression beyond 10 % and the spread of 2 earlier runs"
    )


def test_trace_names_skipped_files_and_needs_one_report(tmp_path, capsys):
    good = write(tmp_path, "a.json", report("a", 1.0))
    bad = write(tmp_path, "bad.json", "[]")
    out = tmp_path / "t.trace.json"
    assert main(["trace", good, bad, "-o", str(out)]) == EXIT_SKIPPED
    captured = capsys.readouterr()
    assert captured.out.startswith(f"written: {out} (1 report(s)); open it in Perfetto")
    assert captured.err.startswith(f"skipped {bad}: ")
    assert json.loads(out.read_text())["traceEvents"]
    assert main(["trace", bad, "-o", str(tmp_path / "none.json")]) == EXIT_NO_INPUT
    assert "no usable report" in capsys.readouterr().err and not (tmp_path / "none.json").exists()


def test_table_as_json_to_stdout_or_a_file(tmp_path, capsys):
    path = write(tmp_path, "r.json", report("a", 1.0))
    assert main(["table", path, "--format", "json"]) == EXIT_OK
    text = capsys.readouterr().out
    assert [n["class_type"] for n in json.loads(text)] == ["Load"]
    assert text.startswith('[\n {\n  "node_id": "1",\n')  # readable: one key a line
    out = tmp_path / "steps.json"
    assert main(["table", path, "--table", "steps", "--format", "json", "-o", str(out)]) == EXIT_OK
    assert out.read_text() == "[]\n" and capsys.readouterr().out == ""
    assert main(["table", path, "--table", "steps"]) == EXIT_OK
    assert capsys.readouterr().out == "kind,node_id,cached,n_errors,n_warnings\n"  # CSV, no step
    assert main(["table", path]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[0].startswith("node_id,")
    assert main(["table", path, "--table", "subgraphs", "--format", "json"]) == EXIT_OK
    assert capsys.readouterr().out == "[]\n"  # a report without subgraphs (or older than them)
    assert main(["table", path, "--table", "subgraphs"]) == EXIT_OK
    assert capsys.readouterr().out.startswith("id,parent_id,name,name_unknown_reason,node_ids,")


def test_table_of_an_unusable_report(tmp_path, capsys):
    bad = write(tmp_path, "bad.json", "[]")
    assert main(["table", bad]) == EXIT_NO_INPUT
    assert capsys.readouterr().err == "error: not a run report: the top level is a list\n"


def test_aggregate_needs_files_or_a_folder():
    with pytest.raises(SystemExit) as info:
        main(["aggregate"])
    assert info.value.code == EXIT_USAGE


@pytest.mark.parametrize("argv", [[], ["trace", "a.json"]], ids=["no command", "trace without -o"])
def test_a_command_and_a_trace_output_are_required(argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2


def test_exit_codes_are_the_documented_numbers():
    assert (EXIT_OK, EXIT_NO_INPUT, EXIT_USAGE, EXIT_SKIPPED, EXIT_REGRESSION) == (0, 1, 2, 3, 4)


def test_a_long_name_is_cut_to_its_column(tmp_path, capsys):
    nodes = (("1", "A" * 40, 1.0),)
    a = write(tmp_path, "a.json", report("a", 1.0, nodes=nodes))
    b = write(tmp_path, "b.json", report("b", 1.0, nodes=nodes))
    assert main(["compare", a, b]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("  #1 "))
    assert row == "  #1 " + "A" * 29 + f"{'1.000 s':>12}{'1.000 s':>12}{'+0.0 %':>10}"


def test_parser_defaults():
    args = commands.build_parser().parse_args(["compare", "a", "b"])
    assert (args.threshold_pct, args.min_seconds, args.min_bytes, args.history, args.output) == (
        10.0,
        0.05,
        64 * 1024**2,
        None,
        None,
    )
    table = commands.build_parser().parse_args(["table", "r.json"])
    assert (table.table, table.format, table.output) == ("nodes", "csv", None)


def test_is_deep_profiled_reads_the_steps():
    assert commands.is_deep_profiled({"steps": [{"kind": "vae"}, {"kind": "deep_profile"}]})
    assert not commands.is_deep_profiled({"steps": ["deep_profile", {"kind": "vae"}]})
    assert not commands.is_deep_profiled({})

import json
import math
import os

import jsonschema
import pytest

from monitors.engine.span import Span
from monitors.engine.store import RunStore, is_valid_run_id
from monitors.node_fields import GpuPeak, NodeProfile
from monitors.probes.fake import fake_probes
from monitors.report import (
    SCHEMA_VERSION,
    Finding,
    RunReport,
    StepReport,
    format_bytes,
    format_run_summary,
    to_jsonable,
    write_json_atomic,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = json.load(open(os.path.join(REPO, "schemas", "run_report.schema.json")))


def make_report(prompt_id="p1", status="success") -> RunReport:
    probes = fake_probes("1 GPU")
    with Span("prompt", probes=probes) as span:
        probes.torch.allocate(0, 1024)
    return RunReport(
        prompt_id=prompt_id,
        status=status,
        started_unix_s=1.0,
        finished_unix_s=2.5,
        duration_s=1.5,
        nodes=(
            NodeProfile(
                "1",
                "UNETLoader",
                "executed",
                False,
                0.0,
                1.2,
                900,
                "kernel_hwm",
                100,
                (GpuPeak("cuda:0", 1024, 2048),),
            ),
            NodeProfile("2", "SaveImage", "cached", True),
        ),
        steps=(
            StepReport(
                "models", "3", {"n_objects": 1, "loaders_duration_s": float("nan")}, {}, (Finding("warning", "<b>x</b>"),)
            ),
        ),
        span=span.result.to_dict(),
        system=probes.system_info(),
    )


def test_report_matches_schema_and_is_plain_json():
    data = make_report().to_dict()
    jsonschema.validate(data, SCHEMA)
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["steps"][0]["summary"]["loaders_duration_s"] is None  # NaN is not JSON: unknown
    json.dumps(data, allow_nan=False)


def test_schema_rejects_unknown_step_kind_and_minus_one_is_not_unknown():
    data = make_report().to_dict()
    data["steps"][0]["kind"] = "mystery"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, SCHEMA)


def test_reports_are_frozen():
    report = make_report()
    with pytest.raises(AttributeError):
        report.status = "error"


def test_summary_and_log_text():
    report = make_report()
    row = report.summary_dict()
    assert row["n_nodes"] == 2 and row["n_cached"] == 1 and row["peak_gpu_allocated_bytes"] == 1024
    text = format_run_summary(report)
    assert (
        "p1 success in 1.50 s" in text and "slowest #1 UNETLoader 1.20 s" in text and "steps: models" in text
    )


def test_to_jsonable_handles_odd_values():
    assert to_jsonable({"a": (1, math.inf), 2: {"b"}}) == {"a": [1, None], "2": ["b"]}
    assert format_bytes(None) == "unknown" and format_bytes(1536) == "1.5 KiB"


def test_atomic_write_leaves_no_temp_files(tmp_path):
    path = tmp_path / "r" / "x.json"
    write_json_atomic(str(path), {"a": 1})
    write_json_atomic(str(path), {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert os.listdir(path.parent) == ["x.json"]


def test_atomic_write_failure_keeps_old_file(tmp_path):
    path = tmp_path / "x.json"
    write_json_atomic(str(path), {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(str(path), {"a": object.__new__(type("Unserialisable", (), {"__str__": None}))})
    assert json.loads(path.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["x.json"]


def test_store_keeps_last_n_in_memory_and_prunes_disk(tmp_path):
    store = RunStore(str(tmp_path), max_runs=3, max_files=4)
    for i in range(6):
        store.add(make_report(f"p{i}"))
        os.utime(tmp_path / f"p{i}.json", (i + 1, i + 1))
    assert [r["prompt_id"] for r in store.summaries()] == ["p5", "p4", "p3"]
    assert sorted(os.listdir(tmp_path)) == ["p2.json", "p3.json", "p4.json", "p5.json"]
    assert store.get("p2")["prompt_id"] == "p2"  # evicted from memory, read from disk
    assert store.get("p0") is None


def test_a_store_at_its_cap_lists_the_folder_once_every_tenth_report(tmp_path, monkeypatch):
    import monitors.engine.store as store_module

    listings = []
    real_scandir = os.scandir

    def counting_scandir(path):
        listings.append(path)
        return real_scandir(path)

    (tmp_path / "written-by-another-server.json").write_text("{}")
    os.utime(tmp_path / "written-by-another-server.json", (0, 0))
    monkeypatch.setattr(store_module.os, "scandir", counting_scandir)
    store = RunStore(str(tmp_path), max_files=20)
    for i in range(20):
        store.add(make_report(f"p{i}"))
        os.utime(tmp_path / f"p{i}.json", (i + 1, i + 1))
    assert len(listings) == 2  # the first write, then the one that passed 20 with the other file
    assert len(os.listdir(tmp_path)) == 18 and not (tmp_path / "written-by-another-server.json").exists()
    for i in range(20, 23):
        store.add(make_report(f"p{i}"))
        os.utime(tmp_path / f"p{i}.json", (i + 1, i + 1))
    assert len(listings) == 3 and len(os.listdir(tmp_path)) == 18  # 21 on disk: pruned to 18 again
    assert set(os.listdir(tmp_path)) == {f"p{i}.json" for i in range(5, 23)}  # the oldest went first
    store.configure(max_files=5)
    store.add(make_report("p23"))
    assert len(listings) == 4 and len(os.listdir(tmp_path)) == 5  # a new cap lists at once


@pytest.mark.parametrize(
    "bad_id", ["../x", "..", "a/b", "%2e%2e", "x.json", "", "a" * 200, "a\x00b", None, 5]
)
def test_store_rejects_ids_that_are_not_ids(tmp_path, bad_id):
    store = RunStore(str(tmp_path))
    assert not is_valid_run_id(bad_id)
    assert store.get(bad_id) is None


def test_store_write_failure_is_recorded_not_raised(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = RunStore(str(blocker / "reports"))
    assert store.add(make_report()) is None
    assert store.write_errors and store.get("p1") is not None


def test_background_writes_reach_disk_after_flush(tmp_path):
    store = RunStore(str(tmp_path), background_writes=True)
    paths = [store.add(make_report(f"p{i}")) for i in range(5)]
    assert store.get("p4")["prompt_id"] == "p4"  # served from memory at once
    store.flush()
    assert sorted(os.listdir(tmp_path)) == [f"p{i}.json" for i in range(5)]
    assert all(os.path.isfile(p) for p in paths)


def test_the_summary_of_a_run_in_memory_is_the_one_made_when_it_was_added(tmp_path):
    store = RunStore(str(tmp_path), max_runs=1)
    report = make_report("p1")
    store.add(report)
    assert store.summary("p1") == report.summary_dict()
    assert store.summary("p1") is store.summaries()[0]  # not made again
    store.add(make_report("p2"))
    assert store.summary("p1") is None and store.summary("unknown") is None

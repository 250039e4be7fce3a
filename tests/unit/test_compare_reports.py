"""scripts/compare_reports.py: two reports of one workflow compared field by field, with what any two
runs measure differently set apart from what a refactor must not change."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "compare_reports.py"


def _module():
    spec = importlib.util.spec_from_file_location("compare_reports", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(**changes) -> dict:
    step = {"kind": "lora", "node_id": "7", "summary": {"n_loras": 1, "analysis_s": 0.01, "model_patch_bytes": 10}}
    base = {"prompt_id": "a", "duration_s": 1.0, "steps": [step], "span": {"peak_rss_bytes": 5}}
    return json.loads(json.dumps(base | changes))


def test_measured_places_and_ids_are_counted_apart():
    found = _module().compare(report(), report(prompt_id="b", duration_s=2.0, span={"peak_rss_bytes": 9}))
    assert found["structure"] == [] and found["value"] == []
    assert len(found["measured"]) == 3


def test_a_changed_count_a_missing_key_and_a_longer_list_are_reported():
    after = report()
    after["steps"][0]["summary"]["n_loras"] = 2
    del after["steps"][0]["summary"]["model_patch_bytes"]
    after["extra"] = [1, 2]
    found = _module().compare(report(), after)
    assert found["value"] == ["/steps/node 7 lora/summary/n_loras: 1 -> 2"]
    assert "/steps/node 7 lora/summary/model_patch_bytes: only in before" in found["structure"]
    assert "/extra: only in after" in found["structure"]
    longer = report(steps=[*report()["steps"], {"kind": "models", "node_id": "3"}])
    assert any(line.startswith("/steps: ") for line in _module().compare(report(), longer)["structure"])


def test_node_rows_and_steps_are_matched_by_node_not_by_position():
    first, second = {"node_id": "3", "status": "executed"}, {"node_id": "7", "status": "executed"}
    assert _module().compare({"nodes": [first, second]}, {"nodes": [second, first]}) == {
        "structure": [],
        "value": [],
        "measured": [],
    }


def test_a_value_becoming_unknown_is_a_value_change_and_another_type_is_structural():
    found = _module().compare(report(prompt_id="a"), report(prompt_id=None))
    assert found["measured"] == ["/prompt_id: 'a' -> None"]
    after = report()
    after["steps"][0]["summary"]["n_loras"] = "one"
    assert _module().compare(report(), after)["structure"] == ["/steps/node 7 lora/summary/n_loras: 1 -> 'one'"]


def test_the_command_line_exits_1_on_a_difference_and_0_on_measurements_only(tmp_path):
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(report()))
    after.write_text(json.dumps(report(duration_s=3.0)))
    same = subprocess.run([sys.executable, str(SCRIPT), str(before), str(after)], capture_output=True, text=True)
    assert same.returncode == 0 and "0 structure, 0 value, 1 measured" in same.stdout
    after.write_text(json.dumps(report(steps=[])))
    changed = subprocess.run([sys.executable, str(SCRIPT), str(before), str(after)], capture_output=True, text=True)
    assert changed.returncode == 1 and "structure" in changed.stdout


def test_labels_and_shares_that_do_not_vary_between_runs_are_not_taken_for_measurements():
    measured = _module().measured
    for place in (
        "/steps/node 5 lora/summary/matched_pct",  # the share of a file's keys matched
        "/steps/node 9 vae_encode/details/predictions/direct/free_memory_source",  # a label
        "/steps/node 9 vae_encode/details/predictions/direct/free_bytes_unknown_reason",
    ):
        assert not measured(place), place
    for place in (
        "/steps/node 9 vae_encode/details/predictions/direct/free_bytes",
        "/steps/node 9 vae_encode/summary/free_memory_change_pct",
        "/nodes/node 3/gpu_busy_pct",
    ):
        assert measured(place), place

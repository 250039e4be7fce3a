"""Which widget inputs changed since the last run of the same workflow: literal values only (never
links), per workflow name, bounded and truncated, in the report, its schema and the run-list row."""

import shutil

import jsonschema

from monitors.engine.input_changes import (
    MAX_CHANGES,
    MAX_VALUE_CHARS,
    NO_NAME_REASON,
    InputHistory,
    diff,
    is_link,
    snapshot,
)
from monitors.engine.recorder import RunRecorder
from monitors.engine.store import INPUTS_DIR_NAME, RunStore

from .test_report_store import SCHEMA


def prompt(seed=1, steps=20, text="a cat", model_link=("1", 0)):
    return {
        "1": {"class_type": "CheckpointLoaderSimple", "inputs": {"ckpt_name": "sd15.safetensors"}},
        "3": {
            "class_type": "KSampler",
            "inputs": {"model": list(model_link), "seed": seed, "steps": steps, "cfg": 7.5},
        },
        "6": {"class_type": "CLIPTextEncode", "inputs": {"clip": ["1", 1], "text": text}},
    }


def test_links_are_not_inputs_but_two_item_literal_lists_are():
    assert is_link(["1", 0]) and is_link(("12.0.1", 3))
    assert (
        not is_link([1, 0])
        and not is_link(["a", "b"])
        and not is_link(["1", True])
        and not is_link(["1", 0, 2])
    )
    taken = snapshot(prompt())
    assert ("3", "model") not in taken and ("6", "clip") not in taken
    assert ("3", "seed") in taken and taken[("3", "seed")][0] == "KSampler"
    assert snapshot(None) is None and snapshot({"x": "junk", "y": {"inputs": 3}}) == {}


def test_diff_lists_changed_values_in_node_order_with_types_told_apart():
    before = snapshot({**prompt(seed=1, steps=20), "10": {"class_type": "Note", "inputs": {"v": 1}}})
    after = snapshot({**prompt(seed=2, steps=30), "10": {"class_type": "Note", "inputs": {"v": "1"}}})
    result = diff(before, after)
    assert [(c["node_id"], c["input"], c["before"], c["after"]) for c in result["changes"]] == [
        ("3", "seed", "1", "2"),
        ("3", "steps", "20", "30"),
        ("10", "v", "1", "1"),  # 1 and "1" are different inputs to a node
    ]
    assert result["changes"][0]["node_type"] == "KSampler"
    assert result["n_changes"] == 3 and result["n_inputs_added"] == 0 and result["n_inputs_removed"] == 0


def test_added_removed_and_replaced_nodes_are_counted_not_listed():
    before = snapshot(prompt())
    after = snapshot(
        {
            **prompt(),
            "3": {"class_type": "KSamplerAdvanced", "inputs": {"seed": 9}},
            "9": {"class_type": "X", "inputs": {"a": 1}},
        }
    )
    result = diff(before, after)
    assert result["changes"] == []
    # KSampler's seed/steps/cfg gone, KSamplerAdvanced's seed and node 9's input new
    assert result["n_inputs_removed"] == 3 and result["n_inputs_added"] == 2


def test_long_values_are_truncated_for_display_but_compared_whole():
    head = "x" * 5000
    result = diff(snapshot(prompt(text=head + "a")), snapshot(prompt(text=head + "b")))
    assert result["n_changes"] == 1
    change = result["changes"][0]
    assert len(change["before"]) == MAX_VALUE_CHARS and change["before"].endswith("…")
    assert diff(snapshot(prompt(text=head)), snapshot(prompt(text=head)))["n_changes"] == 0


def test_the_list_is_bounded_and_counts_the_rest():
    many = lambda v: {"1": {"class_type": "Big", "inputs": {f"i{k}": v for k in range(MAX_CHANGES + 20)}}}  # noqa: E731
    result = diff(snapshot(many(0)), snapshot(many(1)))
    assert len(result["changes"]) == MAX_CHANGES and result["n_changes"] == MAX_CHANGES + 20


def test_history_per_workflow_name_first_run_and_no_name():
    history = InputHistory(max_workflows=2)
    first = history.compare("demo", "p1", snapshot(prompt(seed=1)))
    assert first["first_run"] is True and first["changes"] == [] and first["unknown_reason"] is None
    other = history.compare("other", "p2", snapshot(prompt(seed=5)))
    assert other["first_run"] is True
    second = history.compare("demo", "p3", snapshot(prompt(seed=2)))
    assert second["first_run"] is False and second["compared_with_prompt_id"] == "p1"
    assert [(c["input"], c["before"], c["after"]) for c in second["changes"]] == [("seed", "1", "2")]
    unnamed = history.compare(None, "p4", snapshot(prompt()))
    assert unnamed["changes"] is None and unnamed["unknown_reason"] == NO_NAME_REASON
    history.compare("third", "p5", snapshot(prompt()))  # bounded: "other" is forgotten first
    assert history.compare("other", "p6", snapshot(prompt()))["first_run"] is True


def test_a_run_from_before_a_restart_is_named_not_taken_for_a_first_run():
    result = InputHistory().compare("demo", "p9", snapshot(prompt()), earlier_prompt_id="p1")
    assert result["first_run"] is False and result["compared_with_prompt_id"] == "p1"
    assert result["changes"] is None and "restarted" in result["unknown_reason"]


def test_recorder_writes_the_changes_into_the_report_the_schema_and_the_row(tmp_path):
    store = RunStore(str(tmp_path))
    recorder = RunRecorder(store)
    workflow = {"name": "demo", "id": "w-1", "name_unknown_reason": None}
    evil = '<img src=x onerror="alert(1)">'
    for prompt_id, seed, text in (("p1", 1, "a cat"), ("p2", 2, evil)):
        recorder.begin_run(prompt_id, prompt(seed=seed, steps=20 if seed == 1 else 30, text=text))
        recorder.end_run("success", workflow=workflow)
    first, second = store.get("p1"), store.get("p2")
    assert first["input_changes"]["first_run"] is True
    changes = second["input_changes"]
    assert changes["compared_with_prompt_id"] == "p1" and changes["n_changes"] == 3
    assert [c["input"] for c in changes["changes"]] == ["seed", "steps", "text"]
    assert changes["changes"][2]["after"] == evil  # stored as text; the panel escapes it
    jsonschema.validate(first, SCHEMA)
    jsonschema.validate(second, SCHEMA)
    row = store.summaries()[0]
    assert row["input_changes"]["n_changes"] == 3 and len(row["input_changes"]["changes"]) == 3
    # a script's prompt without a workflow: nothing to compare with, said so
    recorder.begin_run("p3", prompt())
    recorder.end_run("success")
    assert store.get("p3")["input_changes"]["unknown_reason"] == NO_NAME_REASON
    jsonschema.validate(store.get("p3"), SCHEMA)


def test_after_a_restart_the_reloaded_run_of_the_workflow_is_named(tmp_path):
    workflow = {"name": "demo", "id": "w-1", "name_unknown_reason": None}
    before = RunRecorder(RunStore(str(tmp_path)))
    before.begin_run("p1", prompt())
    before.end_run("success", workflow=workflow)
    # its inputs were not kept on disk (a report from before they were, or the file was removed):
    # the run is named, its changes unknown (tests/unit/test_input_files.py: when they were kept)
    shutil.rmtree(tmp_path / INPUTS_DIR_NAME)
    store = RunStore(str(tmp_path))
    store.load_from_disk()
    after = RunRecorder(store)
    after.begin_run("p2", prompt(seed=4))
    after.end_run("success", workflow=workflow)
    changes = store.get("p2")["input_changes"]
    assert changes["compared_with_prompt_id"] == "p1" and changes["changes"] is None
    after.begin_run("p3", prompt(seed=5))
    after.end_run("success", workflow=workflow)
    assert store.get("p3")["input_changes"]["changes"][0]["after"] == "5"


def test_html_report_shows_the_changes_escaped(tmp_path):
    from monitors.exporters.html import render_html

    store = RunStore(str(tmp_path))
    recorder = RunRecorder(store)
    workflow = {"name": "demo", "id": "w-1", "name_unknown_reason": None}
    evil = '<img src=x onerror="alert(1)">'
    for prompt_id, text in (("p1", "a cat"), ("p2", evil)):
        recorder.begin_run(prompt_id, prompt(text=text))
        recorder.end_run("success", workflow=workflow)
    assert "first run of this workflow" in render_html(store.get("p1"))
    html = render_html(store.get("p2"))
    assert "inputs changed since the last run (p1)" in html
    assert "a cat → &lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html and evil not in html
    older = {k: v for k, v in store.get("p2").items() if k != "input_changes"}
    assert "inputs changed" not in render_html(older)

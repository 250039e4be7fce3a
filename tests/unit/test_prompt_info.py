"""What a prompt and ComfyUI's status messages say (ComfyUI 0.8's formats): node classes and
titles, the node feeding an input, the prompt's outcome, its workflow and its cached nodes."""

from __future__ import annotations

from monitors.engine.prompt_info import (
    WORKFLOW_NAME_KEY,
    cached_node_ids,
    node_info_from_prompt,
    run_outcome,
    upstream_node_ids,
    workflow_from_extra_data,
)


def test_node_info_keeps_class_and_a_text_title_only():
    prompt = {
        3: {"class_type": "KSampler", "_meta": {"title": "Sampler"}, "inputs": {"seed": 1}},
        "4": {"class_type": "VAEDecode", "_meta": {"title": 5}},
        "5": {"class_type": "Note", "_meta": "not a mapping"},
        "6": {"inputs": {}},
        "7": "not a node",
    }
    assert node_info_from_prompt(prompt) == {
        "3": ("KSampler", "Sampler"),
        "4": ("VAEDecode", None),
        "5": ("Note", None),
        "6": (None, None),
    }
    assert node_info_from_prompt(None) == {} and node_info_from_prompt(["3"]) == {}


def test_upstream_ids_are_the_linked_nodes_of_the_named_inputs():
    prompt = {
        "9": {"inputs": {"model": [4, 0], "clip": ("5", 1), "seed": 3, "text": "ab", "odd": ["1", 0, 2]}},
        "10": {"inputs": "not a mapping"},
        "11": "not a node",
    }
    wanted = ["model", "clip", "seed", "text", "odd", "missing"]
    assert upstream_node_ids("9", prompt, wanted) == {"model": "4", "clip": "5"}
    assert upstream_node_ids(9, prompt, ["model"]) == {"model": "4"}  # the id as text
    assert upstream_node_ids("9", prompt, ["clip"]) == {"clip": "5"}
    assert upstream_node_ids(None, prompt, wanted) == {}
    assert upstream_node_ids("9", None, wanted) == {}
    assert upstream_node_ids("10", prompt, wanted) == {} and upstream_node_ids("11", prompt, wanted) == {}
    assert upstream_node_ids("12", prompt, wanted) == {}


def test_an_interruption_wins_over_an_error_and_says_its_node():
    messages = [
        ("execution_start", {}),
        ("execution_error", {"node_id": "3", "exception_type": "RuntimeError"}),
        ("execution_interrupted", {"node_id": "4", "node_type": "KSampler"}),
        ("execution_success", {}),
    ]
    assert run_outcome(messages) == ("interrupted", {"node_id": "4", "exception_type": "interrupted"})


def test_an_error_says_its_node_type_exception_and_a_bounded_message():
    messages = [
        ("execution_start", {}),
        (
            "execution_error",
            {
                "node_id": "3",
                "node_type": "KSampler",
                "exception_type": "torch.OutOfMemoryError",
                "exception_message": "x" * 3000,
            },
        ),
        ("execution_error", {"node_id": "5"}),
        ("execution_success", {}),
    ]
    status, details = run_outcome(messages)
    assert status == "error"
    assert details == {
        "node_id": "3",
        "node_type": "KSampler",
        "exception_type": "torch.OutOfMemoryError",
        "exception_message": "x" * 2000,
    }
    assert run_outcome([("execution_error", {"exception_message": 12})])[1]["exception_message"] == "12"
    assert run_outcome([("execution_error", {})])[1] == {
        "node_id": None,
        "node_type": None,
        "exception_type": None,
        "exception_message": "",
    }


def test_success_only_with_its_message_otherwise_an_unknown_error():
    assert run_outcome([("execution_start", {}), ("execution_success", {})]) == ("success", None)
    expected = (
        "error",
        {"node_id": None, "exception_type": "unknown", "exception_message": "no final status from ComfyUI"},
    )
    assert run_outcome([("execution_start", {}), ("execution_cached", {"nodes": []})]) == expected
    assert run_outcome([]) == expected


def graph(**extra):
    return {"extra_pnginfo": {"workflow": {"id": "w-1", "extra": extra}}}


def test_the_workflow_name_is_the_panels_trimmed_and_bounded():
    assert workflow_from_extra_data(graph(**{WORKFLOW_NAME_KEY: "  my flow  "})) == {
        "name": "my flow",
        "id": "w-1",
        "name_unknown_reason": None,
    }
    assert workflow_from_extra_data(graph(**{WORKFLOW_NAME_KEY: "n" * 300}))["name"] == "n" * 200
    assert WORKFLOW_NAME_KEY == "pipeline_monitor_workflow_name"


def test_a_workflow_without_a_name_says_why():
    reason = "the prompt's workflow carries no name (queued without the panel)"
    for extra in ({}, {WORKFLOW_NAME_KEY: "   "}, {WORKFLOW_NAME_KEY: 5}):
        assert workflow_from_extra_data(graph(**extra)) == {
            "name": None,
            "id": "w-1",
            "name_unknown_reason": reason,
        }
    no_extra = {"extra_pnginfo": {"workflow": {"id": "w-2", "extra": "junk"}}}
    assert workflow_from_extra_data(no_extra) == {"name": None, "id": "w-2", "name_unknown_reason": reason}


def test_a_workflow_id_must_be_non_empty_text():
    for graph_id in ("", 7, None):
        data = {"extra_pnginfo": {"workflow": {"id": graph_id, "extra": {WORKFLOW_NAME_KEY: "a"}}}}
        assert workflow_from_extra_data(data)["id"] is None


def test_no_graph_no_workflow():
    for extra_data in (
        None,
        {},
        {"extra_pnginfo": "x"},
        {"extra_pnginfo": {}},
        {"extra_pnginfo": {"workflow": []}},
    ):
        assert workflow_from_extra_data(extra_data) is None


def test_cached_nodes_come_from_the_first_cache_message_as_text():
    messages = [
        ("execution_start", {}),
        ("execution_cached", {"nodes": [1, "2"]}),
        ("execution_cached", {"nodes": ["9"]}),
    ]
    assert cached_node_ids(messages) == ["1", "2"]
    assert cached_node_ids([("execution_cached", {})]) == []
    assert cached_node_ids([("execution_start", {})]) == []

"""The glue the monitor nodes share, in-process under real ComfyUI modules: which prompt a node
belongs to, a step that cannot be recorded, dump names when the output folder cannot be read.
Each failure becomes a reason or a log line, never an exception in the node."""

from __future__ import annotations

import logging

import pytest

pytestmark = pytest.mark.comfyui


def broken(*args, **kwargs):
    raise RuntimeError("injected fault")


def test_the_prompt_id_comes_from_the_active_run_outside_comfyuis_context(comfy, pack_runtime):
    dump_nodes = comfy.pack_module("nodes.dump_nodes")
    assert dump_nodes.current_prompt_id() == (
        None,
        "prompt id unknown: no executing context and no active run",
    )
    pack_runtime.recorder.begin_run("pm-glue-1", None)
    try:
        assert dump_nodes.current_prompt_id() == ("pm-glue-1", None)
    finally:
        pack_runtime.recorder.end_run("success")


def test_a_prompt_id_that_cannot_be_read_names_both_reasons(comfy, pack_runtime, monkeypatch):
    import comfy_execution.utils

    dump_nodes = comfy.pack_module("nodes.dump_nodes")
    monkeypatch.setattr(comfy_execution.utils, "get_executing_context", broken)
    monkeypatch.setattr(dump_nodes, "get_runtime", broken)
    assert dump_nodes.current_prompt_id() == (
        None,
        "prompt id unknown: executing context: RuntimeError: injected fault; "
        "recorder: RuntimeError: injected fault",
    )


def test_a_step_that_cannot_be_recorded_is_logged_not_raised(comfy, pack_runtime, monkeypatch, caplog):
    node_support = comfy.pack_module("nodes.node_support")
    report = comfy.pack_module("monitors.report")
    step = report.failed_step("latent", "9", RuntimeError("analysis failed"))
    monkeypatch.setattr(pack_runtime.recorder, "add_step", broken)
    with caplog.at_level(logging.ERROR):
        assert node_support.record_step(step) is False
    assert caplog.records[-1].getMessage() == "pipeline monitor: step not recorded"


def test_a_step_outside_a_profiled_prompt_is_not_attached(comfy, pack_runtime, caplog):
    node_support = comfy.pack_module("nodes.node_support")
    report = comfy.pack_module("monitors.report")
    step = report.failed_step("latent", "9", RuntimeError("analysis failed"))
    with caplog.at_level(logging.DEBUG):
        assert node_support.record_step(step) is False
    assert "latent step of node 9 made outside a profiled prompt" in caplog.text


def test_dump_names_without_an_output_folder_are_an_empty_list(comfy, monkeypatch, caplog):
    dump_nodes = comfy.pack_module("nodes.dump_nodes")
    monkeypatch.setattr(comfy.pack_module("nodes.dump_paths"), "dumps_dir", broken)
    with caplog.at_level(logging.DEBUG):
        assert dump_nodes.dump_choices() == []
    assert "pipeline monitor: RuntimeError: injected fault" in caplog.text

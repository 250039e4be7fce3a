"""Contract tests: the ComfyUI seams nodes/profile_hook.py relies on exist and behave as assumed."""

from __future__ import annotations

import inspect

import pytest

pytestmark = pytest.mark.comfyui


@pytest.fixture
def seams(comfy):
    import execution
    from comfy_execution import graph, progress, utils

    return execution, progress, utils, graph


def test_execution_uses_its_own_reset_progress_state(seams):
    execution, progress, _, _ = seams
    assert callable(execution.reset_progress_state)
    # The hook replaces the name in `execution`; that only works if execute_async looks it up
    # there as a global at call time (not through the progress module, not bound at def time).
    assert inspect.unwrap(execution.reset_progress_state) is progress.reset_progress_state
    execute_async = inspect.unwrap(execution.PromptExecutor.execute_async)
    assert inspect.iscoroutinefunction(execute_async)
    assert "reset_progress_state" in execute_async.__code__.co_names
    assert "add_progress_handler" in execute_async.__code__.co_names
    params = list(inspect.signature(execute_async).parameters)
    assert params[:3] == ["self", "prompt", "prompt_id"]
    assert list(inspect.signature(progress.reset_progress_state).parameters) == ["prompt_id", "dynprompt"]


def test_progress_handler_interface(seams):
    _, progress, _, _ = seams
    handler_class = progress.ProgressHandler
    assert isinstance(handler_class, type)
    for name in ("start_handler", "finish_handler", "reset"):
        assert callable(getattr(handler_class, name, None)), name
    assert list(inspect.signature(handler_class.start_handler).parameters)[:2] == ["self", "node_id"]
    assert list(inspect.signature(handler_class.finish_handler).parameters)[:2] == ["self", "node_id"]


def test_add_progress_handler_registers_by_name_on_the_new_registry(seams):
    _, progress, _, graph = seams
    progress.reset_progress_state("pm-seam-1", graph.DynamicPrompt({}))

    class Recording(progress.ProgressHandler):
        def __init__(self):
            super().__init__("pm_seam_test")
            self.events = []

        def start_handler(self, node_id, state, prompt_id):
            self.events.append(("start", node_id, prompt_id))

        def finish_handler(self, node_id, state, prompt_id):
            self.events.append(("finish", node_id, prompt_id))

    handler = Recording()
    progress.add_progress_handler(handler)
    registry = progress.get_progress_state()
    assert registry.handlers["pm_seam_test"] is handler
    registry.start_progress("3")
    registry.finish_progress("3")
    registry.finish_progress("4")  # a cached node: finish without start
    assert handler.events == [
        ("start", "3", "pm-seam-1"),
        ("finish", "3", "pm-seam-1"),
        ("finish", "4", "pm-seam-1"),
    ]
    progress.reset_progress_state("pm-seam-2", graph.DynamicPrompt({}))
    assert "pm_seam_test" not in progress.get_progress_state().handlers  # hence: re-register per prompt


def test_executing_context_exists(seams):
    _, _, utils, _ = seams
    assert callable(utils.get_executing_context)
    assert utils.get_executing_context() is None
    with utils.CurrentNodeContext("pm-seam", "5"):
        context = utils.get_executing_context()
    assert (context.prompt_id, context.node_id) == ("pm-seam", "5")


def test_dynamic_prompt_keeps_the_original_prompt(seams):
    _, _, _, graph = seams
    prompt = {"1": {"class_type": "EmptyImage", "inputs": {}}}
    assert graph.DynamicPrompt(prompt).original_prompt is prompt


def test_profile_hook_is_installed_and_records_a_run(comfy, pack_runtime, seams):
    """The wrapped reset_progress_state opens a run and registers the pack's handler."""
    execution, progress, _, graph = seams
    hook = comfy.pack_module("nodes.profile_hook")
    assert getattr(execution.reset_progress_state, "__pipeline_monitor_wrapped__", False)
    assert getattr(execution.PromptExecutor.execute_async, "__pipeline_monitor_wrapped__", False)
    prompt = {"1": {"class_type": "EmptyImage", "inputs": {}}, "2": {"class_type": "SaveImage", "inputs": {}}}
    execution.reset_progress_state("pm-hook-1", graph.DynamicPrompt(prompt))
    try:
        assert pack_runtime.recorder.active_prompt_id == "pm-hook-1"
        registry = progress.get_progress_state()
        assert hook.HANDLER_NAME in registry.handlers
        registry.start_progress("1")
        registry.finish_progress("1")
        registry.finish_progress("2")
    finally:
        report = pack_runtime.recorder.end_run("success")
    rows = {n.node_id: n for n in report.nodes}
    assert rows["1"].status == "executed" and rows["1"].class_type == "EmptyImage"
    assert rows["1"].duration_s is not None and rows["1"].peak_rss_bytes is not None
    assert rows["2"].status == "cached" and rows["2"].cached


def test_the_start_up_self_check_finds_every_seam_in_this_comfyui(comfy, monkeypatch):
    seams = comfy.pack_module("nodes.seams")
    for name in ("_missing", "_checked"):  # what the pack found at its start stays for later tests
        monkeypatch.setattr(seams, name, getattr(seams, name))
    used = seams.used_symbols()
    assert "execution.PromptExecutor.execute_async" in used and "comfy.lora.calculate_weight" in used
    # The in-process PromptServer is a stub with a route table and send_sync only.
    stub_lacks = {
        "server.PromptServer.instance.last_node_id",
        "server.PromptServer.instance.sockets",
        "server.PromptServer.instance.prompt_queue",  # the deferred steps' busy check: the recorder alone here
    }
    assert set(seams.self_check()) <= stub_lacks

"""nodes/profile_hook.py against fake ComfyUI seams (`execution`, `comfy_execution.progress`):
the wrappers record a run, and nothing the monitor does wrong ever reaches ComfyUI. The same
seams in a real ComfyUI: tests/comfyui/test_comfyui_seams.py."""

import asyncio
import importlib
import logging
import sys
import types

import pytest

from monitors.engine.sampler import Sampler
from monitors.probes.fake import fake_probes
from tests.unit.test_routes import PACK, import_pack

PROMPT = {"1": {"class_type": "LoadImage", "inputs": {}, "_meta": {"title": "Load"}}}
# A node the prompt expanded into while running: known to the dynamic prompt only, untitled.
EXPANDED = {"1.0.0.2": {"class_type": "VAEDecode", "inputs": {}}}


class FakeDynPrompt:
    original_prompt = PROMPT

    def get_node(self, node_id):
        return {**PROMPT, **EXPANDED}[node_id]


def fake_seams(monkeypatch, *, missing=()):
    """Fake `execution` and `comfy_execution.progress` modules in sys.modules, shaped as in
    ComfyUI 0.8; `missing` names attributes to leave out."""
    execution = types.ModuleType("execution")
    progress = types.ModuleType("comfy_execution.progress")
    progress.registered = []

    class ProgressHandler:
        def __init__(self, name):
            self.name = name

    def add_progress_handler(handler):
        progress.registered.append(handler)

    def reset_progress_state(prompt_id, dynprompt):
        return "registry"

    class PromptExecutor:
        def __init__(self, messages=(), raises=None):
            self.status_messages = list(messages)
            self.raises = raises

        async def execute_async(self, prompt, prompt_id, extra_data={}, execute_outputs=[]):  # noqa: B006
            if self.raises is not None:
                raise self.raises
            return "executed"

    for module, name, value in (
        (progress, "ProgressHandler", ProgressHandler),
        (progress, "add_progress_handler", add_progress_handler),
        (execution, "reset_progress_state", reset_progress_state),
        (execution, "PromptExecutor", PromptExecutor),
    ):
        if name not in missing:
            setattr(module, name, value)
    package = types.ModuleType("comfy_execution")
    package.progress = progress
    monkeypatch.setitem(sys.modules, "execution", execution)
    monkeypatch.setitem(sys.modules, "comfy_execution", package)
    monkeypatch.setitem(sys.modules, "comfy_execution.progress", progress)
    return execution, progress


@pytest.fixture
def hook(monkeypatch, tmp_path):
    _, runtime_mod = import_pack()
    hook = importlib.import_module(f"{PACK}.nodes.profile_hook")
    store_mod = importlib.import_module(f"{PACK}.monitors.engine.store")
    recorder_mod = importlib.import_module(f"{PACK}.monitors.engine.recorder")
    store = store_mod.RunStore(str(tmp_path))
    recorder = recorder_mod.RunRecorder(store, probes=fake_probes())
    runtime = runtime_mod.Runtime(store, recorder, Sampler(probes=fake_probes()))
    previous = runtime_mod.set_runtime(runtime)
    # Kept patches of private names: module state of the pack copy loaded once per session (the
    # progress handler class made at install, the seams' start-up self-check), reset per test.
    monkeypatch.setattr(hook, "_handler_class", None)
    # the start-up self-check of every seam (nodes/seams.py) as done, with nothing missing: its own
    # tests below and in tests/unit/test_comfyui_symbols.py
    seams = importlib.import_module(f"{PACK}.nodes.seams")
    monkeypatch.setattr(seams, "_checked", True)
    monkeypatch.setattr(seams, "_missing", ())
    # No ComfyUI server (after the in-process tests, the real one would be importable): an
    # announcement is logged at debug level and dropped; fake_server() puts one in.
    monkeypatch.setitem(sys.modules, "server", None)
    real_attach_metrics = hook.attach_metrics
    # the process-wide fleet metrics stay out of these runs (tests/unit/test_metrics.py has them)
    monkeypatch.setattr(hook, "attach_metrics", lambda runtime: None)
    yield types.SimpleNamespace(module=hook, runtime=runtime, real_attach_metrics=real_attach_metrics)
    runtime.sampler.stop()
    runtime_mod.set_runtime(previous)


def run_prompt(execution, progress, prompt_id="p1", messages=(("execution_success", {}),), raises=None):
    """What ComfyUI's executor does around one prompt, through the (wrapped) seams."""
    assert execution.reset_progress_state(prompt_id, FakeDynPrompt()) == "registry"
    handler = progress.registered[-1]
    for node_id in ("1", "1.0.0.2"):
        handler.start_handler(node_id)
        handler.finish_handler(node_id)
    executor = execution.PromptExecutor(messages, raises)
    return asyncio.run(executor.execute_async(PROMPT, prompt_id, extra_data={}))


def test_a_prompt_through_the_wrapped_seams_is_recorded(hook, monkeypatch):
    execution, progress = fake_seams(monkeypatch)
    assert hook.module.install() is True
    assert run_prompt(execution, progress) == "executed"
    assert progress.registered[-1].name == hook.module.HANDLER_NAME
    report = hook.runtime.store.get("p1")
    assert report["status"] == "success"
    assert [(row["node_id"], row["class_type"], row["title"], row["status"]) for row in report["nodes"]] == [
        ("1", "LoadImage", "Load", "executed"),
        ("1.0.0.2", "VAEDecode", None, "executed"),
    ]
    assert hook.runtime.recorder.active_prompt_id is None


def test_the_start_up_self_check_warns_once_and_every_report_lists_the_missing_seams(hook, monkeypatch, caplog):
    execution, progress = fake_seams(monkeypatch)
    seams = importlib.import_module(f"{PACK}.nodes.seams")
    monkeypatch.setattr(seams, "_checked", False)
    monkeypatch.setattr(seams, "used_symbols", lambda: {"execution.reset_progress_state": [], "execution.gone": []})
    with caplog.at_level(logging.WARNING):
        assert hook.module.install() is True
        assert hook.module.install() is True  # checked once
    assert [r.getMessage() for r in caplog.records] == [
        "pipeline monitor: this ComfyUI lacks 1 of the 2 symbols the pack uses: execution.gone (the monitors "
        "using them report less or fail; every run report lists them)"
    ]
    run_prompt(execution, progress, prompt_id="p1")
    run_prompt(execution, progress, prompt_id="p2")
    assert [hook.runtime.store.get(p)["missing_seams"] for p in ("p1", "p2")] == [["execution.gone"]] * 2


def test_installing_twice_wraps_once(hook, monkeypatch):
    execution, progress = fake_seams(monkeypatch)
    assert hook.module.install() is True
    wrapped = execution.reset_progress_state, execution.PromptExecutor.execute_async
    assert hook.module.install() is True
    assert (execution.reset_progress_state, execution.PromptExecutor.execute_async) == wrapped
    assert all(getattr(seam, hook.module._WRAPPED) is True for seam in wrapped)
    run_prompt(execution, progress)
    assert len(progress.registered) == 1


@pytest.mark.parametrize(
    "missing, named",
    [
        (("reset_progress_state",), "execution.reset_progress_state"),
        (("PromptExecutor",), "execution.PromptExecutor.execute_async"),
        (("ProgressHandler",), "progress.ProgressHandler"),
        (("add_progress_handler",), "progress.add_progress_handler"),
    ],
)
def test_a_missing_seam_turns_the_profile_off_with_one_warning(hook, monkeypatch, caplog, missing, named):
    execution, _ = fake_seams(monkeypatch, missing=missing)
    before = getattr(execution, "reset_progress_state", None)
    with caplog.at_level(logging.WARNING):
        assert hook.module.install() is False
    assert [r.getMessage() for r in caplog.records] == [
        f"pipeline monitor: per-node profile off, this ComfyUI lacks {named}"
    ]
    assert getattr(execution, "reset_progress_state", None) is before


def test_without_comfyui_execution_modules_the_profile_is_off(hook, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "execution", None)  # an import of it raises ImportError
    with caplog.at_level(logging.WARNING):
        assert hook.module.install() is False
    assert "execution modules not importable" in caplog.text


def test_a_failing_recorder_never_fails_the_prompt(hook, monkeypatch, caplog):
    execution, progress = fake_seams(monkeypatch)
    hook.module.install()
    recorder = hook.runtime.recorder

    def broken(*args, **kwargs):
        raise RuntimeError("recorder broke")

    for name in ("node_started", "node_finished", "end_run"):
        monkeypatch.setattr(recorder, name, broken)
    with caplog.at_level(logging.ERROR):
        assert run_prompt(execution, progress) == "executed"
    assert [r.getMessage() for r in caplog.records] == [
        "pipeline monitor: node start not recorded",
        "pipeline monitor: node finish not recorded",
    ] * 2 + ["pipeline monitor: could not finish the run record"]
    assert all(r.exc_info and "recorder broke" in str(r.exc_info[1]) for r in caplog.records)


def test_a_run_that_cannot_start_leaves_comfyuis_reset_alone(hook, monkeypatch, caplog):
    execution, progress = fake_seams(monkeypatch)
    hook.module.install()

    def broken(*args, **kwargs):
        raise RuntimeError("begin broke")

    monkeypatch.setattr(hook.runtime.recorder, "begin_run", broken)
    with caplog.at_level(logging.ERROR):
        assert execution.reset_progress_state("p1", FakeDynPrompt()) == "registry"
    assert caplog.records[-1].getMessage() == "pipeline monitor: could not start the run record"
    assert progress.registered == []


def test_comfyuis_own_error_reaches_comfyui_and_the_run_still_ends(hook, monkeypatch):
    execution, progress = fake_seams(monkeypatch)
    hook.module.install()
    with pytest.raises(ValueError, match="node failed"):
        run_prompt(execution, progress, messages=(), raises=ValueError("node failed"))
    report = hook.runtime.store.get("p1")
    assert report["status"] == "error"
    assert report["error"]["exception_message"] == "no final status from ComfyUI"
    assert hook.runtime.recorder.active_prompt_id is None


def test_a_reset_without_a_prompt_id_opens_no_run(hook, monkeypatch):
    execution, progress = fake_seams(monkeypatch)
    hook.module.install()
    assert execution.reset_progress_state(None, None) == "registry"
    assert progress.registered == []
    assert hook.runtime.recorder.active_prompt_id is None
    # and a prompt end without a run records nothing
    assert asyncio.run(execution.PromptExecutor().execute_async(PROMPT, "p0")) == "executed"
    assert hook.runtime.store.get("p0") is None


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((), {"prompt_id": "p2", "dynprompt": FakeDynPrompt()}),
        (("p2",), {"dynprompt": FakeDynPrompt()}),
    ],
    ids=["keywords", "mixed"],
)
def test_the_seams_arguments_may_come_as_keywords(hook, monkeypatch, args, kwargs):
    execution, progress = fake_seams(monkeypatch)
    hook.module.install()
    execution.reset_progress_state(*args, **kwargs)
    assert hook.runtime.recorder.active_prompt_id == "p2"
    progress.registered[-1].start_handler("1.0.0.2")
    progress.registered[-1].finish_handler("1.0.0.2")
    executor = execution.PromptExecutor([("execution_success", {})])
    asyncio.run(executor.execute_async(PROMPT, "p2", extra_data=workflow_extra_data("kw")))
    report = hook.runtime.store.get("p2")
    assert report["status"] == "success"
    assert report["nodes"][0]["class_type"] == "VAEDecode"
    assert report["workflow"]["name"] == "kw"


def workflow_extra_data(name):
    return {"extra_pnginfo": {"workflow": {"id": "w1", "extra": {"pipeline_monitor_workflow_name": name}}}}


def test_the_workflow_comes_from_positional_extra_data(hook, monkeypatch):
    execution, progress = fake_seams(monkeypatch)
    hook.module.install()
    execution.reset_progress_state("p3", FakeDynPrompt())
    executor = execution.PromptExecutor([("execution_success", {})])
    asyncio.run(executor.execute_async(PROMPT, "p3", workflow_extra_data("positional")))
    assert hook.runtime.store.get("p3")["workflow"] == {
        "name": "positional",
        "id": "w1",
        "name_unknown_reason": None,
    }


def fake_server(monkeypatch):
    sent = []
    server = types.ModuleType("server")
    server.PromptServer = types.SimpleNamespace(
        instance=types.SimpleNamespace(send_sync=lambda event, data: sent.append((event, data)))
    )
    monkeypatch.setitem(sys.modules, "server", server)
    return sent


def test_the_panel_hears_of_a_run_as_its_run_list_row(hook, monkeypatch):
    sent = fake_server(monkeypatch)
    execution, progress = fake_seams(monkeypatch)
    hook.module.install()
    run_prompt(execution, progress)  # the hook made announce_run a listener of the store
    assert sent == [("pipeline_monitor.run", hook.runtime.store.summary("p1"))]
    assert sent[0][1]["prompt_id"] == "p1" and "nodes" not in sent[0][1]


def test_a_run_the_store_no_longer_holds_is_announced_from_its_report(hook, monkeypatch):
    sent = fake_server(monkeypatch)
    report = {"prompt_id": "gone", "status": "success", "nodes": []}
    hook.module.announce_run(report)
    assert sent == [("pipeline_monitor.run", hook.module.run_summary(report))]
    assert sent[0][1]["prompt_id"] == "gone"


def test_an_announcement_without_a_server_is_dropped_quietly(hook, caplog):
    with caplog.at_level(logging.DEBUG):
        hook.module.announce_run({"prompt_id": "p9"})
    assert "run announcement not sent" in caplog.text


def test_fleet_metrics_that_cannot_attach_are_logged(hook, monkeypatch, caplog):
    metrics = importlib.import_module(f"{PACK}.nodes.metrics")

    def broken():
        raise RuntimeError("registry broke")

    monkeypatch.setattr(metrics, "PROMETHEUS_MISSING", False)
    monkeypatch.setattr(metrics, "get_fleet_metrics", broken)
    with caplog.at_level(logging.ERROR):
        hook.real_attach_metrics(hook.runtime)
    assert caplog.records[-1].getMessage() == "pipeline monitor: fleet metrics not attached"

"""The deep profile through nodes/profile_hook.py's wrapped seams (fake ComfyUI modules): an armed
prompt gets its deep_profile step with a row per node named by the dynamic prompt, the next
prompt none, and a controller that raises never fails the prompt."""

import importlib
import logging

from tests.unit.test_profile_hook import fake_seams, hook, run_prompt  # noqa: F401 - the fixture
from tests.unit.test_routes import PACK


def controller(hook):  # noqa: F811
    control = importlib.import_module(f"{PACK}.monitors.deep_profile.control")
    return control.get_controller()


def test_an_armed_prompt_is_deep_profiled_through_the_seams_and_the_next_is_plain(hook, monkeypatch):  # noqa: F811
    execution, progress = fake_seams(monkeypatch)
    assert hook.module.install() is True
    controller(hook).switch.set(True)
    run_prompt(execution, progress, "deep-1")
    run_prompt(execution, progress, "plain-1")
    deep = hook.runtime.store.get("deep-1")
    (step,) = [s for s in deep["steps"] if s["kind"] == "deep_profile"]
    assert [(r["node_id"], r["class_type"]) for r in step["details"]["nodes"]] == [
        ("1", "LoadImage"),
        ("1.0.0.2", "VAEDecode"),
    ]
    assert not any(s["kind"] == "deep_profile" for s in hook.runtime.store.get("plain-1")["steps"])
    assert controller(hook).state()["last_prompt_id"] == "deep-1"


def test_a_failing_deep_profile_never_fails_the_prompt(hook, monkeypatch, caplog):  # noqa: F811
    execution, progress = fake_seams(monkeypatch)
    hook.module.install()

    def broken(*args, **kwargs):
        raise RuntimeError("deep profile broke")

    for name in ("prompt_started", "node_started", "node_finished", "prompt_finished"):
        monkeypatch.setattr(controller(hook), name, broken)
    with caplog.at_level(logging.ERROR):
        assert run_prompt(execution, progress, "p-broken") == "executed"
    assert hook.runtime.store.get("p-broken")["status"] == "success"
    failed = {r.getMessage() for r in caplog.records}
    assert failed == {
        f"pipeline monitor: deep profile {name} failed"
        for name in ("prompt_started", "node_started", "node_finished", "prompt_finished")
    }

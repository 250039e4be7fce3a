"""monitors/ never imports ComfyUI; importing the pack does no work and prints nothing."""

import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMFY_MODULES = (
    "comfy",
    "comfy_api",
    "comfy_execution",
    "comfy_extras",
    "server",
    "nodes",
    "execution",
    "folder_paths",
)


def run_clean(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "COMFYUI_PATH")}
    env["PYTHONPATH"] = REPO
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_monitors_imports_no_comfyui_module():
    result = run_clean(
        f"""
        import importlib, pkgutil, sys
        import monitors
        for info in pkgutil.walk_packages(monitors.__path__, "monitors."):
            if not info.name.endswith(".__main__"):  # the command line runs when imported
                importlib.import_module(info.name)
        bad = sorted(m for m in sys.modules if m.split(".")[0] in {COMFY_MODULES!r})
        assert not bad, bad
        print("imported", len([m for m in sys.modules if m.startswith("monitors")]))
        """
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) >= 10


def test_importing_monitors_starts_no_thread_and_prints_nothing():
    result = run_clean(
        """
        import threading
        import monitors.engine.sampler, monitors.engine.span, monitors.engine.recorder, monitors.probes
        assert threading.active_count() == 1, threading.enumerate()
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""


def test_pack_root_import_does_no_work_outside_comfyui():
    parent, folder = os.path.split(REPO)
    result = run_clean(
        f"""
        import importlib.util, sys, threading
        spec = importlib.util.spec_from_file_location("pm_pack", {os.path.join(REPO, "__init__.py")!r},
                                                      submodule_search_locations=[{REPO!r}])
        module = importlib.util.module_from_spec(spec)
        sys.modules["pm_pack"] = module
        spec.loader.exec_module(module)
        assert callable(module.comfy_entrypoint)
        assert module.WEB_DIRECTORY == "./web"
        assert threading.active_count() == 1
        assert "torch" not in sys.modules or not __import__("torch").cuda.is_initialized()
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""

import os
from pathlib import Path

import pytest

# The fused statistics kernels compile in the background once enough large tensors were reduced,
# and their figures differ from the eager kernels' in the last bits: a test would see one or the
# other by timing. Off for every test, its servers included; tests/unit/test_fused_kernels.py
# makes its own.
os.environ.setdefault("PIPELINE_MONITOR_FUSED_KERNELS", "off")
# A LoRA step on a first file finishes after the prompt (monitors/engine/deferred_steps.py): tests
# that read its figures right after the prompt run it whole in the prompt, as it was. The tests of
# the deferral turn it on (the `deferring_server` below; in process, the environment variable).
os.environ.setdefault("PIPELINE_MONITOR_DEFER", "0")

# Imported here, before any test imports ComfyUI in-process: ComfyUI has a `tests` package of its
# own, and once its folder leads sys.path a late `import tests.comfyui...` could not be resolved.
from tests.comfyui import conftest as comfyui_conftest


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """One headless ComfyUI server per test session, shared by tests/comfyui and tests/browser
    (see tests/comfyui/conftest.py; skipped there without COMFYUI_PATH)."""
    yield from comfyui_conftest.session_server(tmp_path_factory)


@pytest.fixture(scope="session")
def deferring_server(tmp_path_factory):
    """A second server whose LoRA steps on a first file finish after the prompt (the product's
    default), for the tests of that behaviour in tests/comfyui and tests/browser."""
    yield from comfyui_conftest.session_server(tmp_path_factory, {"PIPELINE_MONITOR_DEFER": "1"})


# -- CI: an integration or browser test that skips is a broken install, not a pass ---------------

REQUIRED_IN_CI = tuple(Path(__file__).resolve().parent / name for name in ("comfyui", "browser"))
_skipped_required: list[str] = []
_worker_verdicts: list[str] = []


def _required_in_ci(report) -> bool:
    path = Path(str(report.fspath)).resolve()
    return any(folder in path.parents for folder in REQUIRED_IN_CI)


def pytest_runtest_logreport(report):
    if report.skipped and _required_in_ci(report):
        _skipped_required.append(report.nodeid)
    # Verdict lines a check wrote (tests/comfyui/dynamic_vram_support.py): printed as they come,
    # except from pytest-xdist workers (reports with a `node`), whose output is lost: listed below.
    if report.when == "teardown" and getattr(report, "node", None) is not None:
        _worker_verdicts.extend(line for key, line in report.user_properties if key == "gpu-dynamic-vram")


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("CI") and _skipped_required and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _worker_verdicts:
        terminalreporter.section("gpu-dynamic-vram verdicts")
        for line in _worker_verdicts:
            terminalreporter.line(line)
    if os.environ.get("CI") and _skipped_required:
        terminalreporter.section("skipped in CI (fails the run)", red=True)
        terminalreporter.line(
            f"{len(_skipped_required)} comfyui/browser tests skipped; CI needs them all "
            "(COMFYUI_PATH, Chromium, playwright): see the skip reasons above"
        )
        for nodeid in _skipped_required[:20]:
            terminalreporter.line(f"  {nodeid}")


@pytest.fixture(scope="session", autouse=True)
def reports_valid_against_the_schema(tmp_path_factory):
    """After the session, every run report written under pytest's temporary folders (stores, the
    profiling API, the real servers) must validate against the schema, strict per-kind summaries
    included, and carry no false values (object reprs, impossible combinations); a report that
    does not fails the session (tests/report_validation.py)."""
    yield
    from tests.report_validation import invalid_reports

    problems = invalid_reports(tmp_path_factory.getbasetemp())
    assert not problems, (
        "run reports that do not validate against the schema or carry false values:\n" + "\n".join(problems)
    )


@pytest.fixture(autouse=True)
def fresh_vae_calibration():
    """The VAE chain's calibration table is per process: each test starts without what earlier
    tests' encodes taught it (simulated out-of-memory errors teach that the need exceeded all free
    memory), so `auto` decides from that test's own fakes. ComfyUI loads the pack as a package of
    its own, so its copy of the module has a table of its own too."""
    import sys

    def clear():
        for name, module in list(sys.modules.items()):
            if name.endswith("monitors.vae.calibration") and hasattr(module, "PROCESS_TABLE"):
                module.PROCESS_TABLE.clear()

    clear()
    yield
    clear()

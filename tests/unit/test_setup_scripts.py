"""The set-up scripts: one torch pin, README's commands are what CI runs, Python 3.10 reads
pyproject.toml (no tomllib there)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_torch_is_pinned_in_one_place():
    pinned = {
        path.relative_to(REPO).as_posix()
        for path in [*REPO.glob("scripts/*"), *REPO.glob(".ci/*"), REPO / "pyproject.toml", REPO / "requirements.txt"]
        if path.is_file() and re.search(r"\btorch(vision)?==", path.read_text(errors="replace"))
    }
    assert pinned == {"scripts/setup_env.sh"}


def test_ci_runs_the_readme_commands():
    readme_block = REPO.joinpath("README.md").read_text().split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in readme_block.strip().splitlines()]
    assert commands[0].endswith("bash scripts/demo.sh") and commands[1] == "bash scripts/test.sh"
    ci = REPO.joinpath(".ci/run").read_text()
    assert "bash scripts/test.sh" in ci
    assert "bash scripts/demo.sh --exit-after-run" in ci
    assert "COMFYUI_PYTHON=" in ci
    assert "../shared/comfyui" in ci
    assert "comfyui_execution_suite.sh" in ci
    # the browser tests on the newest frontend too, in an overlay venv over 0.33.0's
    assert "NEWEST_FRONTEND=1.58.1" in ci and "scripts/setup_frontend_venv.sh" in ci
    assert 'stage frontend newest_frontend_browser' in ci


def test_the_frontend_overlay_venv_layers_on_the_version_venv():
    script = REPO.joinpath("scripts/setup_frontend_venv.sh").read_text()
    assert "site.addsitedir" in script, "a plain path line would not follow the version venv's own .pth layers"
    assert "--no-deps" in script and "--target" in script, "only the frontend package goes into the overlay"


def _pack_requirements(*prelude: str) -> list[str]:
    code = "; ".join(
        [
            *prelude,
            "import runpy, sys",
            "sys.argv = ['pack_requirements.py', 'runtime']",
            "runpy.run_path('scripts/pack_requirements.py', run_name='__main__')",
        ]
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return result.stdout.split()


def test_requirements_read_without_tomllib_through_tomli():
    # Python 3.10 has no tomllib: the script must fall back to tomli (which setup_env.sh installs).
    with_tomllib = _pack_requirements()
    without = _pack_requirements(
        "import sys, tomllib",
        "sys.modules['tomli'] = tomllib",
        "sys.modules['tomllib'] = None",
    )
    assert with_tomllib == without
    assert with_tomllib == REPO.joinpath("requirements.txt").read_text().split()

"""External tools the installation and Prometheus tests drive (comfy-cli, prometheus).

`.ci/install_tools.sh` installs them. Outside CI a missing tool skips its test with the reason; in
CI (env var CI set) it fails the test, so a broken tool install can never pass as green skips."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_HINT = "run .ci/install_tools.sh"


def find_tool(name: str, env_var: str, candidates: tuple[Path, ...] = ()) -> str:
    """The executable from env_var, then candidates, then PATH; skip (fail in CI) when there is none."""
    configured = os.environ.get(env_var)
    if configured:
        if os.access(configured, os.X_OK):
            return configured
        missing(f"{env_var}={configured} is not an executable file")
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    tried = ", ".join([f"${env_var}", *(str(c) for c in candidates), "PATH"])
    missing(f"{name} not found (tried {tried}); {INSTALL_HINT}")
    raise AssertionError("unreachable")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def missing(reason: str) -> None:
    if in_ci():
        pytest.fail(f"CI is set and a required tool is missing: {reason}", pytrace=False)
    pytest.skip(reason)


def comfy_cli() -> str:
    return find_tool("comfy", "COMFY_CLI", (REPO_ROOT / ".venv-comfy-cli" / "bin" / "comfy",))


def prometheus() -> str:
    return find_tool("prometheus", "PROMETHEUS", (Path("/usr/bin/prometheus"),))

"""The pack installed the way users get it: `comfy node validate` and `comfy node pack` (comfy-cli,
what the registry publishes and ComfyUI-Manager installs) in a copy of the repository, the archive
unpacked into the custom_nodes of a fresh ComfyUI base folder, `pip install -r requirements.txt`
resolved, and a real server started from that folder running a prompt with a pack node.

comfy-cli comes from COMFY_CLI, <repo>/.venv-comfy-cli/bin/comfy or PATH (.ci/install_tools.sh)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import types
import zipfile
from pathlib import Path

import pytest
from conftest import ComfyServer, free_port
from tool_support import REPO_ROOT, comfy_cli, missing

pytestmark = pytest.mark.comfyui

PACK_FOLDER = "pipeline-monitor"  # the registry id ([project].name): comfy-cli installs under it
TOOL_TIMEOUT_S = 300  # only catches a hang
RUNTIME_FILES = ("__init__.py", "requirements.txt", "pyproject.toml", "LICENSE", "README.md")
RUNTIME_DIRS = ("monitors", "nodes", "web", "schemas", "example_workflows")
DEV_ONLY_TOP = {"tests", "bench", "scripts", ".ci", ".git", ".venv", ".demo", "node_modules", "node.zip"}
CACHE_PARTS = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
# Planted in the copies: none of it may reach an archive, in a git checkout or outside one.
JUNK = (
    ".venv/pyvenv.cfg",
    ".venv-comfy-cli/bin/comfy",
    ".demo/models/vae/junk.safetensors",
    "node_modules/junk/index.js",
    "monitors/__pycache__/junk.cpython-311.pyc",
    ".pytest_cache/v/junk",
    "tests/junk.py",
)
REPORT_TIMEOUT_S = 60


def run_tool(command: list[str], cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
    )
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    return result


def copy_worktree(destination: Path, git: str) -> None:
    """The files a commit of this tree would hold: tracked and new ones, never ignored ones."""
    listed = run_tool([git, "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO_ROOT)
    for rel in filter(None, listed.stdout.split("\0")):
        source = REPO_ROOT / rel
        if source.is_file():  # deleted but not yet committed: gone
            (destination / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / rel)
    for rel in JUNK:
        (destination / rel).parent.mkdir(parents=True, exist_ok=True)
        (destination / rel).write_text("junk\n")


def comfy_env(home: Path) -> dict:
    # Own HOME: comfy-cli writes its config under ~/.config; no telemetry, no consent prompt.
    return {**os.environ, "HOME": str(home), "DO_NOT_TRACK": "1", "COMFY_NO_TELEMETRY": "1"}


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    comfy = comfy_cli()
    git = shutil.which("git")
    if git is None:
        missing("git not found: comfy node pack archives git-tracked files")
    root = tmp_path_factory.mktemp("packaging")
    env = comfy_env(root / "home")
    checkout = root / "checkout"
    copy_worktree(checkout, git)
    run_tool([git, "init", "-q"], checkout)
    run_tool([git, "add", "."], checkout)
    validate = run_tool([comfy, "node", "validate"], checkout, env)
    run_tool([comfy, "node", "pack"], checkout, env)

    # Outside a git checkout comfy-cli archives the whole tree minus .comfyignore.
    plain = root / "plain"
    shutil.copytree(checkout, plain, ignore=shutil.ignore_patterns(".git"))
    (plain / "node.zip").unlink()
    run_tool([comfy, "node", "pack"], plain, env)

    def names(archive: Path) -> set[str]:
        with zipfile.ZipFile(archive) as z:
            return {n for n in z.namelist() if not n.endswith("/")}

    return types.SimpleNamespace(
        checkout=checkout,
        archive=checkout / "node.zip",
        names=names(checkout / "node.zip"),
        plain_names=names(plain / "node.zip"),
        validate_output=validate.stdout + validate.stderr,
    )


def test_validate_passes_without_security_warnings(packed):
    assert "All validation checks passed" in packed.validate_output, packed.validate_output
    assert "Security warnings" not in packed.validate_output, packed.validate_output


def test_archive_holds_the_runtime_and_nothing_for_development(packed):
    names = packed.names
    for name in RUNTIME_FILES:
        assert name in names, f"{name} missing from the archive"
    for folder in RUNTIME_DIRS:
        source = {
            p.relative_to(packed.checkout).as_posix()
            for p in (packed.checkout / folder).rglob("*")
            if p.is_file() and not CACHE_PARTS & set(p.parts)
        }
        assert source, f"{folder}/ is empty in the checkout"
        assert source <= names, f"{folder}/ files missing from the archive: {sorted(source - names)[:20]}"
    dev = sorted(
        n
        for n in names
        if n.split("/")[0] in DEV_ONLY_TOP
        or n.split("/")[0].startswith(".venv")
        or CACHE_PARTS & set(n.split("/"))
        or n.endswith(".pyc")
    )
    assert not dev, f"development files in the archive: {dev[:20]}"


def test_archive_is_the_same_outside_a_git_checkout(packed):
    assert packed.plain_names == packed.names


@pytest.fixture(scope="module")
def installed_server(packed, tmp_path_factory):
    base = tmp_path_factory.mktemp("installed_base")
    for sub in ("custom_nodes", "models", "input", "output", "user"):
        (base / sub).mkdir()
    pack = base / "custom_nodes" / PACK_FOLDER
    with zipfile.ZipFile(packed.archive) as z:
        z.extractall(pack)  # what comfy-cli's installer does with a registry archive
    # The user's next step; --dry-run --no-index: resolve against this venv, change and fetch nothing.
    pip = run_tool(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "-r", str(pack / "requirements.txt")],
        pack,
    )
    assert "Would install" not in pip.stdout, pip.stdout
    generate = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "make_tiny_models.py"), str(base)],
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
    )
    assert generate.returncode == 0, generate.stdout + generate.stderr
    server = ComfyServer(base, free_port(), base / "server.log")
    try:
        yield server.start(), pack
    finally:
        server.stop()


def test_installed_pack_loads_from_the_unpacked_archive(installed_server):
    server, pack = installed_server
    startup = server.log().split("Starting server", 1)[0]
    lines = [line for line in startup.splitlines() if line.rstrip().endswith(str(pack))]
    assert len(lines) == 1, f"no import line for {pack}:\n{startup[-3000:]}"
    assert "IMPORT FAILED" not in lines[0], startup[-3000:]
    assert "PipelineMonitorModels" in server.get_json("/object_info/PipelineMonitorModels")
    panel = server.get(f"/extensions/{PACK_FOLDER}/pipeline_monitor.js")
    assert panel.status_code == 200, panel.status_code


def test_installed_pack_runs_a_prompt_and_serves_its_report(installed_server):
    server, pack = installed_server
    prompt = json.loads((pack / "example_workflows" / "api" / "models_profile_demo.json").read_text())
    prompt["4"]["inputs"].update(width=64, height=64)  # the demo at a size that is quick on a CPU
    prompt_id, history = server.run(prompt)
    assert history["status"]["status_str"] == "success", history["status"]
    listed = {run["prompt_id"]: run for run in server.get_json("/pipeline_monitor/runs")["runs"]}
    assert listed[prompt_id]["status"] == "success", listed
    report = server.get_json(f"/pipeline_monitor/runs/{prompt_id}")
    assert report["status"] == "success"
    assert [step["kind"] for step in report["steps"]] == ["models"]
    assert {row["class_type"] for row in report["nodes"]} == {n["class_type"] for n in prompt.values()}
    on_disk = server.base / "output" / "pipeline_monitor" / "reports" / f"{prompt_id}.json"
    deadline = time.monotonic() + REPORT_TIMEOUT_S  # written off the execution thread
    while not on_disk.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert json.loads(on_disk.read_text())["prompt_id"] == prompt_id

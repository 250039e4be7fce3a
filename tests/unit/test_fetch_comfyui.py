"""scripts/fetch_comfyui.sh, the pinned ComfyUI that scripts/demo.sh fetches when COMFYUI_PATH is
unset: from a folder, from an archive with one top folder (as GitHub's source archives are), kept
when already there, refused when the source holds another version. The default source (GitHub's
archive of the tag) needs a network this test does not use; CI's demo stage runs the demo through
this script with COMFYUI_SOURCE set to the local ComfyUI 0.33.0."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PIN = "0.33.0"


def fake_comfyui(folder: Path, version: str = PIN) -> Path:
    folder.mkdir(parents=True)
    (folder / "main.py").write_text("# ComfyUI\n")
    (folder / "comfyui_version.py").write_text(f'__version__ = "{version}"\n')
    (folder / "comfy").mkdir()
    (folder / "comfy" / "model_management.py").write_text("# part of the tree\n")
    return folder


def fetch(dest: Path, source: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COMFYUI_SOURCE": str(source), "COMFYUI_PIN": PIN}
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "fetch_comfyui.sh"), str(dest)], env=env, capture_output=True, text=True
    )


def test_from_a_folder_then_kept(tmp_path):
    source = fake_comfyui(tmp_path / "snapshot")
    dest = tmp_path / "demo" / "comfyui"
    done = fetch(dest, source)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(dest)
    assert (dest / "comfy" / "model_management.py").is_file()
    (source / "main.py").unlink()  # a second run does not read the source again
    again = fetch(dest, source)
    assert again.returncode == 0 and "already in" in again.stderr
    assert [p.name for p in dest.parent.iterdir()] == ["comfyui"], "no work folder left behind"


def test_from_an_archive_with_one_top_folder(tmp_path):
    tree = fake_comfyui(tmp_path / "ComfyUI-0.33.0")
    archive = tmp_path / "comfyui.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tree, arcname=tree.name)
    dest = tmp_path / "demo" / "comfyui"
    done = fetch(dest, archive)
    assert done.returncode == 0, done.stderr
    assert (dest / "main.py").is_file() and (dest / "comfy").is_dir()


def test_another_version_is_refused_and_nothing_replaced(tmp_path):
    dest = fake_comfyui(tmp_path / "demo" / "comfyui", version="0.1.0")  # an older fetch
    done = fetch(dest, fake_comfyui(tmp_path / "other", version="0.8.0"))
    assert done.returncode != 0
    assert "holds ComfyUI 0.8.0, not the pinned 0.33.0" in done.stderr
    assert 'version__ = "0.1.0"' in (dest / "comfyui_version.py").read_text()


def test_the_demo_fetches_when_comfyui_path_is_unset():
    demo = (REPO / "scripts" / "demo.sh").read_text()
    assert 'if [ -z "${COMFYUI_PATH:-}" ]; then' in demo and "scripts/fetch_comfyui.sh" in demo
    assert 'COMFYUI_SOURCE="$NEWEST_COMFYUI"' in (REPO / ".ci" / "run").read_text(), "CI runs the fetch path"

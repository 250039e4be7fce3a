"""`python -m monitors.vocabulary.generated_files`: --check names each stale file and exits 1,
--write rewrites only the stale ones and says which, on copies of the generated files (the
repository's own are never written here)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from monitors.vocabulary import generated_files

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def copies(tmp_path, monkeypatch):
    """The three generated files copied under tmp_path/schemas, /web/lib and /docs, and the module
    pointed at them (the report root too, so that messages name them relative to it)."""
    paths = {}
    for name, rel in (("SCHEMA_PATH", "schemas/run_report.schema.json"), ("JS_PATH", "web/lib/vocabulary.generated.mjs"),
                      ("DOC_PATH", "docs/metrics-reference.md")):
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, target)
        monkeypatch.setattr(generated_files, name, str(target))
        paths[name] = target
    monkeypatch.setattr(generated_files, "REPO_ROOT", str(tmp_path))
    return paths


def test_fresh_files_pass_the_check(copies, capsys):
    assert generated_files.stale_files() == []
    assert generated_files.main(["--check"]) == 0
    assert generated_files.main([]) == 0
    assert capsys.readouterr().err == ""


def test_check_names_each_stale_file_and_fails(copies, capsys):
    copies["JS_PATH"].write_text("// edited by hand\n")
    copies["DOC_PATH"].unlink()  # a missing file is stale too
    assert generated_files.stale_files() == [str(copies["JS_PATH"]), str(copies["DOC_PATH"])]
    assert generated_files.main(["--check"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "stale: web/lib/vocabulary.generated.mjs (run python -m monitors.vocabulary.generated_files --write)",
        "stale: docs/metrics-reference.md (run python -m monitors.vocabulary.generated_files --write)",
    ]


def test_write_rewrites_only_the_stale_files(copies, capsys):
    expected = generated_files.expected_files()
    copies["DOC_PATH"].write_text("old\n")
    before = copies["JS_PATH"].stat().st_mtime_ns
    assert generated_files.main(["--write"]) == 0
    assert capsys.readouterr().err == "wrote docs/metrics-reference.md\n"
    assert copies["DOC_PATH"].read_text() == expected[str(copies["DOC_PATH"])]
    assert copies["JS_PATH"].stat().st_mtime_ns == before
    assert generated_files.stale_files() == []


def test_the_generated_texts_end_with_a_newline_and_keep_their_characters(copies):
    texts = generated_files.expected_files()
    schema = texts[str(copies["SCHEMA_PATH"])]
    assert schema.endswith("}\n") and schema.startswith('{\n "')
    assert "\\u" not in schema and "\\u" not in texts[str(copies["JS_PATH"])]


def test_text_outside_ascii_is_written_as_itself(copies, monkeypatch):
    base = json.loads(copies["SCHEMA_PATH"].read_text())
    base["description"] = "naïve – 日本"
    assert '"description": "naïve – 日本"' in generated_files.schema_text(base)
    figures = {"gpu_time_s": {"label": "GPU span", "description": "über"}}
    monkeypatch.setattr(generated_files, "NODE_GPU_FIGURES", figures)
    assert '"description": "über"' in generated_files.js_text()


def test_help_describes_the_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        generated_files.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m monitors.vocabulary.generated_files")
    assert "The files generated from the step kinds' declarations" in out
    assert "python -m monitors.vocabulary.generated_files --write   #" not in out  # the first paragraph only


def test_the_module_runs_its_command_line():
    result = subprocess.run(
        [sys.executable, "-m", "monitors.vocabulary.generated_files", "--no-such-option"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 2 and "unrecognized arguments: --no-such-option" in result.stderr

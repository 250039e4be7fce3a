"""requirements.txt is what ComfyUI-Manager and most users install (`pip install -r`); it must list
exactly the runtime dependencies of pyproject.toml, the one source scripts/test.sh installs from."""

import os
import re
import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # requires-python is >=3.10, which has no tomllib
    import tomli as tomllib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def requirement_lines(path: str) -> list[str]:
    lines = []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("#", 1)[0].strip()
            if line:
                lines.append(line)
    return lines


def test_requirements_txt_equals_pyproject_dependencies():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    requirements = requirement_lines(os.path.join(REPO, "requirements.txt"))
    assert sorted(requirements) == sorted(dependencies), (
        "requirements.txt and [project].dependencies of pyproject.toml disagree: "
        f"only in requirements.txt {sorted(set(requirements) - set(dependencies))}, "
        f"only in pyproject.toml {sorted(set(dependencies) - set(requirements))}"
    )
    assert len(set(requirements)) == len(requirements), "duplicate lines in requirements.txt"


def test_requirements_txt_has_no_torch_and_no_test_dependencies():
    names = {
        re.match(r"[A-Za-z0-9_.-]+", line).group(0).lower()
        for line in requirement_lines(os.path.join(REPO, "requirements.txt"))
    }
    # torch comes with ComfyUI in the build the user chose (CUDA, ROCm, CPU); reinstalling it breaks that.
    assert "torch" not in names
    assert not names & {"pytest", "ruff", "playwright", "hypothesis", "jsonschema"}

"""Print the pack's dependencies from pyproject.toml, one requirement a line.

    python scripts/pack_requirements.py runtime   # [project].dependencies (what requirements.txt holds)
    python scripts/pack_requirements.py test      # the `test` extra

pyproject.toml is the one source of truth; requirements.txt is checked against it by a test.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: scripts/setup_env.sh installs tomli first
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(group: str, pyproject: Path = PYPROJECT) -> list[str]:
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    if group == "runtime":
        return list(project["dependencies"])
    return list(project["optional-dependencies"][group])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: pack_requirements.py runtime|test")
    print("\n".join(requirements(sys.argv[1])))

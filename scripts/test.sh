#!/usr/bin/env bash
# Sets up .venv (first run only) and runs the whole test suite.
# Integration tests against a real ComfyUI run when COMFYUI_PATH points at a ComfyUI 0.8 checkout
# (set it up first with scripts/demo.sh); without it they skip with that reason.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
PY=.venv/bin/python

# torch comes with ComfyUI; for the library tests a CPU build is enough (2.13.0 is the CPU wheel).
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
fi
# The pack's runtime and test dependencies, read from pyproject.toml (one source of truth).
"$PY" - > .venv/pm-requirements.txt <<'PYEOF'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
print("\n".join(project["dependencies"] + project["optional-dependencies"]["test"]))
PYEOF
"$PY" -m pip install --quiet --disable-pip-version-check -r .venv/pm-requirements.txt

echo "== ruff"
"$PY" -m ruff check .

# -- JavaScript (web/): the panel's unit tests and the JSDoc type check --------------------------
# Runs when package.json exists and node/npm are installed; a failure fails the run (set -e).
if [ -f package.json ] && command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  echo "== npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  echo "== node --test"
  node --test tests/js/*.test.mjs
  echo "== tsc"
  npx --no-install tsc -p jsconfig.json
else
  echo "== JavaScript checks skipped: node or npm not found" >&2
fi
# ------------------------------------------------------------------------------------------------

echo "== pytest"
set +e
"$PY" -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit "$rc"

#!/usr/bin/env bash
# Sets up .venv (scripts/setup_env.sh --test) and runs every check: ruff, the panel's JavaScript
# tests and type check, pytest.
#
#   [COMFYUI_PATH=/path/to/ComfyUI] bash scripts/test.sh [pytest args]
#
# With COMFYUI_PATH (a ComfyUI 0.8 checkout, used read-only) the integration and browser tests run
# too and .venv also gets ComfyUI's requirements; without it they skip with that reason.
# PM_COVERAGE=1 runs pytest under coverage.py (the real servers it starts included) and prints
# line coverage of nodes/ and monitors/. CI=true fails the run when a comfyui or browser test skips.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=$(bash scripts/setup_env.sh --test | tail -n 1)

echo "== ruff"
"$PY" -m ruff check .

# -- JavaScript (web/): the panel's unit tests and the JSDoc type check --------------------------
# Runs when node and npm are installed (CI has them); a failure fails the run (set -e).
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
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
if [ "${PM_COVERAGE:-0}" = "1" ]; then
  export COVERAGE_FILE="$PWD/.coverage"
  rm -f .coverage .coverage.*
  "$PY" -m coverage run --source="$PWD/nodes,$PWD/monitors" -m pytest "$@"
  rc=$?
  "$PY" -m coverage combine --quiet
  echo "== coverage (lines)"
  "$PY" -m coverage report --include='nodes/*' --skip-empty --precision=1 | tail -n 1 | sed 's/^TOTAL/nodes\/   /'
  "$PY" -m coverage report --include='monitors/*' --skip-empty --precision=1 | tail -n 1 | sed 's/^TOTAL/monitors\//'
  "$PY" -m coverage report --include='nodes/*' --skip-empty --precision=1 --sort=cover | head -n 12
else
  "$PY" -m pytest "$@"
  rc=$?
fi
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit "$rc"

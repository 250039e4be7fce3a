#!/usr/bin/env bash
# Sets up .venv (scripts/setup_env.sh --test) and runs every check: ruff, the panel's JavaScript
# tests and type check, pytest.
#
#   [COMFYUI_PATH=/path/to/ComfyUI] bash scripts/test.sh [pytest args]
#
# With COMFYUI_PATH (a ComfyUI checkout, 0.8.0 to 0.33.0, used read-only) the integration and
# browser tests run too, with that version's own venv (.venv-comfyui-<version>, on top of .venv);
# without it they skip with that reason.
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
  for part in nodes monitors; do
    "$PY" -m coverage report --include="$part/*" --skip-empty --precision=1 --sort=cover > ".venv/pm-coverage-$part.txt"
    echo "$part/ $(awk '$1 == "TOTAL" {print $NF}' ".venv/pm-coverage-$part.txt") of lines"
  done
  echo "-- nodes/, least covered first"
  sed -n '3,12p' .venv/pm-coverage-nodes.txt
  # nodes/ is where the pack meets ComfyUI: CI keeps it measured by the real-ComfyUI tests.
  if [ -n "${COMFYUI_PATH:-}" ] && ! awk '$1 == "TOTAL" {exit !($NF + 0 >= 85)}' .venv/pm-coverage-nodes.txt; then
    echo "nodes/ line coverage is under 85 %" >&2
    [ "$rc" -eq 0 ] && rc=1
  fi
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

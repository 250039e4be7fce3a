#!/usr/bin/env bash
# The Python environment of the tests and the demo, with one torch pin for both.
#
#   scripts/setup_env.sh [--test]          creates or updates .venv in the repository
#   COMFYUI_PYTHON=/path/to/python scripts/setup_env.sh
#                                          reuses an existing ComfyUI's Python instead
#
# .venv gets, in this order: the pinned torch and torchvision (below); ComfyUI's requirements.txt
# when COMFYUI_PATH is set, without its torch/torchvision/torchaudio lines and constrained to the
# pins (so nothing swaps torch); the pack's requirements.txt; with --test, the test dependencies
# from pyproject.toml. pip runs only when that list asks for something the last successful
# install did not.
#
# With COMFYUI_PYTHON, that environment already has torch and ComfyUI's requirements (it runs
# ComfyUI): only the pack's requirements.txt is installed into it, constrained to its own torch.
#
# Prints the path of the Python to use as its last line. PYTHON (python3) creates the venv.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$REPO_ROOT/.venv"
TORCH_PINS=("torch==2.14.1" "torchvision==0.29.1")
NEEDED_FREE_MIB=8192
WITH_TEST=0
for arg in "$@"; do
    case "$arg" in
        --test) WITH_TEST=1 ;;
        *) echo "setup_env: unknown argument $arg" >&2; exit 2 ;;
    esac
done
say() { echo "[setup] $*" >&2; }
# pip's notes about configured package folders that do not exist are noise here.
pip_install() {
    "$PY" -m pip install --quiet --disable-pip-version-check "$@" 2>&1 \
        | { grep -v "^WARNING: Location '.*' is ignored" || true; } >&2
}

if [ -n "${COMFYUI_PYTHON:-}" ]; then
    PY=$(command -v "$COMFYUI_PYTHON") || { say "COMFYUI_PYTHON=$COMFYUI_PYTHON not found"; exit 1; }
    # absolute: the demo starts ComfyUI from its own folder
    PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"
    "$PY" -c 'import torch' 2>/dev/null || { say "COMFYUI_PYTHON=$PY has no torch: is it ComfyUI's Python?"; exit 1; }
    if ! "$PY" - "$REPO_ROOT/requirements.txt" <<'PYEOF' 2>/dev/null
import sys
from importlib.metadata import PackageNotFoundError, version
from packaging.requirements import Requirement

for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    requirement = Requirement(line)
    try:
        installed = version(requirement.name)
    except PackageNotFoundError:
        sys.exit(1)
    if not requirement.specifier.contains(installed, prereleases=True):
        sys.exit(1)
PYEOF
    then
        say "installing the pack's requirements.txt into $PY (its torch kept as is)"
        CONSTRAINTS=$(mktemp)
        "$PY" -c 'import torch; print("torch==" + torch.__version__.split("+")[0])' > "$CONSTRAINTS"
        pip_install -r "$REPO_ROOT/requirements.txt" -c "$CONSTRAINTS"
        rm -f "$CONSTRAINTS"
    fi
    echo "$PY"
    exit 0
fi

[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "${PYTHON:-python3}" -m venv "$VENV"; }
PY="$VENV/bin/python"

# Python 3.10 has no tomllib; scripts/pack_requirements.py falls back to tomli.
"$PY" -c 'import tomllib' 2>/dev/null || "$PY" -c 'import tomli' 2>/dev/null || pip_install tomli

LIST="$VENV/pm-requirements.txt"
CONSTRAINTS="$VENV/pm-torch-constraints.txt"
printf '%s\n' "${TORCH_PINS[@]}" > "$CONSTRAINTS"
{
    printf '%s\n' "${TORCH_PINS[@]}"
    if [ -n "${COMFYUI_PATH:-}" ]; then
        [ -f "$COMFYUI_PATH/requirements.txt" ] || { say "no requirements.txt in COMFYUI_PATH=$COMFYUI_PATH"; exit 1; }
        grep -v -E '^[[:space:]]*(torch|torchvision|torchaudio)[[:space:]]*([<>=!~;[].*)?$' "$COMFYUI_PATH/requirements.txt"
        echo "requests"  # imported by ComfyUI's app/frontend_management.py, missing from its list
    fi
    cat "$REPO_ROOT/requirements.txt"
    if [ "$WITH_TEST" = 1 ]; then
        "$PY" "$REPO_ROOT/scripts/pack_requirements.py" test
    fi
} > "$LIST.new"

# Up to date when every line was part of the last successful install (the demo's list is a
# subset of the tests' list, so running one after the other installs nothing).
if [ -f "$LIST" ] && ! grep -Fxv -f "$LIST" "$LIST.new" > /dev/null; then
    rm -f "$LIST.new"
    say "environment up to date ($VENV)"
else
    # The CUDA build of torch takes ~6 GB in the venv: say so up front, not after pip's ENOSPC.
    free_mib=$(df -Pm "$VENV" | awk 'NR == 2 {print $4}')
    if [ -n "$free_mib" ] && [ "$free_mib" -lt "$NEEDED_FREE_MIB" ]; then
        say "warning: $((free_mib / 1024)) GiB free where $VENV lives; the install needs about $((NEEDED_FREE_MIB / 1024)) GiB"
    fi
    say "installing ${TORCH_PINS[*]} (a fresh machine downloads about 3 GB here, once)"
    pip_install "${TORCH_PINS[@]}"
    say "installing ComfyUI's requirements (when COMFYUI_PATH is set) and the pack's, torch kept as is"
    pip_install -r "$LIST.new" -c "$CONSTRAINTS"
    mv "$LIST.new" "$LIST"
fi
echo "$PY"

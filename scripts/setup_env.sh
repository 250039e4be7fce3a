#!/usr/bin/env bash
# The Python environment of the tests and the demo, with one torch pin for every ComfyUI version.
#
#   scripts/setup_env.sh [--test]          creates or updates .venv in the repository and, when
#                                          COMFYUI_PATH is set, that ComfyUI version's own venv
#   COMFYUI_PYTHON=/path/to/python scripts/setup_env.sh
#                                          reuses an existing ComfyUI's Python instead
#
# .venv gets the pinned torch and torchvision (below), the pack's requirements.txt and, with
# --test, the test dependencies from pyproject.toml. ComfyUI versions need different packages
# (0.8.0 and 0.33.0 pin different frontends; 0.33 adds comfy-aimdo, comfy-kitchen, torchaudio,
# blake3, simpleeval), so with COMFYUI_PATH set, ComfyUI's requirements.txt goes into a venv of
# that version, .venv-comfyui-<version>, layered on .venv (a .pth file puts .venv's packages
# after its own): torch and the pack's packages are installed once, each ComfyUI version keeps
# its own frontend. Its requirements are installed without their torch/torchvision/torchaudio
# lines and constrained to the pins (so nothing swaps torch); a ComfyUI that lists torchaudio
# gets the pin below without dependencies (the newest torchaudio release asks for an older torch
# than the pin, and ComfyUI only imports it at start). pip runs only when a list asks for
# something its last successful install did not.
#
# With COMFYUI_PYTHON, that environment already has torch and ComfyUI's requirements (it runs
# ComfyUI): only the pack's requirements.txt is installed into it, constrained to its own torch.
#
# Prints the path of the Python to use as its last line: the ComfyUI version's venv when
# COMFYUI_PATH is set, else .venv's. PYTHON (python3) creates the venvs.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$REPO_ROOT/.venv"
TORCH_PINS=("torch==2.14.1" "torchvision==0.29.1")
TORCHAUDIO_PIN="torchaudio==2.11.0"
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

# install_list VENV_PY LIST_FILE NEW_LIST_FILE WHAT: pip install -r NEW_LIST_FILE into VENV_PY's venv
# unless every line of it was part of the last successful install there (LIST_FILE).
install_list() {
    local py=$1 list=$2 new=$3 what=$4
    if [ -f "$list" ] && ! grep -Fxv -f "$list" "$new" > /dev/null; then
        rm -f "$new"
        say "$what up to date"
        return
    fi
    say "installing $what, torch kept as is"
    PY=$py pip_install -r "$new" -c "$CONSTRAINTS"
    mv "$new" "$list"
}

[ -x "$VENV/bin/python" ] || { say "creating $VENV"; "${PYTHON:-python3}" -m venv "$VENV"; }
PY="$VENV/bin/python"

# Python 3.10 has no tomllib; scripts/pack_requirements.py falls back to tomli.
"$PY" -c 'import tomllib' 2>/dev/null || "$PY" -c 'import tomli' 2>/dev/null || pip_install tomli

CONSTRAINTS="$VENV/pm-torch-constraints.txt"
printf '%s\n' "${TORCH_PINS[@]}" > "$CONSTRAINTS"
LIST="$VENV/pm-requirements.txt"
{
    printf '%s\n' "${TORCH_PINS[@]}"
    cat "$REPO_ROOT/requirements.txt"
    if [ "$WITH_TEST" = 1 ]; then
        "$PY" "$REPO_ROOT/scripts/pack_requirements.py" test
    fi
} > "$LIST.new"
if ! [ -f "$LIST" ] || grep -Fxv -f "$LIST" "$LIST.new" > /dev/null; then
    # The CUDA build of torch takes ~6 GB in the venv: say so up front, not after pip's ENOSPC.
    free_mib=$(df -Pm "$VENV" | awk 'NR == 2 {print $4}')
    if [ -n "$free_mib" ] && [ "$free_mib" -lt "$NEEDED_FREE_MIB" ]; then
        say "warning: $((free_mib / 1024)) GiB free where $VENV lives; the install needs about $((NEEDED_FREE_MIB / 1024)) GiB"
    fi
    say "installing ${TORCH_PINS[*]} (a fresh machine downloads about 3 GB here, once)"
    pip_install "${TORCH_PINS[@]}"
fi
install_list "$PY" "$LIST" "$LIST.new" "the pack's requirements ($VENV)"

if [ -n "${COMFYUI_PATH:-}" ]; then
    [ -f "$COMFYUI_PATH/requirements.txt" ] || { say "no requirements.txt in COMFYUI_PATH=$COMFYUI_PATH"; exit 1; }
    COMFYUI_VERSION=$(sed -n 's/^__version__ *= *"\(.*\)".*/\1/p' "$COMFYUI_PATH/comfyui_version.py" 2>/dev/null || true)
    [ -n "$COMFYUI_VERSION" ] || { say "no __version__ in $COMFYUI_PATH/comfyui_version.py"; exit 1; }
    COMFY_VENV="$REPO_ROOT/.venv-comfyui-$COMFYUI_VERSION"
    if [ ! -x "$COMFY_VENV/bin/python" ]; then
        say "creating $COMFY_VENV (ComfyUI $COMFYUI_VERSION's requirements, on top of .venv)"
        "${PYTHON:-python3}" -m venv "$COMFY_VENV"
    fi
    BASE_SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    COMFY_SITE=$("$COMFY_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$BASE_SITE" > "$COMFY_SITE/pm-base-venv.pth"
    COMFY_LIST="$COMFY_VENV/pm-requirements.txt"
    {
        grep -v -E '^[[:space:]]*(torch|torchvision|torchaudio)[[:space:]]*([<>=!~;[].*)?$' "$COMFYUI_PATH/requirements.txt"
        echo "requests"  # imported by ComfyUI's app/frontend_management.py, missing from 0.8's list
    } > "$COMFY_LIST.new"
    if grep -q -E '^[[:space:]]*torchaudio' "$COMFYUI_PATH/requirements.txt"; then
        "$COMFY_VENV/bin/python" -c 'import torchaudio' 2>/dev/null \
            || PY="$COMFY_VENV/bin/python" pip_install --no-deps "$TORCHAUDIO_PIN"
    fi
    install_list "$COMFY_VENV/bin/python" "$COMFY_LIST" "$COMFY_LIST.new" "ComfyUI $COMFYUI_VERSION's requirements ($COMFY_VENV)"
    PY="$COMFY_VENV/bin/python"
fi
echo "$PY"

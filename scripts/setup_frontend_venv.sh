#!/usr/bin/env bash
# A ComfyUI version's venv with another frontend: an overlay venv that holds only
# comfyui-frontend-package at that version and sees everything else through the version's venv.
#
#   COMFYUI_PATH=/path/to/ComfyUI scripts/setup_frontend_venv.sh 1.58.1
#
# Uses .venv-comfyui-<version> (made by scripts/setup_env.sh --test when missing), then makes
# .venv-comfyui-<version>-frontend-<frontend>: its site-packages holds the frontend package and a
# .pth file whose single line is `import site; site.addsitedir("<the version venv's
# site-packages>")` (a plain path line would not follow that venv's own .pth layers, which put
# .venv's torch behind it). Its own site-packages comes first, so ComfyUI serves the overlay's
# frontend; the version's venv is never modified. Prints the overlay's Python as its last line.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
FRONTEND=${1:-}
[[ "$FRONTEND" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "usage: COMFYUI_PATH=... $0 FRONTEND_VERSION (e.g. 1.58.1)" >&2; exit 2; }
[ -n "${COMFYUI_PATH:-}" ] || { echo "setup_frontend_venv: set COMFYUI_PATH" >&2; exit 2; }
say() { echo "[setup] $*" >&2; }

VERSION=$(sed -n 's/^__version__ *= *"\(.*\)".*/\1/p' "$COMFYUI_PATH/comfyui_version.py" 2>/dev/null || true)
[ -n "$VERSION" ] || { echo "setup_frontend_venv: no __version__ in $COMFYUI_PATH/comfyui_version.py" >&2; exit 1; }
BASE_PY="$REPO_ROOT/.venv-comfyui-$VERSION/bin/python"
# scripts/test.sh (and CI's tests stage) keeps that venv up to date; made here only when missing
[ -x "$BASE_PY" ] || BASE_PY=$(bash "$REPO_ROOT/scripts/setup_env.sh" --test | tail -n 1)
OVERLAY="$REPO_ROOT/.venv-comfyui-$VERSION-frontend-$FRONTEND"
if [ ! -x "$OVERLAY/bin/python" ]; then
    say "creating $OVERLAY (comfyui-frontend-package $FRONTEND over $(dirname "$(dirname "$BASE_PY")"))"
    "$BASE_PY" -m venv --without-pip "$OVERLAY"  # the same Python as the version's venv
fi
BASE_SITE=$("$BASE_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
OVERLAY_SITE=$("$OVERLAY/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
printf 'import site; site.addsitedir(%s)\n' "$("$BASE_PY" -c 'import json, sys; print(json.dumps(sys.argv[1]))' "$BASE_SITE")" \
    > "$OVERLAY_SITE/pm-comfyui-venv.pth"
installed=$("$OVERLAY/bin/python" - "$OVERLAY_SITE" <<'PYEOF'
import sys
from importlib.metadata import PackageNotFoundError, distribution

try:
    dist = distribution("comfyui-frontend-package")
    # only the overlay's own copy counts, not the one the version's venv shows through
    print(dist.version if str(dist.locate_file("")).startswith(sys.argv[1]) else "")
except PackageNotFoundError:
    print("")
PYEOF
)
if [ "$installed" != "$FRONTEND" ]; then
    say "installing comfyui-frontend-package==$FRONTEND into $OVERLAY"
    "$BASE_PY" -m pip install --quiet --disable-pip-version-check --no-deps --upgrade \
        --target "$OVERLAY_SITE" "comfyui-frontend-package==$FRONTEND" 2>&1 \
        | { grep -v "^WARNING: Location '.*' is ignored" || true; } >&2
fi
echo "$OVERLAY/bin/python"

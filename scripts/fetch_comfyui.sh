#!/usr/bin/env bash
# A pinned ComfyUI for a user who has none yet (scripts/demo.sh without COMFYUI_PATH).
#
#   scripts/fetch_comfyui.sh [DEST]          DEST defaults to .demo/comfyui in the repository
#
# COMFYUI_SOURCE says where from: an archive URL (default: ComfyUI's source archive of the tag
# v$COMFYUI_PIN on GitHub), a local .tar.gz/.tgz, or a local ComfyUI folder (copied). An archive may
# hold the tree under one top folder (as GitHub's do). What arrives must be ComfyUI $COMFYUI_PIN
# (its comfyui_version.py), else it is refused and DEST is left as it was. A DEST that already
# holds that version is kept (no download). Prints DEST's absolute path as its last line.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
COMFYUI_PIN=${COMFYUI_PIN:-0.33.0}
DEST=${1:-$REPO_ROOT/.demo/comfyui}
SOURCE=${COMFYUI_SOURCE:-https://github.com/comfyanonymous/ComfyUI/archive/refs/tags/v$COMFYUI_PIN.tar.gz}
say() { echo "[fetch] $*" >&2; }
die() { echo "[fetch] error: $*" >&2; exit 1; }
version_of() { sed -n 's/^__version__ *= *"\(.*\)".*/\1/p' "$1/comfyui_version.py" 2>/dev/null || true; }

mkdir -p "$(dirname "$DEST")"
DEST="$(cd "$(dirname "$DEST")" && pwd)/$(basename "$DEST")"
if [ -f "$DEST/main.py" ] && [ "$(version_of "$DEST")" = "$COMFYUI_PIN" ]; then
    say "ComfyUI $COMFYUI_PIN already in $DEST"
    echo "$DEST"
    exit 0
fi

WORK=$(mktemp -d "$(dirname "$DEST")/.fetch-comfyui.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/tree"
case "$SOURCE" in
    http://*|https://*)
        say "downloading ComfyUI $COMFYUI_PIN from $SOURCE"
        python3 - "$SOURCE" "$WORK/comfyui.tar.gz" <<'PYEOF' || die "download failed: $SOURCE (set COMFYUI_SOURCE to an archive or a folder you have)"
import shutil, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as response, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(response, out)
PYEOF
        tar -xzf "$WORK/comfyui.tar.gz" -C "$WORK/tree" ;;
    *.tar.gz|*.tgz)
        [ -f "$SOURCE" ] || die "no archive at COMFYUI_SOURCE=$SOURCE"
        say "unpacking $SOURCE"
        tar -xzf "$SOURCE" -C "$WORK/tree" ;;
    *)
        [ -f "$SOURCE/main.py" ] || die "COMFYUI_SOURCE=$SOURCE is neither an archive nor a ComfyUI folder"
        say "copying $SOURCE"
        cp -a "$SOURCE/." "$WORK/tree/" ;;
esac

ROOT="$WORK/tree"
if [ ! -f "$ROOT/main.py" ]; then
    tops=("$ROOT"/*/)
    [ "${#tops[@]}" -eq 1 ] && [ -f "${tops[0]}main.py" ] || die "no ComfyUI (main.py) in $SOURCE"
    ROOT="${tops[0]%/}"
fi
found=$(version_of "$ROOT")
[ "$found" = "$COMFYUI_PIN" ] || die "$SOURCE holds ComfyUI ${found:-of no known version}, not the pinned $COMFYUI_PIN"
rm -rf "$DEST"
mv "$ROOT" "$DEST"
say "ComfyUI $COMFYUI_PIN in $DEST"
echo "$DEST"

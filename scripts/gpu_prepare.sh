#!/usr/bin/env bash
# Prepare what scripts/gpu_check.sh needs on a GPU machine without network, in the ignored folder
# .gpu/ of this checkout (it travels with the checkout; 64 MiB at most in all):
#   .gpu/comfyui-0.8    ComfyUI 0.8 sources   (from SHARED/comfyui, without .git)
#   .gpu/comfyui-0.33   ComfyUI 0.33 sources  (from SHARED/comfyui-0.33, without .git)
#   .gpu/wheels/        the wheels that machine lacks (docs: the GPU machine notes), for Python 3.12
#   .gpu/stubs/av/      an import-only stand-in for PyAV (35 MB, too large to carry; no workflow
#                       here decodes video)
#   .gpu/frontend/      a folder holding an index.html, for ComfyUI's --front-end-root
#   .gpu/kitchen/       comfy-kitchen's Python code without its native backends (the wheel is 68 MB,
#                       the code 0.8 MB): ComfyUI 0.33 imports it at start, and without the
#                       native libraries it runs its eager (plain torch) backend
# Run here, once, with network:  bash scripts/gpu_prepare.sh [SHARED]   (SHARED: the folder holding
# comfyui and comfyui-0.33; default: ../shared beside the checkout, then ../../shared).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
SHARED=${1:-}
if [ -z "$SHARED" ]; then
  for candidate in ../shared ../../shared; do
    if [ -d "$candidate/comfyui" ]; then SHARED=$candidate; break; fi
  done
fi
[ -n "$SHARED" ] && [ -d "$SHARED/comfyui" ] || { echo "no ComfyUI sources found: give the shared folder" >&2; exit 2; }
PIP=${PIP:-python3 -m pip}
mkdir -p .gpu/wheels .gpu/stubs/av .gpu/frontend

copy_sources() {  # copy_sources SRC DEST: the whole snapshot (its models/ holds only configs and
  # placeholders, a few hundred KB) without .git and bytecode caches
  rm -rf "$2"
  mkdir -p "$2"
  tar -C "$1" --exclude=.git --exclude=__pycache__ --exclude='*.pyc' -cf - . | tar -C "$2" -xf -
}
copy_sources "$SHARED/comfyui" .gpu/comfyui-0.8
[ -d "$SHARED/comfyui-0.33" ] && copy_sources "$SHARED/comfyui-0.33" .gpu/comfyui-0.33

# ComfyUI 0.8's and the tests' missing packages, then 0.33's (comfy-aimdo, blake3, simpleeval).
WHEELS=(torchsde trampoline alembic Mako SQLAlchemy greenlet pydantic pydantic-core pydantic-settings
  python-dotenv typing-inspection annotated-types "typing-extensions>=4.16" jsonschema referencing
  rpds-py jsonschema-specifications websocket-client pytest-asyncio pytest-aiohttp
  comfy-aimdo blake3 simpleeval)
PLATFORMS=()
for n in 17 24 26 27 28 31 34; do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform linux_x86_64 --platform any)
for wheel in "${WHEELS[@]}"; do
  $PIP download --quiet --no-deps --only-binary=:all: --python-version 3.12 "${PLATFORMS[@]}" \
    -d .gpu/wheels "$wheel" || echo "warning: no wheel for $wheel" >&2
done

# comfy-kitchen, at the version ComfyUI 0.33 pins, as code only
KITCHEN=$(grep -E '^comfy-kitchen' "$SHARED/comfyui-0.33/requirements.txt" 2>/dev/null | head -1 || true)
if [ -n "$KITCHEN" ]; then
  KITCHEN_TMP=$(mktemp -d)
  $PIP download --quiet --no-deps --only-binary=:all: --python-version 3.12 "${PLATFORMS[@]}" \
    -d "$KITCHEN_TMP" "$KITCHEN" || echo "warning: no wheel for $KITCHEN" >&2
  rm -rf .gpu/kitchen && mkdir -p .gpu/kitchen
  for wheel in "$KITCHEN_TMP"/*.whl; do
    [ -f "$wheel" ] && python3 -c "import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if not n.endswith('.so')])" "$wheel" .gpu/kitchen
  done
  rm -rf "$KITCHEN_TMP"
fi

cat > .gpu/stubs/av/__init__.py <<'PY'
"""Import-only stand-in for PyAV on the GPU machine: ComfyUI imports av and some of its submodules at
start for its video types; nothing the GPU check runs decodes video. Every name is a class (usable
as a base, in annotations and isinstance), every submodule is made on demand; using one raises."""

import importlib.abc
import importlib.machinery
import sys
import types


def _missing(name):
    def refuse(cls, *args, **kwargs):
        raise RuntimeError(f"{name}: PyAV is not installed on this machine")

    return type(name.rsplit(".", 1)[-1], (), {"__new__": refuse, "__module__": name.rsplit(".", 1)[0]})


def _module_getattr(module_name):
    def getattr_(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _missing(f"{module_name}.{attr}")

    return getattr_


class _Submodules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("av."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _module_getattr(spec.name)
        return module

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Submodules())
__getattr__ = _module_getattr("av")
PY
echo '<!doctype html><title>ComfyUI (headless GPU check)</title>' > .gpu/frontend/index.html
du -sh .gpu | sed 's/^/carried: /'
echo "done: run the check there with: bash scripts/gpu_check.sh (carry .gpu)"

#!/usr/bin/env bash
# Tools the installation and Prometheus tests drive (tests/comfyui/test_packaging.py,
# tests/comfyui/test_prometheus_real.py); in CI those tests fail, not skip, when a tool is missing.
#   prometheus  Debian's package (/usr/bin/prometheus), installed with apt-get when missing
#   comfy-cli   in its own venv .venv-comfy-cli/ (gitignored), which the test finds by itself
# Idempotent: installs only what is missing, runs apt-get update only when apt-get has work.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# The version the packaging test was written against (archive rules: git-tracked files minus
# .comfyignore); override to try another.
COMFY_CLI_VERSION=${COMFY_CLI_VERSION:-1.23.0}
COMFY_VENV=.venv-comfy-cli

packages=()
[ -x /usr/bin/prometheus ] || packages+=(prometheus)
command -v git >/dev/null 2>&1 || packages+=(git)  # comfy node pack archives git-tracked files
if [ ! -x "$COMFY_VENV/bin/python" ] && ! "$PYTHON" -c "import ensurepip" >/dev/null 2>&1; then
  packages+=(python3-venv)  # Debian's python3 creates venvs only with it
fi

if [ "${#packages[@]}" -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "install_tools: need root or sudo for apt-get install ${packages[*]}" >&2; exit 1; }
    sudo=(sudo)
  fi
  echo "== apt-get install ${packages[*]}"
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${packages[@]}"
fi

if ! "$COMFY_VENV/bin/python" -c "import comfy_cli" >/dev/null 2>&1 || [ ! -x "$COMFY_VENV/bin/comfy" ]; then
  echo "== comfy-cli $COMFY_CLI_VERSION into $COMFY_VENV"
  "$PYTHON" -m venv --clear "$COMFY_VENV"
  "$COMFY_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "comfy-cli==$COMFY_CLI_VERSION"
fi

/usr/bin/prometheus --version 2>&1 | head -n 1
echo "comfy-cli $("$COMFY_VENV/bin/python" -c 'from importlib.metadata import version; print(version("comfy-cli"))')"
echo "export PROMETHEUS=/usr/bin/prometheus COMFY_CLI=$PWD/$COMFY_VENV/bin/comfy  # optional: the tests look there"

#!/usr/bin/env bash
# Pipeline Monitor demo: a ComfyUI server with this pack, tiny model files and one profiled run.
#
#   [COMFYUI_PATH=/path/to/ComfyUI] scripts/demo.sh [--exit-after-run] [--full-size]
#
# Without COMFYUI_PATH, a pinned ComfyUI (0.33.0) is fetched into .demo/comfyui first
# (scripts/fetch_comfyui.sh: COMFYUI_SOURCE names another archive or folder to take it from).
#
# --full-size: also generates a real-size SD1.5-architecture checkpoint (~2 GB, random weights)
#    and a rank-32 kohya LoRA into .demo/models (scripts/make_models.py, once, about a minute)
#    and queues example_workflows/api/text_to_image_lora_monitor_full_size.json (64x64, 2 steps on the CPU)
#    instead of the tiny demo workflow.
#
# 1. Sets up the Python that runs ComfyUI (scripts/setup_env.sh): by default .venv in the repo,
#    with the pinned torch and torchvision (used on the CPU: the server runs with --cpu),
#    ComfyUI's requirements.txt (torch kept as is) and the pack's requirements.txt; skipped when
#    nothing changed. COMFYUI_PYTHON=/path/to/python reuses the Python an existing ComfyUI runs
#    with instead and only adds the pack's requirements.txt to it (no new venv, no torch download).
# 2. Makes the ComfyUI base folder .demo/: custom_nodes/pipeline-monitor -> this repo, tiny WAN 2.1
#    model + VAE files (scripts/make_tiny_models.py) and the example workflow in the user's
#    workflow list.
# 3. Starts ComfyUI on 127.0.0.1:$PORT (default 8188, CPU, log in .demo/comfyui.log), queues
#    example_workflows/api/models_profile_demo.json, prints the report's URL and a summary, then keeps the
#    server running until Ctrl-C. DEMO_EXIT_AFTER_RUN=1 (or --exit-after-run) stops it after the
#    first report; the exit status is then 0 only if the run succeeded.
#
# Environment: COMFYUI_PATH (optional, see above), COMFYUI_SOURCE (see above), COMFYUI_PYTHON (optional, see 1.), PORT (8188),
# PYTHON (python3, used to create the venv).
# Re-runnable: every step keeps what is already there.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PORT=${PORT:-8188}
EXIT_AFTER_RUN=${DEMO_EXIT_AFTER_RUN:-0}
FULL_SIZE=0
WORKFLOW_API=example_workflows/api/models_profile_demo.json
RUN_TIMEOUT_S=120
DEMO="$REPO_ROOT/.demo"
URL="http://127.0.0.1:$PORT"

for arg in "$@"; do
    case "$arg" in
        --exit-after-run) EXIT_AFTER_RUN=1 ;;
        --full-size) FULL_SIZE=1; RUN_TIMEOUT_S=300; WORKFLOW_API=example_workflows/api/text_to_image_lora_monitor_full_size.json ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown argument: $arg (see --help)" >&2; exit 2 ;;
    esac
done

say() { echo "[demo] $*"; }
die() { echo "[demo] error: $*" >&2; exit 1; }

if [ -z "${COMFYUI_PATH:-}" ]; then
    say "no COMFYUI_PATH: using the pinned ComfyUI in .demo/comfyui (set COMFYUI_PATH to use your own)"
    COMFYUI_PATH=$(bash "$REPO_ROOT/scripts/fetch_comfyui.sh" "$DEMO/comfyui" | tail -n 1) \
        || die "could not fetch ComfyUI; set COMFYUI_PATH to a ComfyUI checkout (0.8.0 to 0.33.0)"
fi
[ -f "$COMFYUI_PATH/main.py" ] || die "no main.py in COMFYUI_PATH=$COMFYUI_PATH"
COMFYUI_PATH=$(cd "$COMFYUI_PATH" && pwd)
export COMFYUI_PATH

# -- 1. Python environment --------------------------------------------------------------------------
# .venv with the pinned torch, ComfyUI's requirements and the pack's (scripts/setup_env.sh), or
# COMFYUI_PYTHON's own environment with only the pack's requirements.txt added.
PY=$(bash "$REPO_ROOT/scripts/setup_env.sh" | tail -n 1)

# -- 2. ComfyUI base folder ------------------------------------------------------------------------
mkdir -p "$DEMO/custom_nodes" "$DEMO/models" "$DEMO/input" "$DEMO/output" "$DEMO/user/default/workflows"
ln -sfn "$REPO_ROOT" "$DEMO/custom_nodes/pipeline-monitor"
"$PY" "$REPO_ROOT/scripts/make_tiny_models.py" "$DEMO" | sed 's/^/[demo] /'
if [ "$FULL_SIZE" = "1" ]; then
    "$PY" "$REPO_ROOT/scripts/make_models.py" "$DEMO" --full-size | sed 's/^/[demo] /'
fi
cp "$REPO_ROOT/example_workflows/models_profile_demo.json" "$DEMO/user/default/workflows/"

# -- 3. server, one profiled run ---------------------------------------------------------------------
answers() { "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/system_stats", timeout=2)' "$URL" 2>/dev/null; }
answers && die "something already answers at $URL: stop it or choose another PORT"

LOG="$DEMO/comfyui.log"
say "starting ComfyUI at $URL (log: $LOG)"
(cd "$COMFYUI_PATH" && exec "$PY" main.py --cpu --listen 127.0.0.1 --port "$PORT" --base-directory "$DEMO" \
    --database-url sqlite:///:memory: --disable-api-nodes) > "$LOG" 2>&1 &
SERVER_PID=$!
stop_server() {
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        say "stopping ComfyUI (pid $SERVER_PID)"
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
}
trap stop_server EXIT
trap 'exit 130' INT TERM

for _ in $(seq 1 240); do
    answers && break
    kill -0 "$SERVER_PID" 2>/dev/null || { tail -n 40 "$LOG" >&2; die "ComfyUI exited while starting"; }
    sleep 0.5
done
answers || { tail -n 40 "$LOG" >&2; die "ComfyUI did not answer within 120 s"; }
say "ComfyUI is up; queuing $WORKFLOW_API"

set +e
"$PY" "$REPO_ROOT/scripts/queue_workflow.py" --timeout "$RUN_TIMEOUT_S" "$URL" "$REPO_ROOT/$WORKFLOW_API"
RUN_STATUS=$?
set -e

if [ "$EXIT_AFTER_RUN" = "1" ]; then
    exit "$RUN_STATUS"
fi
say "ComfyUI keeps running at $URL (open the UI; the workflow is in the Workflows list). Ctrl-C stops it."
wait "$SERVER_PID"

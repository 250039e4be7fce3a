#!/usr/bin/env bash
# Run ComfyUI's own execution test suite (tests/execution/test_execution.py, 4 cache
# configurations, each starting its own server from the ComfyUI tree) twice: as is, then with
# this pack loaded and its per-node profile on. Exit 1 if the per-test outcomes or the
# pass/fail/skip counts differ, 2 on a setup problem, 0 when both runs agree.
#
# Usage: COMFYUI_PATH=/path/to/ComfyUI [PYTHON=python] [PORT=8410] scripts/comfyui_execution_suite.sh [pytest args, e.g. -k lazy]
#
# PYTHON must have ComfyUI's requirements plus pytest and websocket-client; its folder is put
# first on PATH because the suite starts its servers as plain `python main.py`.
#
# COMFYUI_PATH is only read: the suite writes into the tree it runs from (its servers' database
# in user/, temp/, the pack's symlink in custom_nodes/), so it runs in a copy of the tree made in a
# temporary folder. The pack is loaded through a symlink custom_nodes/pipeline-monitor-suite-run
# in that copy, present only during the second run; user/ and temp/ are removed after each run so
# both runs start from the same state. Outputs go to the temporary folder (pytest --output_dir).
#
# Proof that the pack loaded: the servers' "Import times for custom nodes" lines (once per
# configuration), a poll of /pipeline_monitor/runs while the suite runs, and the run reports the
# pack wrote under <output_dir>/pipeline_monitor/reports.

set -u

if [ -z "${COMFYUI_PATH:-}" ] || [ ! -f "${COMFYUI_PATH}/tests/execution/test_execution.py" ]; then
    echo "COMFYUI_PATH must point to a ComfyUI checkout with tests/execution/test_execution.py" >&2
    exit 2
fi
COMFYUI_PATH=$(cd "$COMFYUI_PATH" && pwd)
PYTHON=${PYTHON:-python}
PORT=${PORT:-8410}
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LINK_NAME=pipeline-monitor-suite-run

PYTHON_BIN=$(command -v "$PYTHON") || { echo "python not found: $PYTHON" >&2; exit 2; }
# absolute, since the suite runs from the copy of the tree
PYTHON_BIN="$(cd "$(dirname "$PYTHON_BIN")" && pwd)/$(basename "$PYTHON_BIN")"
export PATH="$(dirname "$PYTHON_BIN"):$PATH"
if ! python -c "import pytest, websocket" 2>/dev/null; then
    echo "$(command -v python) lacks pytest or websocket-client" >&2
    exit 2
fi
for d in "$COMFYUI_PATH"/custom_nodes/*; do
    if [ -e "$d/__init__.py" ] && [ "$(cd "$d" && pwd -P)" = "$(cd "$REPO_ROOT" && pwd -P)" ]; then
        echo "the pack is already installed as $d; the 'as is' run would include it" >&2
        exit 2
    fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pm-exec-suite.XXXXXX")
TREE="$WORK/comfyui"
cp -a "$COMFYUI_PATH" "$TREE"
chmod -R u+w "$TREE"
rm -rf "$TREE/user" "$TREE/temp"
# The suite gives each server 20 s to answer; compiled bytecode makes a cold start shorter.
python -m compileall -q -j 0 "$TREE" > /dev/null 2>&1 || true
LINK="$TREE/custom_nodes/$LINK_NAME"
POLL_PID=

tidy_tree() {
    rm -rf "$TREE/user" "$TREE/temp"
}
cleanup() {
    if [ -n "$POLL_PID" ]; then kill "$POLL_PID" 2>/dev/null; fi
    rm -rf "$TREE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Poll /pipeline_monitor/runs while the suite runs; keep the HTTP codes seen and the largest run count.
cat > "$WORK/poll_runs.py" <<'EOF'
import json, sys, time, urllib.error, urllib.request
port, out = sys.argv[1], sys.argv[2]
seen = {"codes": {}, "max_runs": 0, "profile_enabled": None}
while True:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/pipeline_monitor/runs", timeout=2) as r:
            data = json.loads(r.read())
            code = 200
            if len(data.get("runs", [])) >= seen["max_runs"]:
                seen["max_runs"] = len(data.get("runs", []))
                seen["profile_enabled"] = data.get("profile_enabled")
    except urllib.error.HTTPError as exc:
        code = exc.code
    except Exception:
        code = "down"
    seen["codes"][str(code)] = seen["codes"].get(str(code), 0) + 1
    with open(out, "w") as f:
        json.dump(seen, f)
    time.sleep(1)
EOF

# run_suite LABEL: runs pytest; leaves LABEL.log, LABEL.outcomes, LABEL.counts, LABEL.secs in $WORK
run_suite() {
    local label=$1; shift
    local start=$SECONDS
    mkdir -p "$WORK/out-$label"
    python "$WORK/poll_runs.py" "$PORT" "$WORK/$label.poll.json" & POLL_PID=$!
    (cd "$TREE" && python -m pytest tests/execution/test_execution.py --port "$PORT" \
        --output_dir "$WORK/out-$label" --skip-timing-checks -p no:cacheprovider -rA "$@") > "$WORK/$label.log" 2>&1
    echo $? > "$WORK/$label.rc"
    kill "$POLL_PID" 2>/dev/null; wait "$POLL_PID" 2>/dev/null; POLL_PID=
    echo $((SECONDS - start)) > "$WORK/$label.secs"
    tidy_tree
    # per-test outcomes from the -rA short summary, and the final summary line
    grep -E '^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) ' "$WORK/$label.log" | sed -E 's/ - .*$//' | sort > "$WORK/$label.outcomes"
    grep -E '[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed|deselected)' "$WORK/$label.log" | grep -E ' in [0-9.]+s' | tail -1 \
        | sed -E 's/^=+ //; s/ =+$//' > "$WORK/$label.summary"
    grep -oE '[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed|deselected)' "$WORK/$label.summary" \
        | sed -E 's/errors?$/error/' | sort -k2 > "$WORK/$label.counts"
}

echo "ComfyUI: $COMFYUI_PATH   pack: $REPO_ROOT   port: $PORT   logs: $WORK"
echo "[1/2] suite as is..."
unset PIPELINE_MONITOR_PROFILE
run_suite base "$@"
echo "      $(cat "$WORK/base.summary") (pytest rc $(cat "$WORK/base.rc"), $(cat "$WORK/base.secs") s)"

echo "[2/2] suite with the pack loaded (profile on)..."
ln -s "$REPO_ROOT" "$LINK"
export PIPELINE_MONITOR_PROFILE=1
run_suite pack "$@"
rm -f "$LINK"
echo "      $(cat "$WORK/pack.summary") (pytest rc $(cat "$WORK/pack.rc"), $(cat "$WORK/pack.secs") s)"

status=0
servers=$(grep -c 'Running server with args' "$WORK/pack.log")
loaded=$(grep -E "seconds: .*custom_nodes/$LINK_NAME\$" "$WORK/pack.log" | grep -vc 'IMPORT FAILED')
failed_imports=$(grep -c "IMPORT FAILED.*$LINK_NAME" "$WORK/pack.log")
in_base=$(grep -c "$LINK_NAME" "$WORK/base.log")
grep -q '"200"' "$WORK/base.poll.json" 2>/dev/null && in_base=$((in_base + 1))
reports=$(find "$WORK/out-pack/pipeline_monitor/reports" -name '*.json' 2>/dev/null | wc -l)
echo "pack imported by $loaded of $servers servers (failed imports: $failed_imports; signs of it in the 'as is' run: $in_base)"
echo "run reports written by the pack: $reports"
echo "/pipeline_monitor/runs poll, as is: $(cat "$WORK/base.poll.json" 2>/dev/null)"
echo "/pipeline_monitor/runs poll, with pack: $(cat "$WORK/pack.poll.json" 2>/dev/null)"
if [ "$loaded" -lt 1 ] || [ "$loaded" -ne "$servers" ] || [ "$failed_imports" -ne 0 ] || [ "$in_base" -ne 0 ] || [ "$reports" -lt 1 ]; then
    echo "FAIL: the pack did not load in every server of the second run (or leaked into the first)"
    status=1
fi
if ! diff -u "$WORK/base.counts" "$WORK/pack.counts" > "$WORK/counts.diff" || [ ! -s "$WORK/base.counts" ]; then
    echo "FAIL: the counts differ:"; cat "$WORK/counts.diff"; status=1
fi
if ! diff -u "$WORK/base.outcomes" "$WORK/pack.outcomes" > "$WORK/outcomes.diff"; then
    echo "FAIL: per-test outcomes differ:"; cat "$WORK/outcomes.diff"; status=1
fi
[ "$status" = 0 ] && echo "OK: identical results with and without the pack ($(tr '\n' ' ' < "$WORK/base.counts"))"
echo "logs kept in $WORK"
exit "$status"

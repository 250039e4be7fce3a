#!/usr/bin/env bash
# Everything the pack checks on a GPU, in one command and one summary (issue 25):
#
#     bash scripts/gpu_check.sh [--no-unit] [--quick]
#
# No network; under 6 minutes on one H100/H200. Steps, each with a time limit, its log in
# .gpu/out/gpu_check (with $OUT set: the summary and logs.tar.gz in $OUT/gpu_check):
#   1. the full-size SD1.5 files generated in the background (scripts/make_models.py, into .gpu/base)
#   2. the `gpu` tests (tests/gpu), then tests/gpu/test_gpu_dynamic_vram.py (issue 24: the example
#      pipeline on ComfyUI 0.33 with dynamic VRAM on and with --disable-dynamic-vram, the VAE monitor
#      forced to strategy=cpu, loaded bytes against patcher.loaded_size()) and
#      tests/gpu/test_gpu_vae_cap.py (issue 26: a VAE encode under
#      torch.cuda.set_per_process_memory_fraction, the out-of-memory counted), when present
#   3. the CUDA benches: bench.tensor_stats, bench.dump_stall and bench.lora_analysis with --device cuda
#   4. the GPU pipeline bench: bench.full_size_pipeline --device cuda (512x512, 20 steps), then
#      bench.lora_step_profile --device cuda (the LoRA monitor's step, timed and profiled) and
#      bench.lora_first_file --device cuda (a first LoRA file's time inside the prompt)
#   5. the unit suite (pytest-xdist when installed), with the GPU visible; again with
#      CUDA_VISIBLE_DEVICES="" when time is left (--no-unit skips both)
# Without CUDA it says so, skips every GPU-only step with a verdict saying why, and runs the rest.
# What it needs that the machine lacks comes in .gpu/ (scripts/gpu_prepare.sh makes it): ComfyUI
# 0.8 and 0.33 sources, wheels, an import-only stand-in for PyAV, comfy-kitchen's code without its
# native backends and a folder for --front-end-root.
# Environment it sets for the tests: COMFYUI_PATH (0.8), COMFYUI_033_PATH (0.33),
# PIPELINE_MONITOR_COMFYUI_ARGS (extra ComfyUI arguments, read by tests/comfyui/conftest.py).
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
STARTED=$(date +%s)
UNIT=1
QUICK=0
for arg in "$@"; do
  case "$arg" in
    --no-unit) UNIT=0 ;;
    --quick) QUICK=1 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done
TOTAL_BUDGET_S=${PM_GPU_CHECK_BUDGET_S:-340}  # the second unit run only starts if it fits in this
# Logs are written under .gpu/out/gpu_check; where $OUT is set (the device machine's output folder,
# which brings back only a few files), the summary and one archive of the logs go there on exit.
OUTDIR=$REPO/.gpu/out/gpu_check
rm -rf "$OUTDIR" && mkdir -p "$OUTDIR"
SUMMARY=$OUTDIR/summary.txt
: > "$SUMMARY"
pack_logs() {
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT/gpu_check"
  cp "$SUMMARY" "$OUT/gpu_check/summary.txt"
  tar -C "$OUTDIR" -czf "$OUT/gpu_check/logs.tar.gz" .
}
trap pack_logs EXIT

if [ -z "${PYTHON:-}" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PYTHON=$REPO/.venv/bin/python; else PYTHON=python3; fi
fi

# -- what the machine lacks, from .gpu/ ----------------------------------------------------------
EXTRA_PATH=""
if [ -d .gpu/wheels ] && ls .gpu/wheels/*.whl > /dev/null 2>&1; then
  if [ ! -f .gpu/site/.installed ]; then
    "$PYTHON" -m pip install --quiet --no-index --no-deps --target .gpu/site .gpu/wheels/*.whl \
      > "$OUTDIR/wheels.log" 2>&1 && touch .gpu/site/.installed
  fi
  EXTRA_PATH=$REPO/.gpu/site
fi
if ! "$PYTHON" -c "import av" > /dev/null 2>&1 && [ -d .gpu/stubs ]; then
  EXTRA_PATH=$REPO/.gpu/stubs${EXTRA_PATH:+:$EXTRA_PATH}
fi
if ! "$PYTHON" -c "import comfy_kitchen" > /dev/null 2>&1 && [ -d .gpu/kitchen/comfy_kitchen ]; then
  EXTRA_PATH=${EXTRA_PATH:+$EXTRA_PATH:}$REPO/.gpu/kitchen  # ComfyUI 0.33 imports it at start
fi
export PYTHONPATH=$REPO${EXTRA_PATH:+:$EXTRA_PATH}${PYTHONPATH:+:$PYTHONPATH}
COMFY_ARGS=""
if ! "$PYTHON" -c "import comfyui_frontend_package" > /dev/null 2>&1 && [ -f .gpu/frontend/index.html ]; then
  COMFY_ARGS="--front-end-root $REPO/.gpu/frontend"
fi
export PIPELINE_MONITOR_COMFYUI_ARGS="${PIPELINE_MONITOR_COMFYUI_ARGS:-$COMFY_ARGS}"
[ -d .gpu/comfyui-0.8 ] && export COMFYUI_PATH=${COMFYUI_PATH:-$REPO/.gpu/comfyui-0.8}
[ -d .gpu/comfyui-0.33 ] && export COMFYUI_033_PATH=${COMFYUI_033_PATH:-$REPO/.gpu/comfyui-0.33}

# -- helpers ---------------------------------------------------------------------------------------
note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME TIMEOUT_S COMMAND...: runs it, its output in NAME.log; the summary gets its status, the
# pytest result line and every verdict line it printed.
step() {
  local name=$1 limit=$2
  shift 2
  local log=$OUTDIR/$name.log began rc
  began=$(date +%s)
  echo "== $name (limit ${limit} s): $*"
  timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
  rc=$?
  local took=$(( $(date +%s) - began ))
  local status="ok"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && status="TIMED OUT"
  [ $rc -ne 0 ] && [ "$status" = ok ] && status="FAILED (exit $rc)"
  # pytest exits 5 when nothing was collected (e.g. every test deselected)
  [ $rc -eq 5 ] && grep -q "no tests ran\|deselected" "$log" && status="ok (nothing collected)"
  note "step $name: $status, ${took} s"
  grep -E "^(=+ )?[0-9]+ (passed|failed|error|skipped)|^=+ .*(passed|failed|error).* =+$" "$log" | tail -1 \
    | sed 's/^/  pytest: /' | tee -a "$SUMMARY"
  grep -E "^(verdict|gpu-dynamic-vram): |^LoRA step on " "$log" | sed 's/^/  /' | tee -a "$SUMMARY"
  grep -E "^FAILED |^ERROR " "$log" | head -20 | sed 's/^/  /' | tee -a "$SUMMARY"
  pack_logs  # after every step: a run cut off by its caller still brings back what it did
  return 0
}

skip() {
  local name=$1
  shift
  note "step $name: skipped ($*)"
}

elapsed() { echo $(( $(date +%s) - STARTED )); }

# -- the machine ------------------------------------------------------------------------------------
DEVICE=$("$PYTHON" - <<'PY' 2>/dev/null
import torch

if torch.cuda.is_available():
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
PY
)
XDIST=""
"$PYTHON" -c "import xdist" > /dev/null 2>&1 && XDIST="-n $(( $(nproc) > 2 ? $(nproc) - 2 : 1 ))"
note "gpu_check: ${DEVICE:-no CUDA}; python $("$PYTHON" -c 'import sys; print(sys.version.split()[0])');" \
  "ComfyUI 0.8 ${COMFYUI_PATH:-missing}, 0.33 ${COMFYUI_033_PATH:-missing}"

QUICK_FLAG=()
[ $QUICK -eq 1 ] && QUICK_FLAG=(--quick)
GPU_STEPS="gpu tests, dynamic VRAM (0.33), VAE under a memory cap, CUDA benches, GPU pipeline bench"
if [ -n "$DEVICE" ]; then
  GEN_LOG=$OUTDIR/make_models.log
  if [ -n "${COMFYUI_PATH:-}" ]; then  # the 2 GB files, made while the GPU tests run
    (cd "$REPO" && timeout 300 "$PYTHON" scripts/make_models.py .gpu/base --full-size > "$GEN_LOG" 2>&1) &
    GEN_PID=$!
  fi
  step gpu_tests 150 "$PYTHON" -m pytest -q -m gpu tests/gpu -p no:cacheprovider \
    --ignore=tests/gpu/test_gpu_dynamic_vram.py --ignore=tests/gpu/test_gpu_vae_cap.py
  # dynamic VRAM is ComfyUI 0.33's: that test runs against the 0.33 sources, without xdist (its two
  # servers never share the GPU); its 14 verdict lines go into the summary
  if [ -n "${COMFYUI_033_PATH:-}" ]; then
    step test_gpu_dynamic_vram 180 env COMFYUI_PATH="$COMFYUI_033_PATH" \
      "$PYTHON" -m pytest -q -m gpu tests/gpu/test_gpu_dynamic_vram.py -p no:cacheprovider
  else
    skip test_gpu_dynamic_vram "no ComfyUI 0.33 sources: run scripts/gpu_prepare.sh, carry .gpu"
  fi
  if [ -f tests/gpu/test_gpu_vae_cap.py ]; then
    step test_gpu_vae_cap 150 "$PYTHON" -m pytest -q -m gpu tests/gpu/test_gpu_vae_cap.py -p no:cacheprovider
  else
    skip test_gpu_vae_cap "tests/gpu/test_gpu_vae_cap.py not in this checkout yet"
  fi
  [ -n "${GEN_PID:-}" ] && wait "$GEN_PID"
  step bench_tensor_stats 120 "$PYTHON" -m bench.tensor_stats --device cuda --pairs 5 "${QUICK_FLAG[@]}"
  step bench_dump_stall 60 "$PYTHON" -m bench.dump_stall --device cuda --pairs 5 "${QUICK_FLAG[@]}"
  step bench_lora_analysis 60 "$PYTHON" -m bench.lora_analysis --device cuda --repeats 5 "${QUICK_FLAG[@]}"
  if [ -n "${COMFYUI_PATH:-}" ]; then
    step bench_gpu_pipeline 300 "$PYTHON" -m bench.full_size_pipeline --device cuda --pairs 15 \
      --base .gpu/base "${QUICK_FLAG[@]}"
    # where the LoRA monitor's time goes on this GPU (cProfile of one step, in process)
    step lora_step_profile 120 env COMFYUI_PATH="$COMFYUI_PATH" "$PYTHON" -m bench.lora_step_profile \
      --device cuda --base .gpu/base --repeats 5
    # a first LoRA file: its time inside the prompt when its figures come after it (issue 35, <= 60 ms)
    step lora_first_file 120 env COMFYUI_PATH="$COMFYUI_PATH" "$PYTHON" -m bench.lora_first_file \
      --device cuda --base .gpu/base --repeats 5
  else
    skip bench_gpu_pipeline "no ComfyUI 0.8 sources: run scripts/gpu_prepare.sh, carry .gpu"
  fi
else
  skip "gpu-only steps" "no CUDA: $GPU_STEPS"
  note "  verdict: not met | a CUDA GPU for the GPU checks | no CUDA on this machine: GPU-only steps skipped"
fi

UNIT_ARGS=${PM_GPU_CHECK_UNIT_ARGS:-tests/unit}  # a narrower selection to try the script
if [ $UNIT -eq 1 ]; then
  UNIT_BEGAN=$(date +%s)
  step unit_suite 200 "$PYTHON" -m pytest -q $UNIT_ARGS -p no:cacheprovider $XDIST
  UNIT_TOOK=$(( $(date +%s) - UNIT_BEGAN ))
  if [ -n "$DEVICE" ] && [ $(( $(elapsed) + UNIT_TOOK + 15 )) -le "$TOTAL_BUDGET_S" ]; then
    CUDA_VISIBLE_DEVICES="" step unit_suite_gpu_hidden $(( UNIT_TOOK * 3 / 2 + 20 )) \
      "$PYTHON" -m pytest -q $UNIT_ARGS -p no:cacheprovider $XDIST
  elif [ -n "$DEVICE" ]; then
    skip unit_suite_gpu_hidden "another ${UNIT_TOOK} s would pass the ${TOTAL_BUDGET_S} s budget" \
      "(PM_GPU_CHECK_BUDGET_S raises it)"
  fi
else
  skip unit_suite "--no-unit"
fi

echo
echo "===================== gpu_check summary ($(elapsed) s) ====================="
cat "$SUMMARY"
N_NOT_MET=$(grep -c "verdict: not met" "$SUMMARY")
N_FAILED=$(grep -cE "^step .*: (FAILED|TIMED OUT)" "$SUMMARY")
echo "not met: $N_NOT_MET verdicts; failed or timed out: $N_FAILED steps; logs in $OUTDIR"
[ "$N_FAILED" -eq 0 ]

#!/usr/bin/env bash
# Characterises a CPU this project has not been measured on, within a time limit, and
# keeps the logs: what to run when a new machine is at hand for a few minutes.
#
#   OUTDIR=DIR [PY=python3] [DEADLINE_S=540] [THREADS=all] [ONLY=REGEX] bash benchmarks/new_cpu.sh
#
# Builds the extension in place against PY's torch (build folder build/newcpu), then
# runs, each step capped so that the whole run ends within DEADLINE_S seconds (a step
# that runs out of time is cut, and what it printed so far is kept; ONLY: the steps whose
# log file names match, e.g. ONLY='env|tests' (env: the build)):
#   env.txt      the CPU (lscpu), versions, the build's log, the ISA and microarchitecture
#                we detect
#   cpp.txt      the FMA peak and the in-cache micro-kernels, one thread
#                (bench_peak, bench_conv_f32, bench_bwd_weights_f32)
#   f32.txt      bench.py --dtype f32 on THREADS threads (onnxruntime too, if installed)
#   scaling.txt  scaling.py: compute-bound layers at 1, 2, 4, ... threads
#   bf16.txt     bench.py --dtype bf16
#   tests.txt    the kernel tests (pytest; -n with pytest-xdist when installed)
#   busy.txt     busy.py: slowdown with one busy competitor, ours against torch's
#   csv.tgz      the CSV files of the runs above
set -u
cd "$(dirname "$0")/.."
: "${OUTDIR:?set OUTDIR to the folder for the logs}"
PY=${PY:-python3}
DL=${DEADLINE_S:-540}
NCPU=$(nproc)
THREADS=${THREADS:-$NCPU}
T0=$(date +%s)
RES=$(mktemp -d)
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # the in-place build, without an install
# The benchmark's cases come from shared/data (TCT_SHARED_DIR, default ../shared).

# step FILE CAP_SECONDS COMMAND...: runs COMMAND for at most CAP seconds, or what is left.
step() {
  local file=$OUTDIR/$1 cap=$2
  [[ -n ${ONLY:-} && ! $1 =~ $ONLY ]] && return
  shift 2
  local left=$((DL - ($(date +%s) - T0) - 10))
  if [ "$left" -lt 20 ]; then
    echo "### skipped (no time left): $*" >>"$file"
    return
  fi
  local t=$((cap < left ? cap : left))
  echo "### $* (at $(($(date +%s) - T0)) s, cap $t s)" >>"$file"
  timeout -k 5 "$t" "$@" >>"$file" 2>&1
  echo "### rc=$? (at $(($(date +%s) - T0)) s)" >>"$file"
}

{
  lscpu
  echo
  grep -m1 -o 'flags.*' /proc/cpuinfo | tr ' ' '\n' | grep -E 'avx|amx|fma|f16c' | tr '\n' ' '
  echo
  "$PY" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__,
    "threads", torch.get_num_threads())'
  "$PY" -c 'import onnxruntime as o; print("onnxruntime", o.__version__)' 2>&1 | tail -1
  c++ --version | head -1
  cmake --version | head -1
} >"$OUTDIR/env.txt" 2>&1

step env.txt 240 env MAX_JOBS="$NCPU" TCT_BUILD_DIR="$PWD/build/newcpu" TCT_BUILD_TESTS=OFF \
  "$PY" setup.py build_ext --inplace
B=build/newcpu
if [ ! -x "$B/bench_peak" ] && [[ -z ${ONLY:-} || env =~ $ONLY ]]; then
  # The extension did not build (say, against this torch): the torch-free benchmarks still can.
  B=build/newcpu-core
  step env.txt 60 cmake -S . -B "$B" -DTCT_WITH_TORCH=OFF -DCMAKE_BUILD_TYPE=Release
  step env.txt 120 cmake --build "$B" -j "$NCPU"
fi
"$PY" -c 'import torch, torch_convtranspose as t; print("ours: isa", t.get_isa(), "uarch",
  torch.ops.torch_convtranspose.get_uarch(), "available", t.available_isas())' \
  >>"$OUTDIR/env.txt" 2>&1

step cpp.txt 8 "$B/bench_peak" 0.3 "$NCPU"
step cpp.txt 25 stdbuf -oL "$B/bench_conv_f32" 1 "" avx512
step cpp.txt 15 stdbuf -oL "$B/bench_conv_f32" 1 "" avx512_bf16
step cpp.txt 25 stdbuf -oL "$B/bench_bwd_weights_f32" 1 avx512
step f32.txt 150 "$PY" benchmarks/bench.py --threads "$THREADS" --budget 0.25 --no-memory \
  --no-progress --out "$RES/f32"
step scaling.txt 110 "$PY" benchmarks/scaling.py --budget 0.15 \
  --filter 'dcgan_512to256|2d_512to256_k4s2|unet2d_128to64|3d_unet_320|hifigan_512|resnet50|dw_up' \
  --csv "$RES/scaling.csv"
step bf16.txt 100 "$PY" benchmarks/bench.py --dtype bf16 --threads "$THREADS" --budget 0.2 \
  --no-memory --no-progress --peers none --out "$RES/bf16"
XD=$("$PY" -c 'import xdist' 2>/dev/null && echo "-n $NCPU")
# One worker per core, each on all cores' threads (oversubscribed, as CI's xdist runs are
# not): at the first failures pytest stops and names the tests (a crashed worker too, with
# a native backtrace from segv_report.c). Then once more without the tests that name AMX,
# to tell an AMX-only failure from the rest.
PRELOAD=(env)  # the test steps only
if cc -O1 -shared -fPIC -o "$RES/segv_report.so" benchmarks/segv_report.c 2>/dev/null; then
  PRELOAD=(env "LD_PRELOAD=$RES/segv_report.so${LD_PRELOAD:+:$LD_PRELOAD}")
fi
TESTS="test/test_isa.py test/test_lowp.py test/test_layout_paths.py test/test_ncx_paths.py
  test/test_plans.py test/test_fuzz.py test/test_random_oracle.py test/test_oracle.py"
# shellcheck disable=SC2086
step tests.txt 100 "${PRELOAD[@]}" "$PY" -m pytest -q -p no:cacheprovider --maxfail=3 $XD $TESTS
# shellcheck disable=SC2086
step tests.txt 60 "${PRELOAD[@]}" "$PY" -m pytest -q -p no:cacheprovider --maxfail=3 $XD -k "not amx" \
  test/test_lowp.py test/test_random_oracle.py
step busy.txt 60 "$PY" benchmarks/busy.py --threads "$THREADS" --budget 0.2 \
  --filter 'dcgan_512to256|unet2d_128to64|2d_36to4|hifigan_512'
tar czf "$OUTDIR/csv.tgz" -C "$RES" $(cd "$RES" && ls ./*.csv 2>/dev/null) 2>/dev/null
echo "done in $(($(date +%s) - T0)) s" >>"$OUTDIR/env.txt"

#!/usr/bin/env bash
# The GPU check: everything ddpd's CUDA half needs a GPU to show, in one run on a lent machine
# (one GPU; python3 holding a CUDA PyTorch >= 2.11, nvcc, CMake, ninja; no package registry).
# Sections, each time-boxed, in order; each writes its figures into OUT as they come:
#   env.txt        the machine: GPU, driver, CUDA, PyTorch, compilers, cores, the commit
#   build.txt      the core-only CUDA build of the four targets it runs, for this GPU's arch
#   tests.txt      every CUDA test (kernels against a float64 host reference, the core's CUDA
#                  path, NCCL at world size 1, two ranks on one GPU). A skip is a failure, but
#                  for the tests that need two GPUs, listed as such
#   attention.txt  FlashAttention-2 (ddpd's kernels) against PyTorch SDPA: fp32 and bf16,
#                  T 1024-4096, d 64 and 128, forward+backward ms, max error against float64
#   step.txt       one model, ddpd against PyTorch eager on ddpd's own weights: the loss of the
#                  same batch, step ms and peak memory, fp32 and bf16
#   summary.txt    one line per section, PASS or FAIL, and the total time
# Six files (a lent machine returns at most eight). The time boxes add up to 460 s: under 8
# minutes on 1 x H100 with 16 cores (206 s there, 2026-11-26). docs/building.md gives the command.
# Needs build-deps/ (scripts/stage-deps.sh, carried along): CLI11, nlohmann/json, GoogleTest.
# Usage: scripts/gpu-check.sh [OUT_DIR (default $OUT, else gpu-check-out)] [SECTION...]
#   SECTION: build, tests, attention, step (default: all; a rerun on a warm machine can name
#   fewer: the build is kept between calls)
# Exit: 0 every section passed; 1 one failed; 2 no GPU here (one line on stderr; env.txt is
# still written).
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT_DIR=${1:-${OUT:-gpu-check-out}}
export BUILD_DIR=${BUILD_DIR:-build-gpu}
# python3 holds PyTorch on a lent GPU machine; elsewhere the checkout's .venv (scripts/setup.sh).
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  python3 -c 'import torch' 2>/dev/null || [ ! -x .venv/bin/python ] || PYTHON=$PWD/.venv/bin/python
fi
export PYTHON
mkdir -p "$OUT_DIR"
summary=$OUT_DIR/summary.txt
: >"$summary"
start=$SECONDS
failed=0

# The environment; returns 2 without a usable GPU.
section_env() {
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  if command -v nvidia-smi >/dev/null; then
    echo "nvidia-smi: $(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1 | head -3)"
  else
    echo "nvidia-smi: not installed"
  fi
  echo "nvcc: $( (nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>&1 | tail -n 1)"
  echo "cmake: $(cmake --version 2>&1 | head -n 1); ninja: $(ninja --version 2>&1)"
  "$PYTHON" - <<'PY' 2>&1
import torch
print(f"python torch: {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {torch.backends.cudnn.version()}, NCCL {'.'.join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else '-'}")
print(f"torch sees {torch.cuda.device_count()} GPU(s)" + (f": {torch.cuda.get_device_name(0)}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs" if torch.cuda.is_available() else ""))
PY
  nvidia-smi -L >/dev/null 2>&1 && "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'
}

# The core-only CUDA build (no gRPC here) of what the later sections run, for this GPU only.
section_build() {
  local arch
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '. ')
  CUDACXX=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)} \
    cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDPD_CORE_ONLY=ON \
    -DDDPD_WITH_CUDA=ON -DDDPD_PYTHON="$(command -v "$PYTHON")" \
    -DDDPD_CUDA_ARCHITECTURES="$arch" -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON >/dev/null &&
    cmake --build "$BUILD_DIR" -j "$(nproc)" --target ddpd-train-cuda ddpd_cuda_core_tests \
      ddpd_cuda_kernel_tests ddpd-bench-flash-sdpa
}

# Every CUDA test, one process per test suite (a crash then names its suite; a CUDA context
# per test would cost more than the tests). A skip fails the section, except in the suites
# that need two GPUs.
section_tests() {
  local rc=0 binary suite status log=$OUT_DIR/.suite.log
  for binary in ddpd_cuda_kernel_tests ddpd_cuda_core_tests; do
    for suite in $("$BUILD_DIR/cuda/bin/$binary" --gtest_list_tests | sed -n 's/^\([^ #][^ ]*\)\.$/\1/p'); do
      echo "== $binary $suite"
      "$BUILD_DIR/cuda/bin/$binary" --gtest_color=no --gtest_filter="$suite.*" 2>&1 |
        tee "$log"
      status=${PIPESTATUS[0]}
      [ "$status" = 0 ] || { echo "FAIL: $binary $suite exited $status"; rc=1; }
      [ "$status" -lt 128 ] || name_the_crash "$BUILD_DIR/cuda/bin/$binary" "$suite"
      if grep -q '^\[  SKIPPED \] [A-Za-z]' "$log"; then
        case $suite in
          */CudaNccl | CudaNccl | CudaNcclComm) echo "skipped (needs 2 GPUs): $suite" ;;
          *) echo "FAIL: $suite skipped a test while a GPU is visible"; rc=1 ;;
        esac
      fi
    done
  done
  rm -f "$log"
  return $rc
}

# A suite's process died of a signal: each of its tests alone, to name the one that does it,
# and the first such test's stack under cuda-gdb, where the machine has it.
name_the_crash() {
  local binary=$1 suite=$2 test status first=""
  for test in $("$binary" --gtest_list_tests --gtest_filter="$suite.*" | sed -n 's/^  \([^ ]*\).*/\1/p'); do
    "$binary" --gtest_filter="$suite.$test" >/dev/null 2>&1
    status=$?
    echo "  alone: $suite.$test exited $status"
    [ "$status" -lt 128 ] || [ -n "$first" ] || first=$suite.$test
  done
  [ -n "$first" ] && command -v cuda-gdb >/dev/null || return 0
  echo "  stack of $first (cuda-gdb):"
  timeout 60 cuda-gdb -q -batch -ex run -ex bt -ex "info threads" --args "$binary" \
    --gtest_filter="$first" 2>&1 | grep -E '^#|^\*? +[0-9]+ +Thread|signal|SIG' | head -60 | sed 's/^/    /'
}

section_attention() {
  "$BUILD_DIR/cuda/bin/ddpd-bench-flash-sdpa" --dtypes bf16,fp32 --head-dims 128,64 \
    --seqs 4096,2048,1024 --batch 4 --heads 16 --reps 5
}

# ddpd-train on the small preset (12 layers, d 768, head dim 64) at context 1024, batch 8, on a
# one-window token file (every row the same window, so the peer needs no data order), saving
# the weights after 2 steps; the peer takes them and must reach ddpd's loss of step 3, then
# both are timed over 20 steps from the same start.
section_step() {
  local work=$BUILD_DIR/step-check rc=0 precision json peer
  rm -rf "$work" && mkdir -p "$work"
  "$PYTHON" -c 'import numpy as np; np.random.default_rng(7).integers(0, 10000, 1025).astype(np.uint16).tofile("'"$work"'/window.bin")'
  local common=(--model small --context 1024 --batch 8 --device cuda --data "$work/window.bin")
  printf "%-6s %12s %12s %10s %10s %10s %10s %10s\n" precision "ddpd loss" "peer loss" "rel diff" \
    "ddpd ms" "peer ms" "ddpd/peer" "ddpd MB"
  for precision in fp32 bf16; do
    "$BUILD_DIR/cuda/bin/ddpd-train" "${common[@]}" --precision $precision --steps 3 \
      --checkpoint-dir "$work/ckpt-$precision" --checkpoint-every 2 >"$work/parity-$precision.json" ||
      { echo "FAIL: ddpd-train ($precision, parity run)"; rc=1; continue; }
    json=$("$BUILD_DIR/cuda/bin/ddpd-train" "${common[@]}" --precision $precision --steps 20 \
      --warmup-steps 5 --spread-every 0 | tail -n 1) ||
      { echo "FAIL: ddpd-train ($precision, timed run)"; rc=1; continue; }
    peer=$("$PYTHON" tests/bench/step_ref_cuda.py "$work/ckpt-$precision/step-000002" \
      "$work/window.bin" 8 20 5 $precision 2>&1 | tail -n 1)
    "$PYTHON" - "$precision" "$work/parity-$precision.json" "$json" "$peer" <<'PY' || rc=1
import json, sys
precision, parity_file, timed, peer = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
fields = dict(kv.split("=", 1) for kv in peer.split(" settings=")[0].split())
ours = json.loads(open(parity_file).read().strip().splitlines()[-1])["steps"][2]["loss"]
theirs = float(fields["loss"])
diff = abs(ours - theirs) / theirs
# fp32: the same float32 arithmetic in other kernels and orders, about 1e-6 relative per
# operation over a few dozen layers of operations; bf16 autocast rounds activations to 2^-8.
bound = 1e-4 if precision == "fp32" else 2 ** -6
ms = timed["summary"]["median_step_seconds"] * 1e3
mb = timed["memory"]["after_step"]["peak_bytes"] / 2 ** 20
print(f"{precision:<6} {ours:12.6f} {theirs:12.6f} {diff:10.2e} {ms:10.2f} "
      f"{float(fields['median_step_ms']):10.2f} {ms / float(fields['median_step_ms']):10.3f} {mb:10.1f}")
print(f"   peer: {peer}")
print(f"   peer peak {fields['peak_mb']} MB; loss bound {bound:.0e}: {'PASS' if diff <= bound else 'FAIL'}")
sys.exit(0 if diff <= bound else 1)
PY
  done
  return $rc
}
export -f section_env section_build section_tests name_the_crash section_attention section_step

# run NAME SECONDS: runs section_NAME under its time box into OUT/NAME.txt; one summary line.
run() {
  local name=$1 limit=$2 t0=$SECONDS rc
  echo "== $name (at most ${limit} s)"
  timeout --kill-after=10 "$limit" bash -c "set -o pipefail; section_$name" 2>&1 |
    tee "$OUT_DIR/$name.txt"
  rc=${PIPESTATUS[0]}
  local verdict=PASS
  [ "$rc" = 0 ] || verdict="FAIL (exit $rc$([ "$rc" = 124 ] && echo ', time box'))"
  [ "$rc" = 0 ] || failed=1
  echo "$name: $verdict in $((SECONDS - t0)) s" >>"$summary"
  return "$rc"
}

# Which sections run: all by default, or those named after OUT_DIR (env always runs; build
# runs unless the binaries are there and it is not named).
sections=("${@:2}")
[ ${#sections[@]} -gt 0 ] || sections=(build tests attention step)
wanted() { [[ " ${sections[*]} " == *" $1 "* ]]; }

if ! run env 20 >/dev/null; then
  echo "gpu-check: no usable GPU here (nvidia-smi or torch.cuda sees none); $OUT_DIR/env.txt says what was found" >&2
  exit 2
fi
cat "$OUT_DIR/env.txt"
if wanted build || [ ! -x "$BUILD_DIR/cuda/bin/ddpd_cuda_core_tests" ]; then
  run build 170 || { cat "$summary"; exit 1; }
fi
! wanted tests || run tests 120
! wanted attention || run attention 60
! wanted step || run step 90
echo "total: $((SECONDS - start)) s" >>"$summary"
echo "== summary"
cat "$summary"
exit "$failed"

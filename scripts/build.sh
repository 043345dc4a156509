#!/usr/bin/env bash
# Configures and builds ddpd (Release, Ninja, -j2 by default: BUILD_JOBS overrides).
# Usage: scripts/build.sh [cpu|cuda] [all|demo|TARGET...]
#   scripts/build.sh            the CPU build into build/, every target (what the tests and
#                               images use)
#   scripts/build.sh cpu demo   the CPU build, only what `ddpctl local` runs: ddpd-coordinator,
#                               ddpd-worker and ddpctl (scripts/demo.sh; no test binary)
#   scripts/build.sh cpu T...   the CPU build, only the named targets
#   scripts/build.sh cuda       the CUDA build, into build/ too: every CPU target, and beside them
#                               in build/cuda/bin ddpd-worker, ddpd-train and the CUDA tests,
#                               linked against the wheel's torch_cuda, c10_cuda and NCCL, with
#                               nvcc for sm_80 and sm_90 (no GPU needed). They share every object
#                               but the CUDA ones with the CPU binaries, so this costs a CPU build
#                               and about 120 s more on 2 cores, where a tree of its own cost 320.
#   scripts/build.sh cuda T...  the CUDA build, only the named targets (the CUDA binaries are
#                               ddpd-worker-cuda and ddpd-train-cuda)
# LibTorch is the torch 2.11.0 that scripts/setup.sh installs into .venv/ (cmake/torch.cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-cpu}
[ $# -eq 0 ] || shift
targets=()
case $variant in
  # Either way the CPU targets compile with the same flags, so switching rebuilds nothing of them.
  cpu) flags=(-DDDPD_WITH_CUDA=OFF) ;;
  cuda) flags=(-DDDPD_WITH_CUDA=ON) ;;
  *) echo "build: unknown variant '$variant' (expected cpu or cuda)" >&2; exit 2 ;;
esac
case ${1:-all} in
  all) [ $# -le 1 ] || { echo "build: 'all' takes no other target" >&2; exit 2; } ;;
  demo) targets=(ddpd-coordinator ddpd-worker ddpctl) ;;
  *) targets=("$@") ;;
esac
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}" >/dev/null
cmake --build build -j "${BUILD_JOBS:-2}" ${targets[@]+--target "${targets[@]}"}

#!/usr/bin/env bash
# Configures and builds ddpd (Release, Ninja, -j2 by default: BUILD_JOBS overrides).
# Usage: scripts/build.sh [cpu|cuda] [all|demo|TARGET...]
#   scripts/build.sh            the CPU build into build/, every target (what the tests and
#                               images use)
#   scripts/build.sh cpu demo   the CPU build, only what `ddpctl local` runs: ddpd-coordinator,
#                               ddpd-worker and ddpctl (scripts/demo.sh; no test binary)
#   scripts/build.sh cpu T...   the CPU build, only the named targets
#   scripts/build.sh cuda       the CUDA build into build-cuda/: the core, ddpd-train, ddpd-worker,
#                               the kernels and the CUDA tests, linked against the wheel's torch_cuda,
#                               c10_cuda and NCCL with nvcc for sm_80 and sm_90 (no GPU needed)
# LibTorch is the torch 2.11.0 that scripts/setup.sh installs into .venv/ (cmake/torch.cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-cpu}
[ $# -eq 0 ] || shift
targets=()
case $variant in
  cpu) dir=build flags=() ;;
  cuda)
    dir=build-cuda flags=(-DDDPD_WITH_CUDA=ON)
    targets=(ddpd-train ddpd-worker ddpd_cuda_core_tests ddpd_cuda_kernel_tests
             ddpd_cuda_emulated_tests ddpd-bench-flash-sdpa)
    ;;
  *) echo "build: unknown variant '$variant' (expected cpu or cuda)" >&2; exit 2 ;;
esac
case ${1:-all} in
  all) [ $# -le 1 ] || { echo "build: 'all' takes no other target" >&2; exit 2; } ;;
  demo) targets=(ddpd-coordinator ddpd-worker ddpctl) ;;
  *) targets=("$@") ;;
esac
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${flags[@]}" >/dev/null
cmake --build "$dir" -j "${BUILD_JOBS:-2}" ${targets[@]+--target "${targets[@]}"}

#!/usr/bin/env bash
# Builds the training core, kernels, ddpd-train, the CUDA tests and benchmarks on a GPU machine
# that has a CUDA LibTorch >= 2.11 (inside Python's torch package), CMake and nvcc, but no gRPC
# and no package registry. Needs build-deps/ from scripts/stage-deps.sh (carried along).
# Usage: scripts/device-build.sh [BUILD_DIR (build-cuda)]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-cuda}
python=${PYTHON:-python3}
export CUDACXX=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
arch=${DDPD_CUDA_ARCHITECTURES:-90}
cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DDDPD_CORE_ONLY=ON \
  -DDDPD_WITH_CUDA=ON -DDDPD_PYTHON="$(command -v "$python")" -DDDPD_CUDA_ARCHITECTURES="$arch" \
  -DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON
cmake --build "$dir" -j "${BUILD_JOBS:-$(nproc)}"

#!/usr/bin/env bash
# Configures and builds ddpd into build/ (Release, Ninja, -j2 by default: BUILD_JOBS overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "${BUILD_JOBS:-2}"

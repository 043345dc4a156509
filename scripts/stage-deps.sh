#!/usr/bin/env bash
# Copies the header-only dependencies (CLI11, nlohmann/json) and GoogleTest's sources from this
# machine's Debian packages into build-deps/, for a machine that has a (CUDA) LibTorch but no
# package registry: CMake falls back to build-deps/ when find_package finds nothing there.
# Run on a machine where scripts/setup.sh ran; build-deps/ is git-ignored (carry it along).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf build-deps
mkdir -p build-deps/include
cp -r /usr/include/CLI /usr/include/nlohmann build-deps/include/
cp -r /usr/src/googletest build-deps/googletest
du -sh build-deps

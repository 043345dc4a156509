#!/usr/bin/env bash
# Quick start, command 2: install dependencies, build, and run every test (CTest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j "${TEST_JOBS:-2}"

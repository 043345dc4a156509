#!/usr/bin/env bash
# Straggler precision as issue 38 asks for it, on this host: RUNS (default 10) runs each of the
# demo job, every docs/examples/ job file and 2-rank `ddpctl local` runs of each strategy, with no
# straggler event allowed, and RUNS uninjected and RUNS injected (slow:rank=R, ×3) jobs at world
# 2, 3 and 4, the injected ones naming R alone, once. CTest runs the same checks
# DDPD_STRAGGLER_RUNS times (1: tests/CMakeLists.txt) to keep the test command's time down.
# Run it on an otherwise idle host: another process's load is a straggler.
# Usage: scripts/straggler-check.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-10}
bash scripts/build.sh cpu ddpd_coordinator_tests ddpd_straggler_tests
build/bin/ddpd_coordinator_tests --gtest_filter='StragglerWatch.*:*StragglerPrecision.*'
DDPD_STRAGGLER_RUNS=$runs build/bin/ddpd_straggler_tests

#!/usr/bin/env bash
# Quick start, command 1: install dependencies, build, and run the main job on its embedded
# default: `ddpctl local` starts a coordinator and two workers on loopback and trains the tiny
# Transformer LM with the bucketed strategy over two ranks (real c10d Gloo) on the bytes of a
# text every Debian system has (the GPL), so the loss visibly falls from ln 256 ≈ 5.5; it
# prints each step, the held-out loss, the summary and the memory profile, then shuts down.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh demo  # the build's packages, and torch without its CUDA wheels
bash scripts/build.sh cpu demo  # the three binaries it runs, no test
# The job is docs/examples/demo.yaml (a job file: flags on the command line would win).
build/bin/ddpctl local --workers 2 ddp -f docs/examples/demo.yaml

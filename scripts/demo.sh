#!/usr/bin/env bash
# Quick start, command 1: install dependencies, build, and run the main job on its embedded
# default — DDP training of the tiny Transformer LM with the bucketed strategy over two ranks
# on loopback Gloo, then the same job in one process for comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
job=(run ddp --model tiny --strategy bucketed --bucket-mb 1 --batch 8 --context 64 --steps 10)
echo "== 2 ranks, bucketed, loopback Gloo"
bash scripts/launch-local.sh 2 -- build/worker/ddpd-worker "${job[@]}"
echo "== 1 process"
build/worker/ddpd-worker "${job[@]}"

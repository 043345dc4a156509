#!/usr/bin/env bash
# Quick start, command 1: install dependencies, build, and run the main job on its embedded
# default: `ddpctl local` starts a coordinator and two workers on loopback and trains the tiny
# Transformer LM with the bucketed strategy over two ranks (real c10d Gloo), printing each
# step, the summary and the memory profile, then shuts everything down.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build/bin/ddpctl local --workers 2 ddp --model tiny --strategy bucketed --bucket-mb 1 \
  --batch 8 --context 64 --steps 10

#!/usr/bin/env bash
# Starts NPROC copies of a command on this host with torchrun-style variables, like
# `torchrun --standalone --nproc-per-node NPROC`. Waits for all; exits non-zero if any failed.
# Usage: scripts/launch-local.sh NPROC [PORT] -- command args...
set -euo pipefail
nproc=$1; shift
port=$((29500 + RANDOM % 2000))
if [ "${1:-}" != "--" ]; then port=$1; shift; fi
[ "${1:-}" = "--" ] && shift
pids=()
for ((rank = 0; rank < nproc; rank++)); do
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$rank LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$nproc WORLD_SIZE=$nproc \
    "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status

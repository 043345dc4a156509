#!/usr/bin/env bash
# On a machine without a GPU, the CUDA build's ddpd-train refuses --device cuda in one line that
# says no CUDA device is available, with exit code 2: it loads (no library missing), does not
# crash, and prints no backtrace. Skips (77) where a GPU is visible.
# Usage: no_device_test.sh BIN_DIR
set -uo pipefail
bin=$(cd "${1:?usage: no_device_test.sh BIN_DIR}" && pwd)
if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then echo "SKIP: this machine has a GPU"; exit 77; fi
err=$(mktemp)
trap 'rm -f "$err"' EXIT
env -u WORLD_SIZE -u RANK -u LOCAL_RANK -u CUDA_VISIBLE_DEVICES \
  "$bin/ddpd-train" --device cuda --model tiny --steps 2 --batch 2 --context 16 >/dev/null 2>"$err"
rc=$?
echo "exit $rc; stderr: $(cat "$err")"
[ "$rc" = 2 ] || { echo "FAIL: exit $rc, expected 2"; exit 1; }
[ "$(wc -l <"$err")" = 1 ] || { echo "FAIL: $(wc -l <"$err") lines on stderr, expected 1"; exit 1; }
grep -q 'no CUDA device is available' "$err" || { echo "FAIL: the line does not say no CUDA device is available"; exit 1; }
echo PASS

#!/usr/bin/env bash
# The GPU worker image (deploy/docker/build-images.sh --cuda: FROM scratch, the CUDA build's
# ddpd-worker and ddpd-train with every library they load, the wheel's torch_cuda, NCCL, cuDNN
# and cuBLAS among them). In a container on this GPU-less machine, ddpd-train --device cuda exits
# 2 with the one no-device line: every library it needs resolved inside the image. Prints the
# image's size, then removes it. Starts dockerd if none answers (as root) and stops the one it
# started.
# Usage: image_test.sh BIN_DIR   (exit 0 pass, 1 fail, 77 skip: a GPU here, or no Docker engine)
set -uo pipefail
source "$(dirname "$0")/../support/shell_helpers.sh"
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=$(cd "${1:?usage: image_test.sh BIN_DIR}" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
if ls /dev/nvidia[0-9]* >/dev/null 2>&1; then skip "this machine has a GPU"; fi
command -v docker >/dev/null || skip "no docker client (scripts/setup.sh installs docker.io)"
work=$(mktemp -d /tmp/ddpd-cuda-image-XXXXXX)
started_dockerd=""
cleanup() {
  docker image rm -f ddpd:cuda >/dev/null 2>&1
  stop_started_dockerd
  rm -rf "$work"
}
trap cleanup EXIT
ensure_dockerd "$work/dockerd.log"

start=$(date +%s)
DDPD_CUDA_BIN_DIR="$bin" "$repo/deploy/docker/build-images.sh" --cuda >"$work/image.log" 2>&1 ||
  { tail -n 5 "$work/image.log"; echo "FAIL: building ddpd:cuda"; exit 1; }
echo "image: $(grep -E '^ddpd:cuda ' "$work/image.log") ($(grep '^bundle:' "$work/image.log")), built in $(( $(date +%s) - start )) s"

docker run --rm --network none ddpd:cuda ddpd-train --device cuda --model tiny --steps 2 \
  --batch 2 --context 16 >/dev/null 2>"$work/err"
rc=$?
echo "in the container: exit $rc; stderr: $(cat "$work/err")"
[ "$rc" = 2 ] || { echo "FAIL: exit $rc, expected 2"; exit 1; }
[ "$(wc -l <"$work/err")" = 1 ] || { echo "FAIL: $(wc -l <"$work/err") lines on stderr, expected 1"; exit 1; }
grep -q 'no CUDA device is available' "$work/err" ||
  { echo "FAIL: the line does not say no CUDA device is available"; exit 1; }
docker run --rm --network none ddpd:cuda ddpd-worker --help >/dev/null 2>"$work/err" ||
  { cat "$work/err"; echo "FAIL: ddpd-worker does not start in the image"; exit 1; }
echo PASS

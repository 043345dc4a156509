#!/usr/bin/env bash
# Builds the images the compose stack runs, with no registry:
#   ddpd:latest             FROM scratch: ddpd-coordinator, ddpd-worker, ddpctl and their libraries
#   ddpd-prometheus:latest  FROM scratch: Debian's prometheus and promtool
# Default: bundle the binaries this checkout built (build/bin, scripts/build.sh; DDPD_BIN_DIR
#   overrides) — seconds.
# --from-source: make the bookworm base image (debootstrap) if missing and build
#   deploy/docker/Dockerfile (toolchain stage, then the scratch runtime stage) — minutes.
# --cuda: ddpd:cuda, FROM scratch: the CUDA build's ddpd-worker and ddpd-train (build/cuda/bin,
#   scripts/build.sh cuda; DDPD_CUDA_BIN_DIR overrides) with every library they load, the
#   wheel's torch_cuda, NCCL, cuDNN and cuBLAS included; the driver comes from the host at run
#   time. Dockerfile.cuda builds the same from source where an nvidia/cuda image can be pulled.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-prebuilt}
here=deploy/docker
context=$(mktemp -d /tmp/ddpd-image-XXXXXX)
trap 'rm -rf "$context"' EXIT
printf 'FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/local/bin\nWORKDIR /var/lib/ddpd\n' \
  >"$context/Dockerfile"

if [ "$mode" = --cuda ]; then
  bin=${DDPD_CUDA_BIN_DIR:-build/cuda/bin}
  for b in ddpd-worker ddpd-train; do
    [ -x "$bin/$b" ] || { echo "$bin/$b missing: bash scripts/build.sh cuda first" >&2; exit 1; }
  done
  "$here/bundle-runtime.sh" "$context/rootfs" "$bin/ddpd-worker" "$bin/ddpd-train"
  docker build -q --network host -t ddpd:cuda "$context" >/dev/null
  docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^ddpd:cuda '
  exit 0
fi
if [ "$mode" = --from-source ]; then
  "$here/make-base-image.sh"
  docker build --network host -f "$here/Dockerfile" -t ddpd:latest .
else
  bin=${DDPD_BIN_DIR:-build/bin}
  for b in ddpd-coordinator ddpd-worker ddpctl; do
    [ -x "$bin/$b" ] || { echo "$bin/$b missing: bash scripts/build.sh first" >&2; exit 1; }
  done
  "$here/bundle-runtime.sh" "$context/rootfs" "$bin/ddpd-coordinator" "$bin/ddpd-worker" \
    "$bin/ddpctl"
  docker build -q --network host -t ddpd:latest "$context" >/dev/null
fi
rm -rf "$context/rootfs"
"$here/bundle-runtime.sh" "$context/rootfs" "$(command -v prometheus)" "$(command -v promtool)"
mkdir -p "$context/rootfs/prometheus"
docker build -q --network host -t ddpd-prometheus:latest "$context" >/dev/null
docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^ddpd(-prometheus)?:latest '

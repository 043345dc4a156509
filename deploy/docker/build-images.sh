#!/usr/bin/env bash
# Builds the images the compose stack runs, with no registry:
#   ddpd:latest             FROM scratch: ddpd-coordinator, ddpd-worker, ddpctl and their libraries
#   ddpd-prometheus:latest  FROM scratch: Debian's prometheus and promtool
# Default: bundle the binaries this checkout built (build/bin, scripts/build.sh; DDPD_BIN_DIR
#   overrides) — seconds.
# --from-source: make the bookworm base image (debootstrap) if missing and build
#   deploy/docker/Dockerfile (toolchain stage, then the scratch runtime stage) — minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode=${1:-prebuilt}
here=deploy/docker
context=$(mktemp -d /tmp/ddpd-image-XXXXXX)
trap 'rm -rf "$context"' EXIT
printf 'FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/local/bin\nWORKDIR /var/lib/ddpd\n' \
  >"$context/Dockerfile"

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
